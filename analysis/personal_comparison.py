"""Personalisation compared (personalisation): FedAvg / FedAvgMeta / FedMeta-MAML / FedMeta-SGD, with and without
personal layers, plus FedPer, LG-FedAvg and WSCC, on MNIST- and CIFAR-shaped generated data.

The sources' protocol in small (the Vietnamese study: 50 + 50 clients, 2 labels each, 20 % support):
here 30 devices with 2 label shards each (``partition: shards``), 10 classes, a 20 % support set
for the meta-learners, and every device's own held-out 20 % (``data.local_test_fraction``) as its
test data. The reported number is the sample-weighted mean of per-device accuracy after each
device's personalisation step (its own layers; the meta-learners and FedAvgMeta adapt on the
device's support set first) — seen devices, not the sources' unseen test clients (see README).

* MNIST-shaped: ``teacher`` data, 784 features, labels from a random linear teacher.
* CIFAR-shaped: ``blobs`` with shape [3, 32, 32] (3072 features), separation 0.03 (centres about 2 noise σ apart: overlapping classes).
  No file datasets are used (none ship with the project).

Model: MLP 784|3072-64-10; FedAvg rounds of 9 devices (fraction 0.3), 1 local epoch, batch 20,
lr 0.05; α (inner_lr) 0.05, one inner step; 20 rounds; local executor; 2 seeds (17, 18; the defaults). Plus one
hierarchical (HierFAVG, 3 edges: FedMeta-SGD + personal layer) and one asynchronous (FedAsync:
FedPer) variant.

Writes ``analysis/results/personal_comparison.{md,json}``.
Usage: ``PYTHONPATH=. python analysis/personal_comparison.py [--rounds 20] [--seeds 2] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "results"

DATA: dict[str, dict[str, Any]] = {
    "MNIST-shaped": {"name": "teacher", "num_samples": 3000, "test_samples": 500, "num_features": 784,
                     "num_classes": 10},
    "CIFAR-shaped": {"name": "blobs", "num_samples": 3000, "test_samples": 500, "shape": [3, 32, 32],
                     "num_classes": 10, "separation": 0.03},
}
META = {"inner_lr": 0.05, "support_fraction": 0.2}
# method → (trainer, protocol override or None, topology or None)
METHODS: dict[str, tuple[Any, Any, Any]] = {
    "FedAvg": ("sgd", None, None),
    "FedAvgMeta": ({"name": "fedavgmeta", **META}, None, None),
    "FedMeta-MAML": ({"name": "fedmeta", "learner": "maml", **META}, None, None),
    "FedMeta-SGD": ({"name": "fedmeta", "learner": "meta_sgd", **META}, None, None),
    "FedAvg + PL (FedPer)": ({"name": "fedper", "head_layers": 1}, None, None),
    "FedAvgMeta + PL": ({"name": "fedavgmeta", "head_layers": 1, **META}, None, None),
    "FedMeta-MAML + PL": ({"name": "fedmeta", "learner": "maml", "head_layers": 1, **META}, None, None),
    "FedMeta-SGD + PL": ({"name": "fedmeta", "learner": "meta_sgd", "head_layers": 1, **META}, None, None),
    "LG-FedAvg": ({"name": "lg_fedavg", "global_layers": 1}, {"name": "fedavg", "fraction": 0.3,
                                                               "weighting": "uniform"}, None),
    "WSCC": ("sgd", {"name": "wscc", "fraction": 0.3}, None),
    "HierFAVG: FedMeta-SGD + PL": ({"name": "fedmeta", "learner": "meta_sgd", "head_layers": 1, **META},
                                   {"name": "hierfavg", "kappa1": 8, "kappa2": 1, "fraction": 0.3},
                                   {"edge_servers": 3, "grouping": "random"}),
    "FedAsync: FedPer": ({"name": "fedper", "head_layers": 1}, {"name": "fedasync", "concurrency": 9}, None),
}
# the sources' figures (test accuracy %, the Vietnamese study's table; unseen test clients)
SOURCE = {
    "CIFAR-shaped": {"FedAvg": 20.77, "FedAvgMeta": 37.85, "FedMeta-MAML": 71.29, "FedMeta-SGD": 77.09,
                     "FedAvg + PL (FedPer)": 84.59, "FedAvgMeta + PL": 84.55, "FedMeta-MAML + PL": 85.46,
                     "FedMeta-SGD + PL": 84.96},
    "MNIST-shaped": {"FedAvg": 83.39, "FedAvgMeta": 84.05, "FedMeta-MAML": 92.8, "FedMeta-SGD": 97.41,
                     "FedAvg + PL (FedPer)": 96.53, "FedAvgMeta + PL": 96.65, "FedMeta-MAML + PL": 99.36,
                     "FedMeta-SGD + PL": 99.01},
}


def scenario(data: str, method: str, seed: int, rounds: int) -> dict[str, Any]:
    """The raw scenario of one run."""
    trainer, proto, topo = METHODS[method]
    raw: dict[str, Any] = {
        "name": "personal", "seed": seed,
        "data": {"dataset": DATA[data], "partition": {"name": "shards", "shards_per_client": 2},
                 "local_test_fraction": 0.2},
        "model": {"name": "mlp", "hidden": [64]},
        "devices": {"count": 30, "speed_sps": {"dist": "lognormal", "median": 400, "sigma": 0.5},
                    "uplink_mbps": {"dist": "uniform", "low": 5, "high": 20},
                    "downlink_mbps": {"dist": "uniform", "low": 20, "high": 100}, "latency_ms": 20},
        "protocol": proto or {"name": "fedavg", "fraction": 0.3},
        "training": {"batch_size": 20, "lr": 0.05, "trainer": trainer},
        "stop": {"rounds": rounds},
        "runtime": {"executor": "local"},
    }
    if proto is None or proto["name"] != "hierfavg":
        raw["training"]["epochs"] = 1
    if topo is not None:
        raw["topology"] = topo
    return raw


def run_one(args: tuple[str, str, int, int]) -> dict[str, Any]:
    """Run one (data, method, seed) and return its final numbers."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import validate_raw

    data, method, seed, rounds = args
    with tempfile.TemporaryDirectory() as tmp:
        res = run_scenario(validate_raw(scenario(data, method, seed, rounds)), tmp)
    last = res.evals[-1]
    return {"data": data, "method": method, "seed": seed, "device_accuracy": last["device_accuracy_mean"],
            "p10": last["device_accuracy_p10"], "p90": last["device_accuracy_p90"],
            "global_accuracy": last["accuracy"], "model_bytes": res.summary["model_bytes"],
            "virtual_time_s": res.summary["virtual_time_s"], "wall_s": res.summary["wall_s"]}


