"""Claim `fedch`: FedCH vs FedAvg and FedAsync — completion time and network traffic (claims reproduction).

    .venv/bin/python analysis/claims/fedch/claim.py [--resume] [--no-write]

Paper (Wang et al., IEEE TMC 22(7) 2023, abstract; docs/explanation/algorithms.md §2.7): FedCH reduces the
completion time by 49.5–79.5 % and the network traffic by 57.4–80.8 % against existing FL
mechanisms; the INFOCOM'21 precursor compares with FedAvg and FedAsync (H = 10, a = 5, b = 1,
lr 0.01, best K in 10–25, IID data with Gaussian-skewed sizes) and reports that DCFL keeps training
when 30 % of the devices fail. Three sweeps:

* ``compare.yaml`` — the claim: time to the target accuracy and bytes through the cloud to it,
  FedCH K = 10 and 25 against FedAvg and FedAsync, per seed (paired ratios);
* ``failures.yaml`` — 30 % of the devices leave for good at t = 10 s: FedAvg, static CFL, DCFL;
* ``noniid.yaml`` — the investigation the issue asks for: the shipped ``scenarios/fedch.yaml`` on
  non-IID Synthetic(0.5, 0.5), one [D] choice of docs/explanation/algorithms.md changed at a time. For each run the
  script also measures how the final global model weighs the devices' data (``mixing``), which is
  what explains the outcome.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import (  # noqa: E402
    ClaimResult,
    by_group,
    changed,
    cli,
    evals,
    first_reaching,
    fmt,
    mean_ci,
    metrics,
    paired,
    rel,
    run_sweep,
    write_result,
)

HERE = Path(__file__).resolve().parent
TARGET = 0.5          # fedch.yaml's evaluation/stop target [D]
NONIID_TARGET = 0.6   # the shipped study's target (analysis/sweeps/fedch.yaml)
TRIAL_WALL: list[float] = []  # every trial's summary wall_s, for the timing line
D2D_UNIT = 0.1        # INFOCOM note's cost accounting: device <-> leader = 0.1 of a leader <-> cloud transfer


def t_target(run, target: float = TARGET) -> float | None:
    m = first_reaching(run, target)
    return None if m is None else float(m["t"])


def cloud_mb(run, target: float = TARGET) -> float | None:
    m = first_reaching(run, target)
    return None if m is None else m["bytes_cloud"] / 1e6


def cost_units(run, target: float = TARGET) -> float | None:
    """INFOCOM cost accounting (leader/device <-> cloud = 1, device <-> leader = 0.1), in MB-units."""
    m = first_reaching(run, target)
    return None if m is None else (m["bytes_cloud"] + D2D_UNIT * m.get("bytes_d2d", 0)) / 1e6


def final_acc(run) -> float:
    return float(evals(run)[-1]["accuracy"])


def acc_at(run, t: float) -> float:
    """Accuracy of the last evaluation at or before virtual time ``t``."""
    best = None
    for m in evals(run):
        if m["t"] <= t + 1e-9:
            best = m["accuracy"]
    return float(best)


def last_gain_t(run, eps: float = 0.005) -> float:
    """Virtual time of the last evaluation that beat the best accuracy so far by more than ``eps``."""
    best, when = -1.0, 0.0
    for m in evals(run):
        if m["accuracy"] > best + eps:
            best, when = m["accuracy"], float(m["t"])
    return when


def active_clusters(run, after: float) -> float:
    """How many distinct clusters (cloud ``ids``) still got a model applied after virtual time ``after``."""
    return float(len({i for m in metrics(run) if m.get("event") == "cloud_aggregate" and m["t"] >= after
                      for i in m.get("ids", [])}))


def mixing(run) -> dict[str, float] | None:
    """How the final global model of a FedCH run weighs the devices' data.

    Every cloud step is ``w <- (1 - a_j) w + a_j w_k``, so update j ends with weight
    ``a_j * prod_{i > j} (1 - a_i)`` in the final model (the initial model keeps the rest); a cluster
    model is its members' sample-weighted average (wait_all: every member). Returns the total
    variation distance between that per-device weight and the devices' data shares (0 = FedAvg's
    weighting), the weight on the fastest 20 % and on the largest 10 % of devices (by samples) against
    their data shares, and how many cloud updates make up 90 % of the final model. None for runs that re-clustered or are not FedCH.
    """
    if (run.config.get("protocol") or {}).get("name") != "fedch":
        return None
    clusters = [json.loads(line) for line in open(run.dir / "clusters.jsonl", encoding="utf-8")] \
        if (run.dir / "clusters.jsonl").is_file() else []
    if len(clusters) != 1:
        return None
    members = clusters[0]["members"]
    with open(run.dir / "devices.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    samples = {int(r["device"]): float(r["samples"]) for r in rows}
    speed = {int(r["device"]): float(r["speed_sps"]) for r in rows}
    steps = [(m["ids"][0], m["weights"][0]) for m in metrics(run) if m.get("event") == "cloud_aggregate"]
    weight = {d: 0.0 for d in samples}
    keep, n90, acc = 1.0, 0, 0.0
    for k, a in reversed(steps):
        w = a * keep
        keep *= 1.0 - a
        if acc < 0.9:
            n90 += 1
            acc += w
        tot = sum(samples[d] for d in members[k])
        for d in members[k]:
            weight[d] += w * samples[d] / tot
    mass = sum(weight.values()) or 1.0
    total = sum(samples.values())
    tv = 0.5 * sum(abs(weight[d] / mass - samples[d] / total) for d in samples)
    fast = sorted(samples, key=lambda d: -speed[d])[: max(1, len(samples) // 5)]
    big = sorted(samples, key=lambda d: -samples[d])[: max(1, len(samples) // 10)]
    return {"tv": tv, "fast_weight": sum(weight[d] for d in fast) / mass,
            "fast_data": sum(samples[d] for d in fast) / total, "n90": float(n90),
            "big_weight": sum(weight[d] for d in big) / mass, "big_data": sum(samples[d] for d in big) / total}


def compare(args) -> tuple[dict, str, str, str]:
    runs = run_sweep(HERE / "compare.yaml", args)
    TRIAL_WALL.extend(r.summary.get("wall_s", 0.0) for r in runs)
    g = by_group(runs, changed("scenario"))
    lines = ["### Main comparison (compare.yaml; target accuracy %.2f, stop at the target or 300 s)" % TARGET, "",
             "| protocol | time to target (s) | MB via cloud to target | cost units to target (cloud 1, d2d 0.1) "
             "| cloud aggregations to target |", "|---|---|---|---|---|"]
    values: dict = {"target": TARGET, "per_protocol": {}}
    for label, rs in g.items():
        aggs = [(first_reaching(r, TARGET) or {}).get("cloud_aggregations") for r in rs]
        lines.append(f"| {label} | {fmt([t_target(r) for r in rs], 1)} | {fmt([cloud_mb(r) for r in rs], 2)} | "
                     f"{fmt([cost_units(r) for r in rs], 2)} | {fmt(aggs, 0)} |")
        values["per_protocol"][label] = {"t_target": [t_target(r) for r in rs], "mb_cloud": [cloud_mb(r) for r in rs],
                                         "cost_units": [cost_units(r) for r in rs], "seeds": [r.seed for r in rs]}
    lines += ["", "Paired per-seed changes of FedCH against each baseline (negative = FedCH better):", "",
              "| FedCH | vs | completion time | traffic via cloud | cost units |", "|---|---|---|---|---|"]
    rel_ch = lambda x, y: 100.0 * (x / y - 1.0)  # noqa: E731
    ours_parts, time_means, traffic_means = [], [], []
    for ch in ("fedch K=10", "fedch K=25"):
        for base in ("fedavg", "fedasync"):
            dt = paired(g[ch], g[base], t_target, rel_ch)
            db = paired(g[ch], g[base], cloud_mb, rel_ch)
            dc = paired(g[ch], g[base], cost_units, rel_ch)
            values[f"{ch} vs {base}"] = {"time_pct": dt, "traffic_pct": db, "cost_pct": dc}
            lines.append(f"| {ch} | {base} | {fmt(dt, 1, ' %')} | {fmt(db, 1, ' %')} | {fmt(dc, 1, ' %')} |")
            if ch == "fedch K=10":
                ours_parts.append(f"vs {base}: time {fmt(dt, 1, ' %')}, cloud traffic {fmt(db, 1, ' %')}")
                time_means.append(mean_ci(dt)[0])
                traffic_means.append(mean_ci(db)[0])
    ours = "K = 10, to accuracy %.2f — " % TARGET + "; ".join(ours_parts)
    faster = [m < 0 for m in time_means]
    cheaper = [m < 0 for m in traffic_means]
    agrees = "yes" if all(faster) and all(cheaper) else ("no" if not any(faster) and not any(cheaper) else "partly")
    return values, "\n".join(lines), ours, agrees


def failures(args) -> tuple[dict, str]:
    runs = run_sweep(HERE / "failures.yaml", args)
    TRIAL_WALL.extend(r.summary.get("wall_s", 0.0) for r in runs)
    g = by_group(runs, changed("scenario"))
    lines = ["### 30 % device failures (failures.yaml; 30 % of the devices leave for good at t = 10 s, 40 s horizon)",
             "", "| protocol | accuracy at 10 s | final accuracy (40 s) | gain after the failure | last gain > 0.005 at (s) "
             "| clusters still aggregating after 20 s | re-clusterings |",
             "|---|---|---|---|---|---|---|"]
    values: dict = {}
    for label, rs in g.items():
        a10 = [acc_at(r, 10.0) for r in rs]
        fin = [final_acc(r) for r in rs]
        gain = [f - a for f, a in zip(fin, a10)]
        last = [last_gain_t(r) for r in rs]
        live = [active_clusters(r, 20.0) for r in rs]
        reclu = [sum(1 for m in metrics(r) if m.get("event") == "recluster") for r in rs]
        values[label] = {"acc_10s": a10, "final": fin, "gain": gain, "last_gain_t": last, "active_clusters": live,
                         "reclusterings": reclu}
        lines.append(f"| {label} | {fmt(a10, 3)} | {fmt(fin, 3)} | {fmt(gain, 3)} | {fmt(last, 1)} | "
                     f"{fmt(live, 1) if label != 'fedavg' else '–'} | {fmt(reclu, 1)} |")
    return values, "\n".join(lines)


def noniid(args) -> tuple[dict, str]:
    runs = run_sweep(HERE / "noniid.yaml", args)
    TRIAL_WALL.extend(r.summary.get("wall_s", 0.0) for r in runs)
    g = by_group(runs, changed("scenario"))
    lines = ["### Non-IID investigation (noniid.yaml: scenarios/fedch.yaml on Synthetic(0.5, 0.5), one factor "
             "changed at a time, 60 s, target %.1f)" % NONIID_TARGET, "",
             "| variant | final accuracy | Δ vs shipped (paired) | time to 0.6 (s) | TV(model weight, data share) "
             "| weight on fastest 20 % (their data share) | weight on largest 10 % (their data share) "
             "| updates making 90 % of the model |",
             "|---|---|---|---|---|---|---|---|"]
    values: dict = {}
    shipped = g["fedch shipped"]
    for label, rs in g.items():
        fin = [final_acc(r) for r in rs]
        d = paired(rs, shipped, final_acc, lambda x, y: x - y)
        tt = [t_target(r, NONIID_TARGET) for r in rs]
        mx = [mixing(r) for r in rs]
        ok = [m for m in mx if m is not None]
        tv = fmt([m["tv"] for m in ok], 2) if ok else "–"
        fw = (f"{fmt([m['fast_weight'] for m in ok], 2)} ({mean_ci([m['fast_data'] for m in ok])[0]:.2f})"
              if ok else "–")
        bw = (f"{fmt([m['big_weight'] for m in ok], 2)} ({mean_ci([m['big_data'] for m in ok])[0]:.2f})"
              if ok else "–")
        n90 = fmt([m["n90"] for m in ok], 1) if ok else "–"
        mean = lambda xs: mean_ci(xs)[0]  # noqa: E731
        values[label] = {"final": fin, "delta_vs_shipped": d, "t_0.6": tt, "mixing": mx,
                         "mean_final": mean(fin), "reached": sum(t is not None for t in tt), "n": len(rs),
                         "mean_tv": mean([m["tv"] for m in ok]) if ok else None,
                         "mean_fast_weight": mean([m["fast_weight"] for m in ok]) if ok else None,
                         "mean_fast_data": mean([m["fast_data"] for m in ok]) if ok else None,
                         "mean_n90": mean([m["n90"] for m in ok]) if ok else None,
                         "seeds": [r.seed for r in rs]}
        lines.append(f"| {label} | {fmt(fin, 3)} | {fmt(d, 3) if label != 'fedch shipped' else '–'} | "
                     f"{fmt(tt, 1)} | {tv} | {fw} | {bw} | {n90} |")
    return values, "\n".join(lines)


def main() -> None:
    args = cli("fedch", __doc__)
    v_cmp, t_cmp, ours, agrees = compare(args)
    v_fail, t_fail = failures(args)
    v_nid, t_nid = noniid(args)
    trial_wall = sum(float(x) for x in TRIAL_WALL)
    timing = (f"Timing: the trials' own wall times (summary.json `wall_s`) sum to {trial_wall:.0f} s "
              f"over {len(TRIAL_WALL)} trials, run 2 at a time on a 2-core machine shared with other jobs (load "
              f"average {os.getloadavg()[0]:.0f} when this script finished), so every figure is inflated by the load. " + MEASURED)
    details = "\n\n".join([SETTING, t_cmp, reading_cmp(v_cmp), t_fail, reading_fail(v_fail), t_nid,
                             reading_noniid(v_nid), timing])
    result = ClaimResult(
        id="fedch",
        claim="FedCH cuts completion time and network traffic against FedAvg and FedAsync",
        source="Wang et al., IEEE TMC 22(7) 2023 abstract; INFOCOM'21 precursor (docs/explanation/algorithms.md §2.7)",
        paper="completion time −49.5 … −79.5 %; network traffic −57.4 … −80.8 %",
        ours=ours,
        agrees=agrees,
        scenario=[rel(HERE / "fedch.yaml"), rel(HERE / "compare.yaml"), rel(HERE / "failures.yaml"),
                  rel(HERE / "noniid.yaml")],
        notes=notes(v_cmp),
        seeds=sorted({r for v in v_cmp["per_protocol"].values() for r in v["seeds"]}),
        values={"compare": v_cmp, "failures": v_fail, "noniid": v_nid},
        details=details,
        order=30,
    )
    write_result(result, args)


SETTING = """**Setting** (analysis/claims/fedch/fedch.yaml; every key cited there): the INFOCOM'21 precursor's
H = 10 local steps, lr 0.01, a = 5, b = 1, α = 1 − (K−1)/N, K = 10 (and 25, the ends of its best-K range),
IID labels with Gaussian-skewed data sizes (`partition: gaussian_sizes`, σ = 0.5 of the mean [D]) and a
logistic-regression model (the paper's LR; Synthetic-IID of FedProx stands in for MNIST, which is not
available offline [D]); 50 devices with lognormal speeds (σ = 1) as in scenarios/fedch.yaml [D: the paper's
N and device figures were not recovered]. FedAvg takes every device every round; FedAsync uses §5.3's
defaults (α = 0.6, polynomial(0.5), ρ = 0.005) with every device training at once. Every protocol does the
same 10 local steps of 10 samples per job. Accuracy matters, so the model trains (small: 610 parameters)."""

def _m(xs) -> float:
    return mean_ci(xs)[0]


def reading_cmp(v: dict) -> str:
    """What the main comparison says, from its numbers."""
    pp = v["per_protocol"]
    t = {k: _m(x["t_target"]) for k, x in pp.items()}
    mb = {k: _m(x["mb_cloud"]) for k, x in pp.items()}
    never = {k: sum(y is None for y in x["t_target"]) for k, x in pp.items()}
    text = [f"**Reading.** To accuracy {TARGET}, FedCH K = 10 needs {t['fedch K=10']:.1f} s on average against "
            f"{t['fedavg']:.1f} s for FedAvg and {t['fedasync']:.1f} s for FedAsync (K = 25: {t['fedch K=25']:.1f} s), "
            f"and moves {mb['fedch K=10']:.2f} MB through the cloud against {mb['fedavg']:.2f} MB (FedAvg) and "
            f"{mb['fedasync']:.2f} MB (FedAsync)."]
    if any(never.values()):
        text.append("Runs that never reached the target within their cap: " +
                    ", ".join(f"{k} {n}" for k, n in never.items() if n) + " (left out of the means).")
    text.append("FedCH is faster than FedAvg because its fast clusters do not wait for the slowest device of "
                "the population (FedAvg's round is paced by its slowest of 50 lognormal devices); it moves far "
                "fewer bytes through the cloud than FedAsync because one cluster model replaces ~5 device "
                "uploads (the member → leader hops go over device-to-device links, `bytes_d2d`, weighted 0.1 in "
                "the INFOCOM cost units).")
    if t["fedasync"] <= t["fedch K=10"]:
        text.append("Against FedAsync the time claim does not hold here: with every device training at once "
                    "(docs/explanation/algorithms.md §5.3 default, concurrency = N) FedAsync mixes ~140 updates per virtual second, "
                    "each discounted by polynomial(0.5) staleness, and on this linear task that is at least as "
                    "fast as FedCH's cluster rounds; the paper's FedAsync configuration (concurrency, α) was not "
                    "recovered.")
    text.append("The seeds draw different Synthetic-IID data sets and speed draws, so times vary widely between "
                "seeds (the paired per-seed changes are the figure).")
    return " ".join(text)


def reading_fail(v: dict) -> str:
    """What the failure case says."""
    parts = [f"{k}: final {_m(x['final']):.3f}, gain after the failure {_m(x['gain']):+.3f}, last gain at "
             f"{_m(x['last_gain_t']):.1f} s" for k, x in v.items()]
    live = {k: _m(x["active_clusters"]) for k, x in v.items() if k != "fedavg"}
    parts.append("clusters still aggregating after 20 s (of 10): " +
                 ", ".join(f"{k} {n:.1f}" for k, n in live.items()))
    return ("**Reading.** " + "; ".join(parts) + ". Over this 40 s horizon (30 s after the failure) every "
            "protocol keeps improving" + (
                "; DCFL is not ahead of static CFL here: the clusters static CFL loses (their device leader left) "
                "hold IID data that the other clusters also have, and each of DCFL's re-clusterings withdraws every "
                "open cluster round (its work is wasted)" if _m(v["dcfl periodic"]["final"]) <= _m(v["cfl static"]["final"])
                else "; DCFL ends above static CFL") + ". In the emulator FedAvg does not stall when devices fail: "
            "a synchronous round stops waiting for a lost device and the next round selects only online devices "
            "(README, Dynamics), so the paper's FedAvg plateau (which waits for failed devices) is not reproduced. "
            "Static CFL loses every cluster whose device leader left (on_leader_lost: wait, docs/explanation/algorithms.md §2.5), "
            "DCFL rebuilds the clusters over the online devices at its next periodic re-clustering.")


def reading_noniid(v: dict) -> str:
    """The answer to the issue's question, from the numbers."""
    sh, fa = v["fedch shipped"], v["fedavg"]
    gap = fa["mean_final"] - sh["mean_final"]
    rows = sorted(((x["mean_final"] - sh["mean_final"], k, x) for k, x in v.items()
                   if k not in ("fedch shipped", "fedavg")), key=lambda t: -t[0])
    per_seed = []
    for i, seed in enumerate(sh["seeds"]):
        m = sh["mixing"][i]
        if m is None or seed not in fa["seeds"]:
            continue
        f_acc = fa["final"][fa["seeds"].index(seed)]
        per_seed.append(f"seed {seed}: the 5 largest users hold {m['big_data']:.2f} of the data and carry "
                        f"{m['big_weight']:.2f} of FedCH's final model; FedCH {sh['final'][i]:.3f} vs FedAvg "
                        f"{f_acc:.3f} (gap {f_acc - sh['final'][i]:+.3f})")
    lines = [
        f"**Why FedCH loses on non-IID data (the issue's question).** On the shipped scenario with "
        f"Synthetic(0.5, 0.5) FedCH ends at {sh['mean_final']:.3f} after 60 s against {fa['mean_final']:.3f} for "
        f"FedAvg (reached 0.6: FedCH {sh['reached']}/{sh['n']}, FedAvg {fa['reached']}/{fa['n']}). "
        "One [D]/[V] choice at a time (final accuracy, paired change against the shipped run of the same seed):",
    ]
    for d, k, x in rows:
        extra = (f"; TV {x['mean_tv']:.2f}, largest 10 % carry {x['mean_big_weight']:.2f}"
                 if x.get("mean_tv") is not None and x.get("mean_big_weight") is not None else "")
        lines.append(f"* {k}: {x['mean_final']:.3f} ({d:+.3f}; reached 0.6 in {x['reached']}/{x['n']}){extra}")
    best_d, best_k, _ = rows[0]
    closes = 100 * best_d / gap if gap > 0 else float("nan")
    dd = {k: d for d, k, _ in rows}
    b0 = v.get("b=0 constant staleness")
    b0_seeds = ", ".join(f"{x:+.3f}" for x in b0["delta_vs_shipped"] if x is not None) if b0 else ""
    lines.append(
        f"The largest single change is **{best_k}** ({best_d:+.3f}, {closes:.0f} % of the {gap:.3f} gap to FedAvg"
        + (f"; per seed {b0_seeds}" if best_k == "b=0 constant staleness" else "") + "). "
        f"The two [D]-side choices tested do not close the gap: `alpha_init: fraction` (α = (K−1)/N = 0.18 instead "
        f"of 0.82; the [V] reading is `one_minus`) changes it by {dd.get('alpha_init=fraction', float('nan')):+.3f} — a "
        f"smaller α only lengthens the moving average (90 % of the model from "
        f"{v['alpha_init=fraction']['mean_n90']:.0f} updates instead of {sh['mean_n90']:.0f}) but keeps its weighting "
        f"by arrival — and `distance: sum` (clusters by communication only, mixed paces; §2.3 [B] vs the [D] "
        f"`abs_diff`) by {dd.get('distance=sum', float('nan')):+.3f}. "
        "What decides the outcome is how FedCH's final model weighs the users against how the data (and so the "
        "pooled test set, 10 % of every user's samples) is spread over them. Synthetic(α, β) gives user k "
        "n_k = LogNormal(4, 2) + 50 samples (§6.3), so a handful of users hold most of the data, each with its own "
        "labelling model. FedAvg weights every device by its samples, which is the test set's weighting. FedCH "
        "weighs devices by samples only inside a cluster; across clusters the cloud's step "
        "w ← (1 − α_τ)w + α_τ·w_k (§2.1 [V]) gives each arriving cluster model the same α whatever data it holds, "
        "so the final model is an arrival-ordered moving average over clusters, dominated by the fast clusters "
        "(they send most steps; `abs_diff` groups devices of similar pace), and the staleness rule fedch(5, 1) "
        "[V] discounts the slow clusters further — which is why dropping it helps here, while on IID data "
        "(claim `fedch_staleness`) it helps a little. Per seed: " + "; ".join(per_seed) + ": FedCH loses most where "
        "the large users carry least of its model. So, to the issue's question \"α, K, the staleness function, or "
        "the data?\": mainly **the data** — power-law sizes with per-user labelling models, scored on a test set "
        "weighted like the data — meeting FedCH's data-blind cross-cluster mixing (§2.1, [V]); the staleness rule "
        "(also [V]) accounts for about a third of the gap; α's value and the [D] grouping distance do not explain "
        "it (the grouping by pace, `abs_diff` [D], is what makes the fast clusters fast, but mixing paces with "
        "`sum` was worse here). K = 5 on seed 21 (analysis/results/fedch_comparison.md) gave 0.562 against 0.574 "
        "for K = 10, so K is not it either. On IID labels (the paper's setting, and the claim above) every cluster "
        "fits the same task and the same mechanism is pure speed (−85 % on main's IID study).")
    return "\n".join(lines)


