"""Claim `fedch_staleness`: FedCH's staleness-aware weighting vs the same scheme without it (claims reproduction).

    .venv/bin/python analysis/claims/fedch_staleness/claim.py [--resume] [--no-write]

Paper (INFOCOM'21 precursor of FedCH, docs/explanation/algorithms.md §2.7): "staleness-aware weighting improves
accuracy by about 26 % over the same scheme without it". ``staleness.yaml`` runs FedCH in the
claim setting of ``analysis/claims/fedch/fedch.yaml`` for 60 virtual seconds with σ(τ) = fedch(5, 1)
(b = 1) and with σ ≡ 1 (b = 0, which is exactly the constant function), 3 seeds; the figure is the
per-seed relative change of the final accuracy, and of the accuracy at the halfway point.
"""

from __future__ import annotations

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
    fmt,
    mean_ci,
    metrics,
    paired,
    rel,
    run_sweep,
    trials_wall,
    write_result,
)

HERE = Path(__file__).resolve().parent


def acc_at(run, t: float) -> float:
    """Accuracy of the last evaluation at or before virtual time ``t``."""
    best = None
    for m in evals(run):
        if m["t"] <= t + 1e-9:
            best = m["accuracy"]
    return float(best)


def final_acc(run) -> float:
    return float(evals(run)[-1]["accuracy"])


def stale_mass(run) -> tuple[float, float]:
    """Mean cloud staleness τ, and the share of cloud updates with τ > a = 5 (the discounted ones)."""
    taus = [t for m in metrics(run) if m.get("event") == "cloud_aggregate" for t in m.get("staleness", [])]
    return (sum(taus) / len(taus), sum(1 for t in taus if t > 5) / len(taus)) if taus else (0.0, 0.0)


def main() -> None:
    args = cli("fedch_staleness", __doc__)
    runs = run_sweep(HERE / "staleness.yaml", args)
    g = by_group(runs, changed("protocol.b"))
    with_w, without = g[1] if 1 in g else g[1.0], g[0] if 0 in g else g[0.0]
    pct = lambda x, y: 100.0 * (x / y - 1.0)  # noqa: E731
    d_final = paired(with_w, without, final_acc, pct)
    d_half = paired(with_w, without, lambda r: acc_at(r, 30.0), pct)
    d_abs = paired(with_w, without, final_acc, lambda x, y: x - y)
    rows = ["| staleness rule | final accuracy (60 s) | accuracy at 30 s | mean cloud τ | share of updates with τ > a |",
            "|---|---|---|---|---|"]
    for label, rs in (("fedch(a=5, b=1)", with_w), ("constant (b=0)", without)):
        sm = [stale_mass(r) for r in rs]
        rows.append(f"| {label} | {fmt([final_acc(r) for r in rs], 3)} | {fmt([acc_at(r, 30.0) for r in rs], 3)} | "
                    f"{fmt([s[0] for s in sm], 1)} | {fmt([s[1] for s in sm], 2)} |")
    mean_final = mean_ci(d_final)[0]
    agrees = "yes" if mean_final > 0 and all(v is not None and v > 0 for v in d_final) else (
        "no" if mean_final <= 0 else "partly")
    trial_wall = trials_wall(runs)
    timing = (f"Timing: the trials' own wall times (summary.json `wall_s`) sum to {trial_wall:.0f} s over {len(runs)} "
              f"trials, run 2 at a time on a 2-core machine shared with other jobs (load average "
              f"{os.getloadavg()[0]:.0f} when this script finished). " + MEASURED)
    details = "\n\n".join([
        SETTING, "\n".join(rows),
        f"Paired per seed, with against without staleness weighting: final accuracy {fmt(d_final, 1, ' %')} "
        f"(absolute {fmt(d_abs, 3)}); at 30 s {fmt(d_half, 1, ' %')}.",
        reading(with_w, without, d_final), timing])
    result = ClaimResult(
        id="fedch_staleness",
        claim="FedCH's staleness-aware weighting improves accuracy over the same scheme without it",
        source="FedCH INFOCOM'21 precursor (docs/explanation/algorithms.md §2.7, §1.4)",
        paper="≈ +26 % accuracy",
        ours=f"final accuracy {fmt(d_final, 1, ' %')} (absolute {fmt(d_abs, 3)}) at 60 s",
        agrees=agrees,
        scenario=[rel(HERE / "staleness.yaml"), rel(HERE.parent / "fedch" / "fedch.yaml")],
        notes=(f"Better on every seed but far smaller than the paper's ≈ +26 % ({mean_final:+.1f} % mean; 95 % CI "
               f"includes 0 with n = 3). " + NOTES),
        seeds=sorted({r.seed for r in runs}),
        values={"final_pct": d_final, "final_abs": d_abs, "half_pct": d_half,
                "final_with": [final_acc(r) for r in with_w], "final_without": [final_acc(r) for r in without]},
        details=details,
        order=31,
    )
    write_result(result, args)


SETTING = """**Setting**: FedCH exactly as in the `fedch` claim (analysis/claims/fedch/fedch.yaml: K = 10 of 50
devices, H = 10, lr 0.01, α = 1 − (K−1)/N = 0.82, a = 5, IID labels with Gaussian-skewed sizes, logistic
regression on Synthetic-IID [D for MNIST]) for a fixed 60 virtual s; b = 1 is the paper's fedch(5, 1),
b = 0 turns the rule into σ ≡ 1 (docs/explanation/algorithms.md §2.6), i.e. `staleness: {name: constant}`."""

def reading(with_w, without, d_final) -> str:
    """What the comparison says, from its numbers."""
    sw = [stale_mass(r) for r in with_w]
    m = mean_ci(d_final)[0]
    share = mean_ci([s[1] for s in sw])[0]
    return (f"**Reading.** With K = 10 clusters of devices grouped by pace, {100 * share:.0f} % of the cloud "
            f"updates arrive with τ > a = 5, from the slow clusters. Without the rule each of them is mixed in "
            f"with the full α = 0.82 and drags the global model back to a model trained from a version many "
            f"steps old; with fedch(5, 1) it gets α/τ. The final accuracy changes by {m:+.1f} % on average "
            f"(per seed: {', '.join(f'{x:+.1f} %' for x in d_final if x is not None)}). The paper's ≈ +26 % was "
            f"measured on MNIST/CIFAR-10 with its own K, N and time budget (not recovered); the direction is what "
            f"this reproduction checks.")


# The committed JSON was written by `--resume`, which only re-reads the finished sweep (its wall_s is
# that re-read); the full run it read was measured by hand with /usr/bin/time:
MEASURED = ("The full run of this script (6 trials, fresh) took 1349 s of wall time (34.5 s user + 7.8 s sys "
            "in the driver) on the shared 2-core machine at load average 44-66; on an idle machine "
            "the trials' CPU time is far below that.")

NOTES = ("Paper's FedCH setting (H = 10, lr 0.01, a = 5, K = 10, IID labels with Gaussian-skewed sizes; "
         "Synthetic-IID + LR for MNIST), 60 virtual s; b = 0 is the constant function exactly.")

if __name__ == "__main__":
    main()
