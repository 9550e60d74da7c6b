"""Claim `pfedla`: pFedLA's personalised models beat FedAvg's global model on the clients' own data (non-IID).

    .venv/bin/python analysis/claims/pfedla/claim.py [--resume] [--no-write]

Ma, Zhang, Guo, Xu, "Layer-wised Model Aggregation for Personalized Federated Learning", CVPR 2022 (arXiv
2205.03993), abstract: significantly higher personalised accuracy than prior personalised-FL methods; the
ordering to check (docs/explanation/algorithms.md §10.1) ends with pFedLA ≥ … ≥ FedAvg in mean per-client test
accuracy (CIFAR-10, 10 clients with 4 classes each). Here pFedLA and FedAvg run 100 rounds each on the same
devices, data and local jobs (pfedla.yaml and sweep.yaml, every setting cited there); each client is tested
on its own held-out digits with its own model (pFedLA: its latest personalised model; FedAvg: the global
model). Besides the final accuracy, the emulated time and rounds to a target (0.75, picked on seed 1, which
is not evaluated) and FedAvg's accuracy at the emulated time pFedLA ends.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (ClaimResult, arms, cli, evals, first_reaching, fmt, paired, rel, run_sweep,  # noqa: E402
                    trials_wall, write_result)

TARGET = 0.75
METRIC = "device_accuracy_mean"
CLIENTS = 10
ARMS = ("pFedLA", "pFedLA-hn0.5", "HeurpFedLA-hn0.5", "FedAvg")


def last(run, key: str = METRIC) -> float:
    """The last evaluation's ``key``."""
    return float(evals(run)[-1][key])


def rounds_of(line: dict, arm: str) -> float:
    """Rounds at an eval line: FedAvg's cloud rounds; pFedLA's server updates per client."""
    rounds = float(line["cloud_aggregations"])
    return rounds / CLIENTS if "pFedLA" in arm else rounds


def at_time(run, t: float, key: str = METRIC) -> float | None:
    """``key`` at the last evaluation no later than ``t``."""
    lines = [m for m in evals(run) if m["t"] <= t + 1e-9]
    return float(lines[-1][key]) if lines else None


