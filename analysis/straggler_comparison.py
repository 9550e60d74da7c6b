"""Straggler policies side by side: scenarios/stragglers*.yaml (10 % of devices 10x slower from t = 30 s).

Runs wait_all, deadline and over_select on the same world (same seed, same slowdown), once on the
scenarios' equal-share (IID) split and once on Synthetic(1, 1)'s natural non-IID split, writes
analysis/results/stragglers.{md,png} (the plot: the IID runs; stragglers_noniid.png: the non-IID
ones) with time to target, final accuracy, rounds, dropped updates and wasted compute, and prints
the tables.

    .venv/bin/python analysis/straggler_comparison.py [--executor local|ray]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hierfl.scenario.loader import load_scenario
from hierfl.driver import run_scenario
from hierfl.viz.plot import plot_runs

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ["stragglers", "stragglers_deadline", "stragglers_over_select"]
SPLITS = {"iid": [], "noniid": ["data.partition={name: natural}"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--out", default=str(ROOT / "runs" / "straggler_comparison"))
    args = ap.parse_args()
    out = Path(args.out)
    res_dir = ROOT / "analysis" / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    md = []
    for split, overrides in SPLITS.items():
        rows = []
        for name in SCENARIOS:
            sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml", [f"runtime.executor={args.executor}", *overrides])
            res = run_scenario(sc, out / split / name)
            s, t = res.summary, res.summary["totals"]
            pol = sc.straggler
            label = pol.name + (f" {pol.seconds:g} s" if pol.name == "deadline" else
                                f" ×{pol.factor:g}" if pol.name == "over_select" else "")
            rows.append((label, s["time_to_target_s"], s["final_accuracy"], s["rounds"],
                         int(t["stragglers_dropped"]), t["wasted_compute_s"], t["compute_s"]))
            print(json.dumps({"split": split, "scenario": name, "time_to_target_s": s["time_to_target_s"],
                              "final_accuracy": s["final_accuracy"], "rounds": s["rounds"]}))
        target, horizon = sc.evaluation.target_accuracy, sc.stop.virtual_time_s
        md += [f"**{split}** split ({'equal shares' if split == 'iid' else 'Synthetic(1, 1) natural, per-user'})",
               "", f"| policy | time to {target:g} (s) | final accuracy | rounds in {horizon:g} s | updates dropped "
               "| wasted compute (s) | total compute (s) |", "|---|---|---|---|---|---|---|"]
        for p, ttt, acc, rounds, dropped, wasted, compute in rows:
            md.append(f"| {p} | {'–' if ttt is None else f'{ttt:g}'} | {acc:.4f} | {rounds} | {dropped} | "
                      f"{wasted:.1f} | {compute:.1f} |")
        md.append("")
        png = "stragglers.png" if split == "iid" else f"stragglers_{split}.png"
        plot_runs([out / split / n for n in SCENARIOS], res_dir / png,
                  title=f"FedAvg ({split}), 10 % of devices 10x slower from t = 30 s")
    table = "\n".join(md)
    (res_dir / "stragglers.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
