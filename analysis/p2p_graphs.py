"""Peer-to-peer learning on a ring, a torus and alone: the specification's check of cooperation.

16 nodes with label-skewed data (synthetic(0.5, 0.5), two label shards per device), logistic
regression, ``protocol: p2p`` with point beliefs (one local epoch per step, then the neighbours'
trained models averaged with Metropolis–Hastings weights), 40 virtual seconds, seeds 1–3. Graphs:
a ring, a 4 × 4 torus, and no edges (each node learns alone). Reported: the mean over nodes of
each node's own test accuracy (``node_accuracy_mean``) and the consensus distance, at 10 and 40 s.
Expected shape: torus > ring > alone in node accuracy, and the consensus distance lower on the
torus than on the ring.

Writes ``analysis/results/p2p_graphs.{md,json}``.
Usage: ``PYTHONPATH=. python analysis/p2p_graphs.py [--seeds 3] [--jobs 2]``.
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
GRAPHS: dict[str, dict[str, Any]] = {"ring": {"name": "ring"}, "torus 4 × 4": {"name": "torus", "rows": 4},
                                     "alone (no edges)": {"name": "empty"}}
TIMES = (10.0, 40.0)


def scenario(graph: str, seed: int) -> dict[str, Any]:
    """The raw scenario of one run."""
    return {
        "name": "p2p_graphs", "seed": seed,
        "data": {"dataset": {"name": "synthetic", "alpha": 0.5, "beta": 0.5},
                 "partition": {"name": "shards", "shards_per_client": 2}},
        "model": {"name": "logreg"},
        "devices": {"count": 16, "speed_sps": {"dist": "choice", "values": [200, 800], "weights": [0.5, 0.5]},
                    "uplink_mbps": {"dist": "uniform", "low": 2, "high": 20},
                    "downlink_mbps": {"dist": "uniform", "low": 10, "high": 100},
                    "latency_ms": {"dist": "uniform", "low": 5, "high": 40}},
        "topology": {"device_graph": GRAPHS[graph]},
        "protocol": {"name": "p2p", "local_epochs": 1},
        "training": {"batch_size": 10, "lr": 0.05},
        "evaluation": {"every_s": 10.0},
        "stop": {"virtual_time_s": max(TIMES)},
        "runtime": {"executor": "local"},
    }


def run_one(args: tuple[str, int]) -> dict[str, Any]:
    """Run one (graph, seed): node accuracy and consensus distance at each reported time."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import validate_raw

    graph, seed = args
    with tempfile.TemporaryDirectory() as tmp:
        res = run_scenario(validate_raw(scenario(graph, seed)), tmp)
    at = {e["t"]: e for e in res.evals}
    return {"graph": graph, "seed": seed,
            **{f"node_accuracy_{t:g}": at[t]["node_accuracy_mean"] for t in TIMES},
            **{f"consensus_distance_{t:g}": at[t]["consensus_distance"] for t in TIMES}}


def main() -> None:
    """Run the grid; write the table and the rows."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    grid = [(g, 1 + s) for g in GRAPHS for s in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run_one, grid))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "p2p_graphs.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")

    def band(key: str, graph: str) -> str:
        v = [r[key] for r in rows if r["graph"] == graph]
        return f"{statistics.fmean(v):.3f} ({min(v):.3f}–{max(v):.3f})"

    keys = [f"node_accuracy_{t:g}" for t in TIMES] + [f"consensus_distance_{t:g}" for t in TIMES]
    lines = ["| graph | " + " | ".join(k.replace("_", " ") + " s" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    lines += [f"| {g} | " + " | ".join(band(k, g) for k in keys) + " |" for g in GRAPHS]
    text = ("# Peer-to-peer learning on a ring, a torus and alone (analysis/p2p_graphs.py)\n\n"
            f"{args.seeds} seeds; mean, (min–max) over seeds.\n\n" + "\n".join(lines) + "\n")
    (OUT / "p2p_graphs.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
