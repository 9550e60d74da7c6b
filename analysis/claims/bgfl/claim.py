"""Claim `bgfl`: sharing a little data through the chain raises non-IID accuracy (claims reproduction).

    .venv/bin/python analysis/claims/bgfl/claim.py [--resume] [--no-write]

Paper (Lian et al., IEEE TCSS 2023, DOI 10.1109/TCSS.2022.3216802; docs/explanation/algorithms.md §5.15):
a blockchain-based data-sharing stage "improves accuracy" on non-IID data [V: abstract; no numbers
retrieved]. The design notes' check: with a few percent of shared data, stage-2 accuracy well above plain
FedAvg's on 2-class-per-client data, the curve shifted right by the stage-1 time [B]. Here BGFL with
sharing against BGFL without (the same chain and rounds) and against FedAvg with no chain, 3 seeds each,
reporting accuracy and emulated time next to rounds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (ClaimResult, arms, cli, evals, first_reaching, fmt, mean_ci, paired, rel,  # noqa: E402
                    run_sweep, trials_wall, write_result)

ARMS = ("sharing", "no sharing", "FedAvg", "sharing, js_lowest")
TARGET = 0.75
ROUNDS = 25


def final(r) -> float:
    return float(evals(r)[-1]["accuracy"])


def at_rounds(r) -> float | None:
    """Accuracy at the first evaluation after ``ROUNDS`` cloud aggregations (None: fewer rounds)."""
    for m in evals(r):
        if m.get("cloud_aggregations", 0) >= ROUNDS:
            return float(m["accuracy"])
    return None


def to_target(r, key: str) -> float | None:
    m = first_reaching(r, TARGET)
    return None if m is None else float(m[key])


def stage1_s(r) -> float | None:
    """When the first stage-2 round's first job starts (BGFL's stage-1 time; 0 without a chain)."""
    import json
    trace = json.loads((r.dir / "trace.json").read_text())
    starts = [e["ts"] / 1e6 for e in trace if e.get("name") == "train"]
    return min(starts) if starts else None


def main() -> None:
    args = cli("bgfl", __doc__)
    runs = run_sweep(HERE / "sweep.yaml", args)
    groups = arms(runs, ARMS)
    values: dict[str, dict] = {}
    lines = [(f"| method | accuracy at 120 s | rounds in 120 s | accuracy after {ROUNDS} rounds | emulated s to {TARGET} "
             f"| rounds to {TARGET} | first job starts at (s) |"), "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        g = groups[arm]
        v = {"seeds": [r.seed for r in g], "final_accuracy": [final(r) for r in g],
             "rounds": [float(evals(r)[-1].get("cloud_aggregations", 0)) for r in g],
             "accuracy_at_rounds": [at_rounds(r) for r in g],
             "time_to_target_s": [to_target(r, "t") for r in g],
             "rounds_to_target": [to_target(r, "cloud_aggregations") for r in g],
             "first_job_s": [stage1_s(r) for r in g]}
        values[arm] = v
        lines.append(f"| {arm} | {fmt(v['final_accuracy'], 3)} | {fmt(v['rounds'], 0)} | "
                     f"{fmt(v['accuracy_at_rounds'], 3)} | {fmt(v['time_to_target_s'], 1)} | "
                     f"{fmt(v['rounds_to_target'], 1)} | {fmt(v['first_job_s'], 2)} |")
    gain = paired(groups["sharing"], groups["no sharing"], final, lambda a, b: a - b)
    gain_r = paired(groups["sharing"], groups["no sharing"], at_rounds, lambda a, b: a - b)
    values["gain_final"], values["gain_at_rounds"] = gain, gain_r
    sel = paired(groups["sharing, js_lowest"], groups["sharing"], final, lambda a, b: a - b)
    values["js_lowest_minus_random_final"] = sel
    ups = [g for g in gain + gain_r if g is not None]
    agrees = "yes" if ups and all(g > 0 for g in ups) else ("no" if mean_ci(gain)[0] <= 0 else "partly")
    wall = trials_wall(runs)
    details = f"""**Setting** (analysis/claims/bgfl/bgfl.yaml, sweep.yaml): scenarios/bgfl.yaml — 20 devices holding
scikit-learn's 8x8 digits in 2-class shards (about 70 samples each) instead of MNIST / Fashion-MNIST / CIFAR-10 [D],
an MLP [64], 1 epoch of batch 10 at lr 0.1; one chain at the cloud with a block every 2 s (fixed) and one
confirmation [D: the design default is exponential, 10 s]; a committee of the 6 devices whose labels are closest
to the pooled ones, sharing 20 % of their samples (alpha 0.2 [D for 0.05, which gives 3-4 samples a device
here]); 5 devices a round chosen at random [D for js_lowest, which picks the same 5 every round and so confounds
sharing with selection]; every round's hashes confirmed on the chain before the next. "no sharing": the same with
alpha 0. FedAvg: the same 5 random devices a round, no chain. "sharing, js_lowest": sharing with the design
notes' selection. Seeds 1-3, 120 emulated s, evaluations every 5 s.

**Results** (mean ± 95 % CI over seeds):

{chr(10).join(lines)}

Per seed, sharing minus no sharing: {fmt(gain, 1, ' points', scale=100.0)} at 120 s, {fmt(gain_r, 1, ' points',
scale=100.0)} after {ROUNDS} rounds. Sharing costs a few emulated seconds before the first round (the shares'
uploads, a block and a confirmation, the downloads of D_g) and longer jobs (each device trains on D_g too).
The chain costs far more: every round waits for a block and its confirmation (about 4 s a round against 0.4 s for
FedAvg), so FedAvg without a ledger runs about ten times as many rounds in the same emulated time and ends higher;
at equal rounds the shared data is what lifts BGFL.

The abstract's second claim, that client selection improves efficiency, does not show here: the design notes'
js_lowest rule (the members whose labels, merged with D_g, are closest to D_g's) picks the same 5 devices every
round, and ends {fmt(sel, 1, ' points', scale=100.0)} against random selection at 120 s (per seed, js_lowest minus
random). The rule the paper uses could not be read; js_weighted and random are the knobs that avoid the starvation.

**Caveats.** The paper's numbers were not retrieved, so the paper column is its qualitative statement. The
committee rule, the share rule and the chain's parameters are design defaults.
**Cost.** Sum of the {len(runs)} trials' own wall time: {wall:.0f} s on a 2-core machine shared with other jobs
(load average {os.getloadavg()[0]:.0f} when this script finished)."""
    result = ClaimResult(
        id="bgfl",
        claim="Sharing a little data through the chain raises non-IID accuracy (BGFL's stage 1)",
        source="Lian et al., IEEE TCSS 2023 (DOI 10.1109/TCSS.2022.3216802), abstract; docs/explanation/algorithms.md "
               "§5.15",
        paper="data sharing improves accuracy on non-IID data (qualitative; numbers not retrieved)",
        ours=f"{fmt(gain, 1, ' points', scale=100.0)} at 120 emulated s, {fmt(gain_r, 1, ' points', scale=100.0)} "
             f"after {ROUNDS} rounds (sharing minus no sharing)",
        agrees=agrees,
        scenario=[rel(HERE / "bgfl.yaml"), rel(HERE / "sweep.yaml")],
        notes="Digits in 2-class shards, 20 devices, alpha 0.2, random selection [D]; FedAvg without a chain runs "
              "about 10× the rounds in the same emulated time; js_lowest selection does not help here (details).",
        seeds=sorted({r.seed for r in runs}),
        values=values,
        details=details,
        order=85,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
