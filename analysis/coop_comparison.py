"""Co-op's admission window compared with FedAsync without one, on intermittent phones.

The population of ``scenarios/coop.yaml`` (20 phones, Markov availability 60 s up / 30 s down,
synthetic(0.5, 0.5) data revealed over the first 60 s, logistic regression, one epoch per job),
run for 120 virtual seconds:

* Co-op with the default window [1, 10];
* Co-op with a narrow window [2, 4] (more too-soon and too-old refusals);
* Co-op with the window wide open [0, 10^6] — FedAsync's merge rule with base weight 1, plus the
  age queries;
* FedAsync (α = 1, the same (τ + 1)^(−1/2) weight, every device training at once), without the
  age filter and on all data from the start (FedAsync has no streaming option).

Reported per method, mean and (min–max) over seeds 1–3: uploads the server merged, the accuracy of
the server model at 120 s, and the megabytes through the server. The check from the
specification: Co-op reaches a similar accuracy with fewer uploads than without the filter, and
widening the window moves it toward FedAsync.

Writes ``analysis/results/coop_comparison.{md,json}``.
Usage: ``PYTHONPATH=. python analysis/coop_comparison.py [--seeds 3] [--jobs 2]``.
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
HORIZON_S = 120.0
COOP = {"name": "coop", "staleness": {"name": "polynomial", "a": 0.5},
        "stream": {"initial_fraction": 0.2, "full_at_s": 60}}
METHODS: dict[str, dict[str, Any]] = {
    "Co-op [1, 10]": {**COOP, "b_l": 1, "b_u": 10},
    "Co-op [2, 4]": {**COOP, "b_l": 2, "b_u": 4},
    "Co-op [0, 10^6] (no filter)": {**COOP, "b_l": 0, "b_u": 1_000_000},
    "FedAsync (α = 1, all data)": {"name": "fedasync", "alpha": 1.0, "staleness": {"name": "polynomial", "a": 0.5},
                                   "rho": 0.0},
}


def run_one(args: tuple[str, int]) -> dict[str, Any]:
    """Run one (method, seed): merges, final accuracy, server traffic."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    method, seed = args
    sc = load_scenario(ROOT / "scenarios" / "coop.yaml", ["runtime.executor=local", f"stop.virtual_time_s={HORIZON_S}",
                                                          f"seed={seed}", "evaluation.every_s=10"])
    sc = sc.model_copy(update={"protocol": type(sc.protocol).model_validate(METHODS[method])
                               if METHODS[method]["name"] == "coop" else _fedasync(METHODS[method])})
    with tempfile.TemporaryDirectory() as tmp:
        res = run_scenario(sc, tmp)
    totals = res.summary["totals"]
    return {"method": method, "seed": seed, "merges": res.summary["rounds"],
            "final_accuracy": res.summary["final_accuracy"], "mb_cloud": totals["bytes_cloud"] / 1e6,
            "too_old": res.evals[-1].get("coop_too_old"), "too_soon": res.evals[-1].get("coop_too_soon")}


def _fedasync(raw: dict[str, Any]) -> Any:
    from hierfl.methods.fedasync.protocol import FedAsyncConfig

    return FedAsyncConfig.model_validate(raw)


def _band(values: list[float]) -> str:
    if all(float(v).is_integer() for v in values):  # counts
        return f"{statistics.fmean(values):.0f} ({min(values):.0f}–{max(values):.0f})"
    return f"{statistics.fmean(values):.3g} ({min(values):.3g}–{max(values):.3g})"


def main() -> None:
    """Run the grid (or read its rows back with ``--from-json``); write the table and the rows."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--from-json", action="store_true", help="only render the table from the saved rows")
    args = ap.parse_args()
    if args.from_json:
        rows = json.loads((OUT / "coop_comparison.json").read_text(encoding="utf-8"))
    else:
        grid = [(m, 1 + s) for m in METHODS for s in range(args.seeds)]
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(run_one, grid))
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "coop_comparison.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    lines = [f"| method | uploads merged | accuracy at {HORIZON_S:g} s | MB through the server | too old | too soon |",
             "|---|---|---|---|---|---|"]
    for m in METHODS:
        mine = [r for r in rows if r["method"] == m]
        old = [r["too_old"] for r in mine if r["too_old"] is not None]
        soon = [r["too_soon"] for r in mine if r["too_soon"] is not None]
        lines.append(f"| {m} | {_band([r['merges'] for r in mine])} | {_band([r['final_accuracy'] for r in mine])} | "
                     f"{_band([r['mb_cloud'] for r in mine])} | {_band(old) if old else '—'} | "
                     f"{_band(soon) if soon else '—'} |")
    text = ("# Co-op's window compared (analysis/coop_comparison.py)\n\n"
            f"{len(METHODS)} methods × {args.seeds} seeds, 20 intermittent phones, {HORIZON_S:g} virtual s; "
            "mean, (min–max) over seeds.\n\n" + "\n".join(lines) + "\n")
    (OUT / "coop_comparison.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
