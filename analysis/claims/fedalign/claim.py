"""Claim `fedalign`: FedAlign's accuracy is competitive with FedAvg and FedProx while its client jobs cost
little more than FedAvg's.

Mendieta, Yang, Wang, Lee, Ding, Chen, "Local Learning Matters: Rethinking Data Heterogeneity in Federated
Learning", CVPR 2022 (arXiv 2111.14213), abstract: accuracy competitive with the state of the art at minimal
compute and memory cost (docs/explanation/algorithms.md §5.16). The shape to check: FedAlign ≥ FedProx, FedAvg
in accuracy, with a client job time close to FedAvg's. Setting: fedalign.yaml and sweep.yaml (every setting
cited there, our own choices tagged [D]). No hyper-parameter is tuned; the target (0.85) was read off one run
of seed 1 per method.

    .venv/bin/python analysis/claims/fedalign/claim.py          # runs/claims/fedalign/, then the JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (ClaimResult, arms, cli, counter_at, fmt, mean_ci, paired, rel, run_sweep,  # noqa: E402
                    trials_wall, write_result)

TARGET = 0.85
ARMS = ("FedAvg", "FedProx", "FedAlign")


def main() -> None:
    args = cli("fedalign", __doc__)
    sweep_file = HERE / "sweep.yaml"
    runs = run_sweep(sweep_file, args)
    groups = arms(runs, ARMS)

    def at_target(r, key):
        return counter_at(r, TARGET, key)

    def final(r):
        return r.summary.get("final_accuracy")

    def job_s(r):  # mean emulated compute time of one client job
        t = r.summary["totals"]
        return float(t["compute_s"]) / float(t["train_jobs"])

    values: dict[str, dict] = {}
    lines = [(f"| method | accuracy after 25 rounds | rounds to {TARGET} | emulated time to {TARGET} (s) | "
              "emulated time of a client job (s) |"), "|---|---|---|---|---|"]
    for arm in ARMS:
        g = groups[arm]
        values[arm] = {"seeds": [r.seed for r in g], "final_accuracy": [final(r) for r in g],
                       "rounds_to_target": [at_target(r, "cloud_aggregations") for r in g],
                       "time_to_target_s": [at_target(r, "t") for r in g], "job_s": [job_s(r) for r in g]}
        v = values[arm]
        lines.append(f"| {arm} | {fmt(v['final_accuracy'], 3)} | {fmt(v['rounds_to_target'], 1)} | "
                     f"{fmt(v['time_to_target_s'], 1)} | {fmt(v['job_s'], 3)} |")
    gain = {o: paired(groups["FedAlign"], groups[o], final, lambda x, y: x - y) for o in ("FedAvg", "FedProx")}
    job_ratio = paired(groups["FedAlign"], groups["FedAvg"], job_s)
    values["accuracy_gain"] = gain
    values["job_time_ratio_vs_fedavg"] = job_ratio
    mean_gain = {o: mean_ci(gain[o])[0] for o in gain}
    cheap = bool(job_ratio) and all(x is not None and x < 1.1 for x in job_ratio)
    # "competitive": within one point of the best baseline on average, at a job cost within 10 % of FedAvg's
    competitive = all(g > -0.01 for g in mean_gain.values())
    better = all(g > 0 for g in mean_gain.values())
    agrees = "yes" if competitive and cheap and better else "partly" if competitive and cheap else "no"
    wall = trials_wall(runs)
    details = f"""**Setting** (analysis/claims/fedalign/fedalign.yaml, sweep.yaml): 16 devices holding the 8x8 digits
images under label skew Dirichlet(0.5), all of them every round, an MLP of 64 + 32 units whose last hidden layer is
the slimmed final block, 2 local epochs of batch 16 with SGD (lr 0.05, momentum 0.9), models averaged by sample
count, 25 rounds; FedAlign with the authors' defaults (μ 0.45, width 0.25, 10 power iterations, the term rescaled
to the CE value, gradient clipping at 10); FedProx with μ = 0.01. Seeds 1–3.

**Results** (mean ± 95 % CI over seeds; evaluations every 2 s of emulated time, so rounds and time to the target
are those of the first evaluation at or above it):

{chr(10).join(lines)}

Per-seed accuracy of FedAlign minus FedAvg {fmt(gain['FedAvg'], 3)}, minus FedProx {fmt(gain['FedProx'], 3)};
FedAlign's client job time over FedAvg's {fmt(job_ratio, 3, '×')} (its slim pass: 1 + 0.25²·F(block)/F(model)).

**Differences from the paper's setting.** CIFAR-100 with ResNet-56 (final block: its last residual stage, with
slimmable batch norm) becomes digits with a two-hidden-layer MLP (final block: the last hidden layer; vector
features, so each transfer matrix has rank one) [D: offline, seconds per run]; 2 local epochs at lr 0.05 instead
of 20 at 0.01; no Nesterov momentum and no weight decay; GradAug and MOON, the paper's other baselines, are not
in hierfl. The paper's numbers could not be retrieved offline, so its column is its qualitative statement.
**Cost.** Sum of the {len(runs)} trials' own wall time: {wall:.0f} s (FedAlign's autograd and power iterations
make its trials about ten times slower in real time than FedAvg's hand-written gradients; emulated time charges
only the slim pass's FLOPs)."""

    result = ClaimResult(
        id="fedalign",
        claim="FedAlign's accuracy is competitive with FedAvg and FedProx at a client job cost close to FedAvg's "
              "(non-IID labels)",
        source="Mendieta et al., CVPR 2022 (arXiv 2111.14213), abstract and the authors' repository; "
               "docs/explanation/algorithms.md §5.16",
        paper="accuracy competitive with the state of the art at minimal extra compute (qualitative; numbers not "
              "retrieved)",
        ours=f"accuracy gain over FedAvg {fmt(gain['FedAvg'], 3)}, over FedProx {fmt(gain['FedProx'], 3)}; "
             f"job time {fmt(job_ratio, 3, '×')} FedAvg's",
        agrees=agrees,
        scenario=[rel(HERE / "fedalign.yaml"), rel(sweep_file)],
        notes=f"Digits under Dirichlet(0.5), 16 devices, MLP 64+32 [D: CIFAR-100/ResNet-56 offline]; time to "
              f"{TARGET} beside rounds in the details.",
        seeds=sorted({r.seed for r in runs}),
        values=values,
        details=details,
        order=81,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
