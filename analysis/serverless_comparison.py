"""Serverless learning compared: D-PSGD on a ring, a random geometric graph and a small-world graph,
against FedAvg with a server, on the same devices and data.

16 devices (the population of ``scenarios/dpsgd_ring.yaml``: synthetic(0.5, 0.5) data split
naturally, logistic regression, speeds 200 or 800 samples/s, 2–20 Mbit/s uplinks), each job 10 local
SGD steps. D-PSGD (``update: dpsgd``) mixes with Metropolis–Hastings weights after every job;
FedAvg selects all 16 devices per round and waits for all of them. For each method and seed: the
emulated time to 0.8 accuracy (evaluations every second; the serverless runs evaluate the average of
the nodes' models), the accuracy after 30 virtual seconds, and the bytes each device sent and
received in that time. Seeds 1, 2, 3 (devices, data and graphs change with the seed; every method
sees the same ones for a seed).

Writes ``analysis/results/serverless_comparison.{md,json,png}``.
Usage: ``PYTHONPATH=. python analysis/serverless_comparison.py [--seeds 3] [--jobs 2]``.
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
TARGET = 0.8
HORIZON_S = 30.0
N = 16

DPSGD = {"name": "dpsgd", "local_steps": 10, "update": "dpsgd"}
# method → (protocol, device graph or None)
METHODS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "D-PSGD, ring": (DPSGD, {"name": "ring"}),
    "D-PSGD, random geometric (r = 0.45)": (DPSGD, {"name": "random_geometric", "radius": 0.45}),
    "D-PSGD, small world (k = 4, β = 0.2)": (DPSGD, {"name": "small_world", "k": 4, "beta": 0.2}),
    "FedAvg with a server": ({"name": "fedavg", "fraction": 1.0}, None),
}


def scenario(method: str, seed: int) -> dict[str, Any]:
    """The raw scenario of one run."""
    proto, graph = METHODS[method]
    raw: dict[str, Any] = {
        "name": "serverless", "seed": seed,
        "data": {"dataset": {"name": "synthetic", "alpha": 0.5, "beta": 0.5}, "partition": {"name": "natural"}},
        "model": {"name": "logreg"},
        "devices": {"count": N, "speed_sps": {"dist": "choice", "values": [200, 800], "weights": [0.5, 0.5]},
                    "uplink_mbps": {"dist": "uniform", "low": 2, "high": 20},
                    "downlink_mbps": {"dist": "uniform", "low": 10, "high": 100},
                    "latency_ms": {"dist": "uniform", "low": 5, "high": 40}},
        "protocol": proto,
        "training": {"steps": 10, "batch_size": 10, "lr": 0.05},
        "evaluation": {"every_s": 1.0, "target_accuracy": TARGET},
        "stop": {"virtual_time_s": HORIZON_S},
        "runtime": {"executor": "local"},
    }
    if graph is not None:
        raw["topology"] = {"device_graph": graph}
    return raw


def run_one(args: tuple[str, int]) -> dict[str, Any]:
    """Run one (method, seed): time to target, final accuracy, traffic per device, the accuracy curve."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import validate_raw

    method, seed = args
    with tempfile.TemporaryDirectory() as tmp:
        res = run_scenario(validate_raw(scenario(method, seed)), tmp)
    totals = res.summary["totals"]
    # each byte moved is sent by one device and received by another (d2d) or by the server (FedAvg)
    per_device = (2 * totals["bytes_d2d"] if METHODS[method][1] is not None else totals["bytes_device_tier"]) / N
    return {"method": method, "seed": seed, "time_to_target_s": res.summary["time_to_target_s"],
            "final_accuracy": res.summary["final_accuracy"], "mb_per_device": per_device / 1e6,
            "consensus_distance": res.evals[-1].get("consensus_distance"),
            "curve": [(e["t"], e["accuracy"]) for e in res.evals]}


def _band(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3g} ({min(values):.3g}–{max(values):.3g})"


def table(rows: list[dict[str, Any]], seeds: int) -> str:
    """The markdown table: mean over seeds, (min–max) in brackets."""
    head = (f"| method | time to {TARGET} accuracy, s | accuracy at {HORIZON_S:g} s | MB per device "
            f"(sent + received) | consensus distance at {HORIZON_S:g} s |")
    lines = [head, "|---|---|---|---|---|"]
    for m in METHODS:
        mine = [r for r in rows if r["method"] == m]
        reached = [r["time_to_target_s"] for r in mine if r["time_to_target_s"] is not None]
        ttt = _band(reached) + ("" if len(reached) == len(mine) else f", {len(mine) - len(reached)} never")
        cd = [r["consensus_distance"] for r in mine if r["consensus_distance"] is not None]
        lines.append(f"| {m} | {ttt if reached else 'never'} | {_band([r['final_accuracy'] for r in mine])} | "
                     f"{_band([r['mb_per_device'] for r in mine])} | {_band(cd) if cd else '—'} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Accuracy against emulated time: the mean over seeds, with the min–max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for m in METHODS:
        curves = [r["curve"] for r in rows if r["method"] == m]
        k = min(len(c) for c in curves)
        t = [curves[0][i][0] for i in range(k)]
        acc = [[c[i][1] for c in curves] for i in range(k)]
        ax.plot(t, [statistics.fmean(a) for a in acc], label=m)
        ax.fill_between(t, [min(a) for a in acc], [max(a) for a in acc], alpha=0.2)
    ax.axhline(TARGET, color="grey", lw=0.8, ls="--")
    from hierfl.viz.plot import X_LABELS

    ax.set_xlabel(X_LABELS["time"])
    ax.set_ylabel("test accuracy (average model for D-PSGD)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    """Run the grid; write the table, the rows and the plot."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    grid = [(m, 1 + s) for m in METHODS for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run_one, grid))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "serverless_comparison.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    plot(rows, OUT / "serverless_comparison.png")
    text = ("# Serverless learning compared (analysis/serverless_comparison.py)\n\n"
            f"{len(METHODS)} methods × {args.seeds} seeds, 16 devices; mean over seeds, (min–max) in brackets.\n\n"
            + table(rows, args.seeds) + "\n")
    (OUT / "serverless_comparison.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
