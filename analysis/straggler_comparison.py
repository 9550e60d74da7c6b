"""Straggler policies side by side: scenarios/stragglers*.yaml (10 % of devices 10x slower from t = 30 s).

Runs wait_all, deadline and over_select on the same world (same seed, same slowdown), writes
analysis/results/stragglers.{md,png} with time to target, final accuracy, rounds, dropped updates
and wasted compute, and prints the table.

    .venv/bin/python analysis/straggler_comparison.py [--executor local|ray]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hierfl.config.loader import load_scenario
from hierfl.emulator import run_scenario
from hierfl.viz.plot import plot_runs

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ["stragglers", "stragglers_deadline", "stragglers_over_select"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--out", default=str(ROOT / "runs" / "straggler_comparison"))
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for name in SCENARIOS:
        sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml", [f"runtime.executor={args.executor}"])
        res = run_scenario(sc, out / name)
        s, t = res.summary, res.summary["totals"]
        rows.append((sc.straggler.name, s["time_to_target_s"], s["final_accuracy"], s["rounds"],
                     int(t["stragglers_dropped"]), t["wasted_compute_s"], t["compute_s"]))
        print(json.dumps({"scenario": name, "time_to_target_s": s["time_to_target_s"],
                          "final_accuracy": s["final_accuracy"], "rounds": s["rounds"]}))
    res_dir = ROOT / "analysis" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    lines = ["| policy | time to 0.7 (s) | final accuracy | rounds in 90 s | updates dropped | wasted compute (s) "
             "| total compute (s) |", "|---|---|---|---|---|---|---|"]
    for p, ttt, acc, rounds, dropped, wasted, compute in rows:
        lines.append(f"| {p} | {'–' if ttt is None else f'{ttt:g}'} | {acc:.4f} | {rounds} | {dropped} | "
                     f"{wasted:.1f} | {compute:.1f} |")
    table = "\n".join(lines)
    (res_dir / "stragglers.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    plot_runs([out / n for n in SCENARIOS], res_dir / "stragglers.png",
              title="FedAvg, 10 % of devices 10x slower from t = 30 s")


if __name__ == "__main__":
    main()