def main() -> None:
    args = cli("pfedla", __doc__)
    sweep_file = HERE / "sweep.yaml"
    runs = run_sweep(sweep_file, args)
    groups = arms(runs, ARMS)
    values: dict[str, dict] = {}
    rows = [(f"| method | mean personalised accuracy after 100 rounds | worst decile | spread (std) | emulated time "
            f"(s) | rounds to {TARGET} | emulated time to {TARGET} (s) | MB through the cloud |"),
            "|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        g = groups[arm]
        hit = [first_reaching(r, TARGET, METRIC) for r in g]
        values[arm] = {"seeds": [r.seed for r in g], "final": [last(r) for r in g],
                       "worst10": [last(r, "device_accuracy_worst10") for r in g],
                       "std": [last(r, "device_accuracy_std") for r in g],
                       "end_s": [float(evals(r)[-1]["t"]) for r in g],
                       "rounds_to_target": [None if m is None else rounds_of(m, arm) for m in hit],
                       "time_to_target_s": [None if m is None else float(m["t"]) for m in hit],
                       "mb_cloud": [float(r.summary["totals"]["bytes_cloud"]) / 1e6 for r in g]}
        v = values[arm]
        rows.append(f"| {arm} | {fmt(v['final'], 3)} | {fmt(v['worst10'], 3)} | {fmt(v['std'], 3)} | "
                    f"{fmt(v['end_s'], 0)} | {fmt(v['rounds_to_target'], 1)} | {fmt(v['time_to_target_s'], 0)} | "
                    f"{fmt(v['mb_cloud'], 2)} |")
    gain = paired(groups["pFedLA"], groups["FedAvg"], last, lambda a, b: a - b)
    gain_scaled = paired(groups["pFedLA-hn0.5"], groups["FedAvg"], last, lambda a, b: a - b)
    end = {r.seed: float(evals(r)[-1]["t"]) for r in groups["pFedLA-hn0.5"]}
    fedavg_then = {r.seed: at_time(r, end[r.seed]) for r in groups["FedAvg"] if r.seed in end}
    gain_same_time = [last(p) - fedavg_then[p.seed] for p in groups["pFedLA-hn0.5"]
                      if fedavg_then.get(p.seed) is not None]
    values["gain_after_100_rounds"] = gain
    values["gain_after_100_rounds_hn0.5"] = gain_scaled
    values["fedavg_at_pfedla_hn0.5_end"] = list(fedavg_then.values())
    values["gain_at_same_time_hn0.5"] = gain_same_time

    def all_win(gs: list) -> bool:
        return bool(gs) and all(g is not None and g > 0 for g in gs)

    # yes: both arms ahead on every seed; partly: the scaled arm ahead on average after 100 rounds, or on every
    # seed at the same emulated time; no otherwise
    mean_scaled = sum(g for g in gain_scaled if g is not None) / max(len(gain_scaled), 1)
    agrees = "yes" if all_win(gain) and all_win(gain_scaled) else (
        "partly" if mean_scaled > 0 or all_win(gain_same_time) else "no")
    wall = trials_wall(runs)
    details = f"""**Setting** (analysis/claims/pfedla/pfedla.yaml, sweep.yaml): 10 clients holding the 8x8 digits
in label shards (4 per client, about 4 classes each), 20 % of each client's digits held out as its own test
split; an MLP with 32 hidden units; local jobs of 10 epochs, batch 32, SGD lr 0.01; pFedLA with hn_lr 5e-3 and
d_e = h = 100 (third-party code's values; a second arm with hn_lr 0.5 [D]), its server on a cloud CPU tier;
FedAvg with every client every round.
100 rounds each: FedAvg's synchronous rounds, pFedLA's 1000 asynchronous server updates (100 per client on
average). Seeds 2-4 (seed 1 picked the target and budget, not evaluated). Evaluations every 12 s of emulated time.

{chr(10).join(rows)}

Per seed, pFedLA minus FedAvg in mean personalised accuracy after 100 rounds: {fmt(gain, 1, ' points', scale=100.0)}
at the third-party code's hn_lr 5e-3, {fmt(gain_scaled, 1, ' points', scale=100.0)} at hn_lr 0.5. At the emulated
time pFedLA (hn_lr 0.5) ends, FedAvg stands at {fmt(list(fedavg_then.values()), 3)} ({fmt(gain_same_time, 1,
' points', scale=100.0)} behind it).

**Why two pFedLA arms.** A hypernetwork's gradient is `Σ_j ∂â^{{l,j}} · (θ_j^l · g^l)`: dot products over a
layer's parameters, so it grows with the model. The 5e-3 of the third-party code was set for a CNN of millions of
parameters; on this 2 410-parameter MLP the hypernetworks barely move from their random start in 100 rounds, and
pFedLA is then a fixed random layer-wise mix of the clients' models. With hn_lr 0.5 [D, chosen on seed 1] they
learn to weight each client's own layers up, and the personalisation the paper reports appears.

**HeurpFedLA** (k_keep 1, hn_lr 0.5): after 100 rounds {fmt(values['HeurpFedLA-hn0.5']['final'], 3)} against
pFedLA's {fmt(values['pFedLA-hn0.5']['final'], 3)}, with {fmt(values['HeurpFedLA-hn0.5']['mb_cloud'], 2, ' MB')}
through the cloud against {fmt(values['pFedLA-hn0.5']['mb_cloud'], 2, ' MB')} (the design notes: close to pFedLA
with fewer bytes).

**Caveats.** The paper's numbers could not be retrieved offline: its column is the abstract's statement and the
ordering of the design notes. Digits and an MLP stand in for CIFAR-10 and the authors' unknown CNN [D]; pFedHN
and FedBN, the middle of the ordering, are not in hierfl. pFedLA's clients never wait for each other, so in
emulated time it does more local work than synchronous FedAvg; rounds are the comparison the paper makes.

**Cost.** Sum of the {len(runs)} trials' own wall time: {wall:.0f} s (on 2 shared cores)."""
    result = ClaimResult(
        id="pfedla",
        claim="pFedLA's personalised models beat FedAvg's global model on the clients' own data (non-IID labels)",
        source="Ma et al., CVPR 2022 (arXiv 2205.03993), abstract; ordering from the design notes; "
               "docs/explanation/algorithms.md §10.1",
        paper="significantly higher personalised accuracy; pFedLA ≥ pFedHN ≥ FedBN ≥ FedAvg (numbers not retrieved)",
        ours=f"mean personalised accuracy after 100 rounds: pFedLA {fmt(values['pFedLA']['final'], 3)} (hn_lr 5e-3), "
             f"{fmt(values['pFedLA-hn0.5']['final'], 3)} (hn_lr 0.5) vs FedAvg {fmt(values['FedAvg']['final'], 3)}; "
             f"{TARGET} reached in {fmt(values['pFedLA-hn0.5']['rounds_to_target'], 1)} (hn_lr 0.5) vs "
             f"{fmt(values['FedAvg']['rounds_to_target'], 1)} rounds, "
             f"{fmt(values['pFedLA-hn0.5']['time_to_target_s'], 0, ' s')} vs "
             f"{fmt(values['FedAvg']['time_to_target_s'], 0, ' s')} emulated",
        agrees=agrees,
        scenario=[rel(HERE / "pfedla.yaml"), rel(sweep_file)],
        notes="Digits in 4-class shards, 10 clients, MLP [D: CIFAR-10 offline]. With the hypernetwork lr scaled to "
              "the small model (0.5 [D]) pFedLA is ahead on average (2 of 3 seeds) after 100 rounds and on every seed "
              "at equal emulated time, but slower to 0.75 in rounds; at the code's 5e-3 its hypernetworks barely move "
              "on a 2 410-parameter MLP and FedAvg wins. pFedHN and FedBN not run.",
        seeds=sorted({r.seed for r in runs}),
        values=values,
        details=details,
        order=85,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