def main() -> None:
    """Run the grid, write the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    grid = [(d, m, 17 + s, args.rounds) for d in DATA for m in METHODS for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run_one, grid))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "personal_comparison.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    lines = ["| method | " + " | ".join(f"{d}: ours (p10–p90) | {d}: source" for d in DATA) + " |",
             "|---|" + "---|---|" * len(DATA)]
    means: dict[tuple[str, str], float] = {}
    for m in METHODS:
        cells = []
        for d in DATA:
            mine = [r for r in rows if r["data"] == d and r["method"] == m]
            acc = statistics.fmean(r["device_accuracy"] for r in mine) * 100
            means[(d, m)] = acc
            p10 = statistics.fmean(r["p10"] for r in mine) * 100
            p90 = statistics.fmean(r["p90"] for r in mine) * 100
            src = SOURCE[d].get(m)
            cells += [f"{acc:.1f} ({p10:.0f}–{p90:.0f})", "—" if src is None else f"{src:.2f}"]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    checks = []
    for d in DATA:
        meta_beats = all(means[(d, x)] > means[(d, "FedAvg")] for x in ("FedMeta-MAML", "FedMeta-SGD"))
        pl_raises = all(means[(d, f"{b} + PL" if b != "FedAvg" else "FedAvg + PL (FedPer)")] > means[(d, b)]
                        for b in ("FedAvg", "FedAvgMeta", "FedMeta-MAML", "FedMeta-SGD"))
        checks.append(f"* {d}: meta > FedAvg: **{'holds' if meta_beats else 'does not hold'}**; "
                      f"personal layers raise all four: **{'holds' if pl_raises else 'does not hold'}**.")
    text = ("# Personalisation compared (analysis/personal_comparison.py)\n\n"
            f"{args.seeds} seeds × {args.rounds} rounds; mean per-device accuracy (%) on each device's held-out "
            "20 % after its personalisation step, sample-weighted; in brackets the p10–p90 of devices.\n\n"
            + "\n".join(lines) + "\n\n" + "\n".join(checks) + "\n")
    (OUT / "personal_comparison.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
