"""Claim `distrans`: DisTrans's per-client offsets raise the accuracy each client sees on its own test data
above FedAvg's.

Yuan, Hui, Yang, Burlina, Gong, Cao, "Addressing Heterogeneity in Federated Learning via Distributional
Transformation", ECCV 2022 (arXiv 2210.15025): +1 to +10 points of test accuracy over state-of-the-art FL
across distribution settings (the authors' README); 80.4 % against at most 72.1 % on CelebA at 100 %
heterogeneity (the ECCV abstract) (docs/explanation/algorithms.md §5.17). The shape to check: DisTrans above
FedAvg, by a few points, in the clients' accuracy on their own test splits under label skew. Setting:
distrans.yaml and sweep.yaml (every setting cited there, our own choices tagged [D]). No hyper-parameter is
tuned; the target (0.8 mean client accuracy) was read off one run of seed 1.

    .venv/bin/python analysis/claims/distrans/claim.py          # runs/claims/distrans/, then the JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (ClaimResult, arms, cli, evals, first_reaching, fmt, mean_ci, paired, rel,  # noqa: E402
                    run_sweep, trials_wall, write_result)

TARGET = 0.8
METRIC = "device_accuracy_mean"
ARMS = ("FedAvg", "FedAvg-dual", "DisTrans")


def main() -> None:
    args = cli("distrans", __doc__)
    sweep_file = HERE / "sweep.yaml"
    runs = run_sweep(sweep_file, args)
    groups = arms(runs, ARMS)

    def last(r, key):
        return float(evals(r)[-1][key])

    def at_target(r, key):
        m = first_reaching(r, TARGET, METRIC)
        return None if m is None else float(m[key])

    values: dict[str, dict] = {}
    lines = [("| method | client accuracy, mean | worst decile | spread (std) | global model | "
              f"rounds to {TARGET} | emulated time to {TARGET} (s) |"), "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        g = groups[arm]
        values[arm] = {"seeds": [r.seed for r in g], "device_mean": [last(r, METRIC) for r in g],
                       "device_worst10": [last(r, "device_accuracy_worst10") for r in g],
                       "device_std": [last(r, "device_accuracy_std") for r in g],
                       "global": [last(r, "accuracy") for r in g],
                       "rounds_to_target": [at_target(r, "cloud_aggregations") for r in g],
                       "time_to_target_s": [at_target(r, "t") for r in g]}
        v = values[arm]
        lines.append(f"| {arm} | {fmt(v['device_mean'], 3)} | {fmt(v['device_worst10'], 3)} | "
                     f"{fmt(v['device_std'], 3)} | {fmt(v['global'], 3)} | {fmt(v['rounds_to_target'], 1)} | "
                     f"{fmt(v['time_to_target_s'], 2)} |")

    def mean_acc(r):
        return last(r, METRIC)

    gain = {o: paired(groups["DisTrans"], groups[o], mean_acc, lambda x, y: 100 * (x - y)) for o in ARMS[:2]}
    values["gain_points"] = gain
    m = {o: mean_ci(gain[o])[0] for o in gain}
    every = all(x is not None and x > 0 for o in gain for x in gain[o])
    agrees = "yes" if every and all(1 <= v for v in m.values()) else "partly" if all(v > 0 for v in m.values()) \
        else "no"
    wall = trials_wall(runs)
    details = f"""**Setting** (analysis/claims/distrans/distrans.yaml, sweep.yaml): 10 devices, each holding the 8x8
digits images of two classes (shards), all of them every round, one local epoch of batch 32 at lr 0.05; the
dual-input model runs an MLP backbone (64 units, 32 features per view) on x_L = 0.8x + 0.2t and x_R = 1.2x − 0.2t;
each device trains its offset t (lr 1e-3) and keeps it; models averaged unweighted; 60 rounds. A quarter of each
device's samples is its own test split: DisTrans evaluates each device through its own offset, the FedAvg arms
with their one global model. Devices compute at 0.05 GFLOP/s, so the dual input's two backbone passes cost twice
a single pass in emulated time. Seeds 1–3.

**Results** after 60 rounds (mean ± 95 % CI over seeds; evaluations every 0.5 s of emulated time):

{chr(10).join(lines)}

Per-seed gain in mean client accuracy (points): DisTrans − FedAvg {fmt(gain['FedAvg'], 1)}, DisTrans −
FedAvg-dual {fmt(gain['FedAvg-dual'], 1)}.

**Differences from the paper's setting.** Resized CIFAR-10 with an ImageNet-pretrained AlexNet becomes the digits
images with a small MLP backbone trained from scratch [D: offline]; 60 rounds at lr 0.05 instead of 100 at 5e-3;
offsets start as standardised uniform noise on the flat input; the hypernetwork and mean offset modes are not
built, so only the non-IID script's `local` mode is checked. The paper's per-dataset numbers could not be
retrieved offline beyond the CelebA figure of its abstract, so its column is the README's range.
**Cost.** Sum of the {len(runs)} trials' own wall time: {wall:.0f} s."""

    result = ClaimResult(
        id="distrans",
        claim="DisTrans's per-client offsets raise the accuracy clients see on their own test data above FedAvg's "
              "(label skew, two classes per client)",
        source="Yuan et al., ECCV 2022 (arXiv 2210.15025), README and ECCV abstract; "
               "docs/explanation/algorithms.md §5.17",
        paper="+1 to +10 points over state-of-the-art FL; CelebA at 100 % heterogeneity 80.4 % vs ≤ 72.1 %",
        ours=f"mean client accuracy +{m['FedAvg']:.1f} points over FedAvg ({fmt(gain['FedAvg'], 1)}), "
             f"+{m['FedAvg-dual']:.1f} over FedAvg on the same dual-input model",
        agrees=agrees,
        scenario=[rel(HERE / "distrans.yaml"), rel(sweep_file)],
        notes="Digits, 2 classes per client, MLP backbone [D: CIFAR/AlexNet offline]; each client tested on its own "
              f"split; emulated time to {TARGET} beside rounds in the details.",
        seeds=sorted({r.seed for r in runs}),
        values=values,
        details=details,
        order=82,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
