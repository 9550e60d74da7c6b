"""FedBuff vs synchronous and asynchronous FL: time and client updates to a target accuracy.

Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022
(arXiv 2106.06639), abstract: FedBuff is "3.3x more efficient than synchronous FL and up to 2.5x
more efficient than asynchronous FL" (docs/explanation/algorithms.md §5.4, §7). Setting (fedbuff.yaml, sweep.yaml):
10,000 devices, 1,000 training at once, K = 10, heavy-tailed (lognormal) job times; FedBuff,
FedAsync, FedAvg and FedAvgM (the paper's synchronous baseline) over seeds 1–3.

    .venv/bin/python analysis/claims/fedbuff/claim.py   # 906 s at load 45-91 on the shared 2-core machine
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (  # noqa: E402
    ClaimResult,
    by_group,
    changed,
    cli,
    first_reaching,
    fmt,
    mean_ci,
    paired,
    rel,
    run_sweep,
    trials_wall,
    write_result,
)

TARGET = 0.72  # sweep.yaml's target (evaluation.target_accuracy of every trial)
METHODS = ("fedbuff", "fedasync", "fedavg", "fedavgm")


def t_target(run) -> float | None:
    """Virtual seconds to the first evaluation at or above the target (None: never)."""
    m = first_reaching(run, TARGET)
    return None if m is None else float(m["t"])


def u_target(run) -> float | None:
    """Client updates applied (``device_updates``) by the first evaluation at or above the target."""
    m = first_reaching(run, TARGET)
    return None if m is None else float(m["device_updates"])


def at_target(key: str):
    """A per-run figure: field ``key`` of the first evaluation reaching the target (None: never)."""
    def f(run) -> float | None:
        m = first_reaching(run, TARGET)
        return None if m is None or m.get(key) is None else float(m[key])
    return f


def main() -> None:
    args = cli("fedbuff", __doc__)
    runs = run_sweep(HERE / "sweep.yaml", args)
    g = by_group(runs, changed("scenario"))
    missing = [m for m in METHODS if m not in g]
    if missing:
        raise SystemExit(f"sweep.yaml lacks trials for {missing}")
    seeds = sorted({r.seed for r in runs})
    wall = trials_wall(runs)

    rows = []
    values: dict[str, object] = {"target": TARGET, "trials_wall_s": round(wall, 1)}
    for m in METHODS:
        ts = [t_target(r) for r in g[m]]
        us = [u_target(r) for r in g[m]]
        values[m] = {"time_to_target_s": ts, "updates_to_target": us,
                     "best_accuracy": [r.summary.get("best_accuracy") for r in g[m]],
                     "staleness": [r.summary.get("staleness") for r in g[m]]}
        rows.append(f"| {m} | {fmt(ts, 1, ' s')} | {fmt(us, 0)} |")

    ratio: dict[str, dict[str, list[float | None]]] = {}
    for base in ("fedavg", "fedavgm", "fedasync"):
        ratio[base] = {"time": paired(g[base], g["fedbuff"], t_target),
                       "updates": paired(g[base], g["fedbuff"], u_target)}
    values["speedup"] = ratio

    def above_1(xs: list[float | None]) -> bool:
        """The 95 % interval of the paired ratio lies above 1 (a difference, not seed noise)."""
        m, half, n = mean_ci(xs)
        return n >= 2 and m - half > 1

    faster_sync = above_1(ratio["fedavg"]["time"]) and above_1(ratio["fedavgm"]["time"])
    faster_async = above_1(ratio["fedasync"]["time"])
    fewer_updates = all(above_1(ratio[b]["updates"]) for b in ("fedavg", "fedavgm", "fedasync"))
    agrees = "yes" if faster_sync and faster_async and fewer_updates else (
        "partly" if faster_sync or faster_async else "no")

    ours = (f"time to {TARGET}: ×{fmt(ratio['fedavgm']['time'], 1)} vs FedAvgM, "
            f"×{fmt(ratio['fedavg']['time'], 1)} vs FedAvg, ×{fmt(ratio['fedasync']['time'], 1)} vs FedAsync; "
            f"client updates: ×{fmt(ratio['fedavgm']['updates'], 1)} / ×{fmt(ratio['fedavg']['updates'], 1)}"
            f" / ×{fmt(ratio['fedasync']['updates'], 1)}")
    steps_fb = [at_target("round")(r) for r in g["fedbuff"]]
    stale_fb = [at_target("staleness_mean_cloud")(r) for r in g["fedbuff"]]
    stale_fa = [at_target("staleness_mean_cloud")(r) for r in g["fedasync"]]
    rounds_avg = [at_target("round")(r) for r in g["fedavg"]]
    values["fedbuff"]["server_steps_to_target"] = steps_fb  # type: ignore[index]
    values["fedbuff"]["staleness_at_target"] = stale_fb  # type: ignore[index]
    values["fedasync"]["staleness_at_target"] = stale_fa  # type: ignore[index]
    values["fedavg"]["rounds_to_target"] = rounds_avg  # type: ignore[index]
    notes = ("direction holds, magnitude far beyond the paper's 3.3×/2.5×: this convex task reaches the "
             "target in a few dozen FedBuff server steps, before the first wave of 1,000 jobs has "
             "returned, while each synchronous round waits for the slowest of 1,000 (see details)"
             if agrees == "yes" else "see details")
    details = "\n".join([
        f"Setting ({rel(HERE / 'fedbuff.yaml')}, {rel(HERE / 'sweep.yaml')}): 10,000 devices, 1,000 "
        "training at any time (FedBuff, FedAsync) or per round (FedAvg, FedAvgM, C = 0.1), FedBuff K = 10 "
        "with s(τ) = 1/√(1+τ) and η_g = 1 (the paper's settings, docs/explanation/algorithms.md §5.4); FedAsync with "
        "§5.3's defaults (α = 0.6, polynomial a = 0.5, ρ = 0.005); FedAvgM with β = 0.9, server lr 1. "
        "Device speeds lognormal (median 10 samples/s, σ = 0.6, FedScale's spread), so job times are "
        "lognormal: the claims brief allows half-normal or lognormal; the paper's exact law was not verified [D]. Blobs (20 features, 10 classes, "
        "separation 0.6), Dirichlet(1.0) label skew, 20 samples per device on average (at least 2), logistic regression, one "
        f"local epoch of batch 10 at lr 0.2 [D: no CelebA/Sent140 offline; a CNN over 10,000 devices "
        f"would not fit the claims budget]. Target {TARGET} (~93 % of the ~0.77 plateau) [D]. Runs stop "
        "at the target (`stop.target_accuracy`); evaluation every 0.5 virtual s, so times are "
        "resolved to 0.5 s. No hyper-parameter was tuned: every value is a documented default.",
        "",
        "| method | time to target (virtual s) | client updates to target |",
        "|---|---|---|",
        *rows,
        "",
        f"Speed-up of FedBuff = baseline / FedBuff per seed (paired). Time: FedAvgM "
        f"{fmt(ratio['fedavgm']['time'], 2)}, FedAvg {fmt(ratio['fedavg']['time'], 2)}, FedAsync "
        f"{fmt(ratio['fedasync']['time'], 2)}. Client updates: FedAvgM "
        f"{fmt(ratio['fedavgm']['updates'], 2)}, FedAvg {fmt(ratio['fedavg']['updates'], 2)}, FedAsync "
        f"{fmt(ratio['fedasync']['updates'], 2)}.",
        "",
        f"Regime reached: FedBuff hits the target after {fmt(steps_fb, 0)} server steps "
        f"(mean staleness of the applied updates {fmt(stale_fb, 1)}), i.e. with a few hundred of the "
        f"first wave of 1,000 jobs — the fastest devices, several of which hold only a handful of "
        f"samples under the Dirichlet split; FedAvg needs {fmt(rounds_avg, 1)} rounds of ~14 virtual s "
        f"each; FedAsync's updates arrive with staleness {fmt(stale_fa, 0)} at the target, so its "
        "α·s(τ) = 0.6/√(1+τ) ≈ 0.02 mixes each update in weakly and toward a model ~1,000 versions old.",
        "",
        "Why the time speed-ups over synchronous FL exceed 3.3×: a synchronous round applies one "
        "averaged step per 1,000 jobs and lasts as long as the slowest of its 1,000 heavy-tailed jobs, "
        "while FedBuff applies a server step every 10 arrivals and never waits; with a convex model and "
        "2 local steps per job, the large-batch penalty of 1,000-client rounds (the paper's own "
        "motivation: synchronous FL 'cannot scale efficiently beyond a few hundred clients') is large. "
        "The paper's CNN/LSTM tasks need thousands of server steps and hundreds of 1,000-client rounds "
        "(with tuned server learning rates), a regime where per-round waiting matters less and the "
        "speed-up settles at 3.3×; reproducing that regime needs ~10^5 jobs per synchronous run, beyond "
        "the claims budget (≤ 6 min on 2 cores for this claim). What our setting does reproduce is the "
        "direction and the paper's stated mechanism (large synchronous cohorts give diminishing returns; "
        "fully asynchronous FedAsync suffers from staleness at concurrency 1,000). We report what the "
        "documented defaults give and did not tune toward the claim.",
        "",
        f"Cost: {len(runs)} trials, {wall:.0f} s of trial wall time in all (sum of `wall_s`); the script "
        f"took {time.perf_counter() - args.t0:.0f} s wall, 1-min load average {os.getloadavg()[0]:.1f} at "
        "its end (the machine is shared: walls are inflated by the load).",
    ])
    write_result(ClaimResult(
        id="fedbuff",
        claim="FedBuff reaches a target accuracy faster than synchronous FL (FedAvg/FedAvgM) and "
              "asynchronous FL (FedAsync) at concurrency 1,000 over 10,000 devices",
        source="Nguyen et al., AISTATS 2022, arXiv 2106.06639 (abstract); docs/explanation/algorithms.md §5.4, §7",
        paper="3.3× vs synchronous FL; up to 2.5× vs asynchronous FL",
        ours=ours,
        agrees=agrees,
        scenario=[rel(HERE / "fedbuff.yaml"), rel(HERE / "sweep.yaml")],
        notes=notes,
        seeds=seeds,
        values=values,
        details=details,
        order=60,
    ), args)


if __name__ == "__main__":
    main()