def notes(v: dict) -> str:
    """The table's short note, from the numbers."""
    m = {k: (_m(x["time_pct"]), _m(x["traffic_pct"])) for k, x in v.items() if k.startswith("fedch K=10 vs")}
    fa, fs = m["fedch K=10 vs fedavg"], m["fedch K=10 vs fedasync"]
    return (f"K = 10 vs FedAvg: time {fa[0]:+.0f} %, cloud traffic {fa[1]:+.0f} %; vs FedAsync (every device "
            f"training at once): time {fs[0]:+.0f} %, traffic {fs[1]:+.0f} %. K = 25 is slower. 30 % failures: "
            "nothing stalls in 40 s. The shipped study's non-IID loss is explained in the details (data sizes + "
            "data-blind cross-cluster mixing; the staleness rule a third of it).")


# The committed JSON was written by `--resume` re-reading sweeps that ran earlier (compare was interrupted
# once and finished; failures and noniid ran as parallel `hierfl sweep` processes), measured by hand:
MEASURED = ("The sweeps ran from 21:03 to 22:01 UTC on the shared 2-core machine at load average 44-94 "
            "(several helpers' claim runs at once); the JSON was then written by `claim.py --resume`, which only "
            "re-reads them, so this script's wall time in the header is that re-read.")


if __name__ == "__main__":
    main()
