"""Claim `fedhisyn`: FedHiSyn beats FedAvg, SCAFFOLD and FedAT in accuracy and efficiency under strong
speed heterogeneity (Li et al., ICPP 2022, arXiv 2206.10546; docs/explanation/algorithms.md §3.4).

The paper's abstract gives no numbers (docs/explanation/algorithms.md §3.4: check the ordering). We run the five
entries of sweep.yaml (FedAvg, SCAFFOLD, FedAT, FedHiSyn, and FedAT with uniform tier weights as an
ablation) on base.yaml over 5 seeds and report, per protocol,

* accuracy at the fixed time budget (the evaluation at t = 150 emulated s),
* time to 80 % test accuracy (first evaluation, every 5 s, at or above the target),
* and the local compute spent up to the target (device-seconds of training),

with FedHiSyn's per-seed advantage over each baseline (accuracy difference, time ratio). Nothing is
tuned (one shared lr), so there is no tuning sweep.

    .venv/bin/python analysis/claims/fedhisyn/claim.py [--resume] [--no-write]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import (ClaimResult, by_group, changed, cli, evals, first_reaching, fmt, mean_ci,  # noqa: E402
                    metrics, paired, rel, run_sweep, write_result)

HERE = Path(__file__).resolve().parent
TARGET = 0.8
BUDGET_S = 150.0
BASELINES = ("FedAvg", "SCAFFOLD", "FedAT")


def acc_at_budget(run: Any) -> float | None:
    """Accuracy of the evaluation at the time budget (the last one)."""
    lines = [m for m in evals(run) if m["t"] <= BUDGET_S + 1e-9]
    return float(lines[-1]["accuracy"]) if lines else None


def time_to_target(run: Any) -> float | None:
    """Emulated seconds to the first evaluation at or above the target (None: never)."""
    hit = first_reaching(run, TARGET)
    return None if hit is None else float(hit["t"])


def compute_to_target(run: Any) -> float | None:
    """Device-seconds of local training up to that evaluation."""
    hit = first_reaching(run, TARGET)
    return None if hit is None else float(hit["compute_s"])


def slow_tier(run: Any) -> dict[str, float]:
    """FedAT: when the slowest tier first reported, its round length, its final weight and share of updates."""
    aggs = [m for m in metrics(run) if m.get("event") == "edge_aggregate"]
    last = len(aggs[0]["tier_weights"]) - 1
    slow = [a for a in aggs if a["tier"] == last]
    before = [m for m in evals(run) if m["t"] < slow[0]["t"]]
    final = aggs[-1]
    return {"t_first_slow": float(slow[0]["t"]), "acc_before_slow": float(before[-1]["accuracy"]),
            "slow_round_s": float(slow[-1]["t"]) / len(slow),
            "slow_weight_final": float(final["tier_weights"][last]),
            "fast_weight_final": float(final["tier_weights"][0]),
            "slow_share_of_updates": final["tier_updates"][last] / sum(final["tier_updates"])}


def slow_tier_skew(run: Any) -> float:
    """Total-variation distance between the label mix of a FedAT run's slowest tier (its clusters.jsonl)
    and of all its devices (the data rebuilt from base.yaml with the run's seed)."""
    import numpy as np

    from hierfl.assemble import build
    from hierfl.scenario.loader import load_scenario

    tiers = json.loads((run.dir / "clusters.jsonl").read_text(encoding="utf-8").splitlines()[0])["members"]
    b = build(load_scenario(HERE / "base.yaml", [f"seed={run.seed}"]))
    y = b.dataset.y_train

    def mix(devices: Any) -> Any:
        h = np.bincount(y[np.concatenate([b.parts[d] for d in devices])], minlength=b.dataset.num_classes)
        return h / h.sum()

    return float(0.5 * np.abs(mix(tiers[-1]) - mix(range(b.world.num_devices))).sum())


def round_s(run: Any) -> float:
    """Mean length of a synchronous round (FedAvg): the budget over the rounds it closed."""
    return BUDGET_S / max(int(run.summary["rounds"]), 1)


def trial_walls(runs: list[Any]) -> tuple[float, int, float]:
    """Sum of the trials' wall_s (the sweep's sweep.csv), their count, and the span from the first
    trial's start to the last one's end (file times: also right when the sweep is only re-read)."""
    import csv

    sweep_dir = runs[0].dir.parents[1]
    with open(sweep_dir / "sweep.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    start = min((r.dir / "config.yaml").stat().st_mtime for r in runs)
    end = max((r.dir / "summary.json").stat().st_mtime for r in runs)
    return sum(float(r["wall_s"]) for r in rows if r.get("wall_s")), len(rows), end - start


def main() -> None:
    args = cli("fedhisyn", __doc__)
    runs = run_sweep(HERE / "sweep.yaml", args)
    groups = by_group(runs, changed("scenario"))
    seeds = sorted({r.seed for r in runs})
    per: dict[str, dict[str, list[float | None]]] = {}
    for name, rs in groups.items():
        per[name] = {"acc": [acc_at_budget(r) for r in rs], "ttt": [time_to_target(r) for r in rs],
                     "compute": [compute_to_target(r) for r in rs],
                     "jobs": [float(r.summary["totals"]["train_jobs"]) for r in rs]}
    hs = groups["FedHiSyn"]
    vs: dict[str, dict[str, list[float | None]]] = {}
    for b in BASELINES:
        vs[b] = {"acc_diff": paired(hs, groups[b], acc_at_budget, lambda x, y: x - y),
                 "speedup": paired(groups[b], hs, time_to_target)}  # baseline time / FedHiSyn time
    wins_acc = {b: mean_ci(vs[b]["acc_diff"])[0] > 0 for b in BASELINES}
    wins_time = {b: mean_ci(vs[b]["speedup"])[0] > 1 for b in BASELINES}
    sig_acc = {b: mean_ci(vs[b]["acc_diff"])[0] - mean_ci(vs[b]["acc_diff"])[1] > 0 for b in BASELINES}
    sig_time = {b: mean_ci(vs[b]["speedup"])[0] - mean_ci(vs[b]["speedup"])[1] > 1 for b in BASELINES}
    n_wins = sum(wins_acc.values()) + sum(wins_time.values())
    agrees = "yes" if n_wins == 2 * len(BASELINES) else ("no" if n_wins == 0 else "partly")
    fedat_slow = [slow_tier(r) for r in groups["FedAT"]]

    table = ["| protocol | accuracy at 150 s | time to 80 % (s) | compute to 80 % (device-s) | local jobs in 150 s |",
             "|---|---|---|---|---|"]
    for name in groups:
        p = per[name]
        table.append(f"| {name} | {fmt(p['acc'], 4)} | {fmt(p['ttt'], 1)} | {fmt(p['compute'], 0)} | "
                     f"{fmt(p['jobs'], 0)} |")
    pairs = ["| FedHiSyn vs | accuracy difference at 150 s | speed-up to 80 % (their time / FedHiSyn's) |",
             "|---|---|---|"]
    for b in BASELINES:
        pairs.append(f"| {b} | {fmt(vs[b]['acc_diff'], 4)}{' (CI > 0)' if sig_acc[b] else ''} | "
                     f"{fmt(vs[b]['speedup'], 2)}{' (CI > 1)' if sig_time[b] else ''} |")
    t_slow = fmt([s["t_first_slow"] for s in fedat_slow], 1)
    slow_round = fmt([s["slow_round_s"] for s in fedat_slow], 1)
    avg_round = fmt([round_s(r) for r in groups["FedAvg"]], 1)
    w_fast = fmt([s["fast_weight_final"] for s in fedat_slow], 3)
    skew = [slow_tier_skew(r) for r in groups["FedAT"]]
    load = os.getloadavg()[0]
    walls, n_trials, span = trial_walls(runs)
    acc_before = fmt([s["acc_before_slow"] for s in fedat_slow], 3)
    w_slow = fmt([s["slow_weight_final"] for s in fedat_slow], 2)
    share = fmt([s["slow_share_of_updates"] for s in fedat_slow], 3)
    uni_ttt, fedat_ttt = per["FedAT-uniform"]["ttt"], per["FedAT"]["ttt"]
    uni_acc = per["FedAT-uniform"]["acc"]

    ours = (f"accuracy at 150 s: FedHiSyn {fmt(per['FedHiSyn']['acc'], 3)}, "
            + ", ".join(f"{b} {fmt(per[b]['acc'], 3)}" for b in BASELINES)
            + f"; time to 80 %: FedHiSyn {fmt(per['FedHiSyn']['ttt'], 0, ' s')}, "
            + ", ".join(f"{b} {fmt(per[b]['ttt'], 0, ' s')}" for b in BASELINES))
    beaten = [b for b in BASELINES if wins_acc[b] and wins_time[b]]
    sig = [b for b in BASELINES if sig_acc[b]]
    notes = (f"FedHiSyn is ahead of {', '.join(beaten) if beaten else 'no baseline'} on both measures (means over "
             f"5 seeds; time-to-target speed-ups with CI > 1, accuracy margins significant only vs "
             f"{', '.join(sig) if sig else 'none'}); it pays with ~3x FedAvg's local compute to the target. FedAT is "
             "last: the paper's cross-tier weights hand ~70 % of the global model to the slowest tier; with uniform "
             "tier weights it matches FedHiSyn's time to target.")
    details = f"""**Setting** (`analysis/claims/fedhisyn/base.yaml`, `sweep.yaml`). The paper's body (device count,
speed distribution, datasets' split, model) could not be retrieved (docs/explanation/algorithms.md §0), so the setting is ours
[D]: 24 devices with lognormal speeds (σ = 1.2), 10-class Gaussian blobs split by label-Dirichlet α = 0.3,
an MLP (64 hidden units) trained for real (accuracy is the claim, so no timing-only mode), one local epoch
per job at lr 0.05 for every protocol (not tuned: no tuning sweep), every device taking part in every
round of every protocol, evaluation every 5 emulated s, budget 150 s, target 80 %. FedHiSyn: k = 3
capacity classes with rings, T auto (every device finishes one unit per round), time weighting
(docs/explanation/algorithms.md §3.2 defaults). FedAT: 3 equal-size tiers by profiled response time, the paper's weights
`T_(M+1-m)/T`, no constraint term, no compression (`hierfl/methods/fedat/protocol.py`). Seeds {seeds}: the seed
draws the data, the split and the devices.

{chr(10).join(table)}

{chr(10).join(pairs)}

**Reading.** FedHiSyn reaches 80 % first against every baseline in every seed's mean (speed-up CIs above 1)
and ends highest at 150 s, but its accuracy margins over FedAvg and SCAFFOLD are inside the seed-to-seed
spread (n = 5). Its fast devices never wait: inside a round each keeps training and passes its model along
its class's ring, so in 150 s it runs {fmt(per['FedHiSyn']['jobs'], 0)} local jobs against
{fmt(per['FedAvg']['jobs'], 0)} for FedAvg, whose rounds wait for the slowest device. "Efficiency" in the
claim is read as emulated time to accuracy; in device compute to the target FedHiSyn spends about 3×
FedAvg's.

**Why FedAT is last** (checked on the runs). The paper's cross-tier weights give tier m the update count
of tier M+1-m over the total, so the slowest tier (the 8 slowest devices, whose synchronous round lasts
as long as its slowest member: {slow_round} s, about FedAvg's round of {avg_round} s) gets the fastest
tier's count: at 150 s it holds {share} of the tier updates but weight {w_slow} in the global model, the
fastest tier (weighted by that share) {w_fast}. Until the slowest tier first reports (at {t_slow} s) its tier model is the initial
model and its weight T_1/T = 1 pins the global model there (accuracy just before: {acc_before}). After
that the global model moves mostly when the slow tier reports — FedAvg's pace — but that tier's model is
the average of 8 of the 24 devices, whose label mix is off the population's by a total-variation
distance of {fmt(skew, 2)} (per seed {", ".join(f"{x:.2f}" for x in skew)}): a model dominated by it is
biased towards those devices' classes, so FedAT trails even FedAvg. Weighting the tiers uniformly instead (the `FedAT-uniform` ablation, not the
paper's setting) gives {fmt(uni_ttt, 1, ' s')} to 80 % against {fmt(fedat_ttt, 1, ' s')}, and
{fmt(uni_acc, 4)} at 150 s: the paper's weighting, designed against the bias towards fast tiers, is what
costs FedAT here, when one tier is several times slower than the others. This is the algorithm as
published (two third-party re-implementations use the same weights), not an emulator artefact; the
paper's link compression, left out here, would shorten transfers but not these compute-bound rounds.

**Cost.** {n_trials} trials, {walls:.0f} s of trial wall time in all (sweep.csv), two at a time: {span:.0f} s
from the first trial's start to the last one's end, on a 2-core machine whose 1-minute load average was
{load:.0f} when the script ended (shared with other work: walls are inflated accordingly). FedHiSyn's trials
dominate (thousands of local jobs each). In CPU time (`/usr/bin/time`, seed 0, measured once under the
same load) one seed of the five entries takes 4.5 + 4.4 + 12.8 + 26.8 + 11.6 ≈ 60 CPU-s, so the 25 trials
need ≈ 300 CPU-s: about 2.5 min on an idle 2-core machine plus Ray Tune's start-up per trial.

**Caveats.** Blobs with an MLP instead of MNIST/EMNIST/CIFAR and CNNs [D]; 24 devices; one speed
distribution. The accuracy differences at 150 s are small (every protocol is near the task's ceiling by
then); the time-to-target differences carry the claim.
"""
    values = {name: {k: v for k, v in p.items()} for name, p in per.items()}
    values["vs"] = vs
    values["fedat_slow_tier"] = fedat_slow
    values["fedat_slow_tier_label_tv"] = skew
    result = ClaimResult(
        id="fedhisyn",
        claim="FedHiSyn beats FedAvg, SCAFFOLD and FedAT in accuracy and efficiency under strong speed heterogeneity",
        source="Li et al., ICPP 2022 (arXiv 2206.10546), abstract; docs/explanation/algorithms.md §3.4",
        paper="better accuracy and training efficiency than FedAvg, SCAFFOLD, FedAT (no numbers in the abstract)",
        ours=ours, agrees=agrees, scenario=[rel(HERE / "base.yaml"), rel(HERE / "sweep.yaml")],
        notes=notes, seeds=seeds, values=json.loads(json.dumps(values, default=float)), details=details, order=60)
    write_result(result, args)


if __name__ == "__main__":
    main()
