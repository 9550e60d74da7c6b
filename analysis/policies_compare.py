"""Re-clustering × straggler policies over three protocols: the table and band plot of a finished
``scenarios/sweeps/policies_compare.yaml`` sweep.

The sweep crosses HierFAVG (Liu et al., ICC 2020), AHFL and FedCH (Wang et al., IEEE TMC 2023) with
the re-clustering policies {never, periodic, adaptive} and the straggler policies {wait_all, deadline,
over_select}, under a slowdown and churn. This script reads the sweep directory only (it runs
nothing) and writes:

* a markdown table, one row per (protocol, re-clustering, straggler) point: trials run, final accuracy
  and time to the target (mean ± 95 % Student-t interval over the seeds, time over the seeds that
  reached the target), how many seeds reached it, and ``refused: <reason>`` for a combination the
  protocol refuses by declaration (recorded, not run);
* a band plot: one panel per (protocol, straggler policy), accuracy against emulated time, one line
  per re-clustering policy with its 95 % band over seeds (the method of ``hierfl plot SWEEP_DIR``:
  every run interpolated onto the union of its group's evaluation times, cut at the earliest last
  evaluation).

Usage::

    hierfl sweep scenarios/sweeps/policies_compare.yaml --out sweeps/policies_compare
    python analysis/policies_compare.py sweeps/policies_compare -o docs/howto/policies_compare.png \\
        --table policies_compare.md
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.sweep.aggregate import common_grid, mean_ci, sweep_runs
from hierfl.viz.plot import X_LABELS
from hierfl.viz.runs import RunReadError, eval_series

__all__ = ["collect", "table_markdown", "plot", "main"]


def _name(value: Any) -> str:
    """A grid value by its plug-in name (``{name: periodic, rho: 2}`` → ``periodic``)."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return str(value["name"])
    return str(value)


def _key(changed: dict[str, Any]) -> tuple[str, str, str]:
    """(protocol label, re-clustering policy, straggler policy) of a trial's grid point."""
    return (str(changed.get("scenario", "")), _name(changed.get("protocol.recluster", "never")),
            _name(changed.get("straggler", "wait_all")))


def collect(sweep_dir: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per grid point, in the grid's order: its seeds' runs (completed ones), time to target of each,
    final accuracy of each, and the refusal reason of a refused point."""
    manifest = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    points: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t in manifest["trials"]:
        p = points.setdefault(_key(t.get("changed", {})), {"trials": 0, "runs": [], "refused": None})
        p["trials"] += 1
        if t.get("refused") is not None:
            p["refused"] = t["refused"]
    try:
        runs = sweep_runs(sweep_dir)
    except RunReadError:
        runs = []
    for r in runs:
        if r.summary.get("status") == "completed":
            points[_key(r.changed)]["runs"].append(r)
    return points


def _pm(values: list[float], digits: int) -> str:
    if not values:
        return "–"
    mean, half = mean_ci(np.asarray(values, dtype=float))
    text = f"{float(mean):.{digits}f}"
    return text if math.isnan(float(half)) else f"{text} ± {float(half):.{digits}f}"


def table_markdown(points: dict[tuple[str, str, str], dict[str, Any]], target: float | None) -> str:
    """The comparison as a markdown table (see the module docstring)."""
    ttt_head = f"time to {target:g} (s)" if target is not None else "time to target (s)"
    lines = [f"| protocol | re-clustering | straggler | runs | final accuracy | {ttt_head} | reached |",
             "|---|---|---|---|---|---|---|"]
    for (proto, rec, strag), p in points.items():
        if p["refused"] is not None and not p["runs"]:
            lines.append(f"| {proto} | {rec} | {strag} | 0/{p['trials']} | refused: {p['refused']} | – | – |")
            continue
        finals, ttt = [], []
        for r in p["runs"]:
            _, ys = eval_series(r.dir, metric="accuracy", x="time")
            ys = ys[~np.isnan(ys)]
            if ys.size:
                finals.append(float(ys[-1]))
            if isinstance(r.summary.get("time_to_target_s"), (int, float)):
                ttt.append(float(r.summary["time_to_target_s"]))
        lines.append(f"| {proto} | {rec} | {strag} | {len(p['runs'])}/{p['trials']} | {_pm(finals, 3)} | "
                     f"{_pm(ttt, 1)} | {len(ttt)}/{len(p['runs'])} |")
    return "\n".join(lines) + "\n"


def plot(points: dict[tuple[str, str, str], dict[str, Any]], out: Path, target: float | None) -> Path:
    """Accuracy against emulated time: a panel per (protocol, straggler policy), a line and a 95 % band
    over seeds per re-clustering policy; a refused panel says why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protos = list(dict.fromkeys(k[0] for k in points))
    stragglers = list(dict.fromkeys(k[2] for k in points))
    fig, axes = plt.subplots(len(protos), len(stragglers), figsize=(4.0 * len(stragglers), 3.0 * len(protos)),
                             sharex=True, sharey=True, squeeze=False)
    for i, proto in enumerate(protos):
        for j, strag in enumerate(stragglers):
            ax = axes[i][j]
            ax.set_title(f"{proto}, {strag}", fontsize="medium")
            ax.grid(True, alpha=0.3)
            for (pr, rec, st), p in points.items():
                if (pr, st) != (proto, strag):
                    continue
                if p["refused"] is not None and not p["runs"]:
                    ax.text(0.5, 0.5, "refused by declaration", ha="center", va="center", transform=ax.transAxes,
                            color="0.4")
                    continue
                series = []
                for r in p["runs"]:
                    xs, ys = eval_series(r.dir, metric="accuracy", x="time")
                    ok = ~np.isnan(ys)
                    if ok.any():
                        series.append((xs[ok], ys[ok]))
                if not series:
                    continue
                grid, values = common_grid(series)
                mean, half = mean_ci(values)
                (line,) = ax.plot(grid, mean, label=f"{rec} (n={len(series)})", linewidth=1.4)
                if len(series) > 1:
                    ax.fill_between(grid, mean - half, mean + half, color=line.get_color(), alpha=0.2, linewidth=0)
            if target is not None:
                ax.axhline(target, linestyle="--", color="0.4", linewidth=0.9)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower right", fontsize="x-small")
            if i == len(protos) - 1:
                ax.set_xlabel(X_LABELS["time"])
            if j == 0:
                ax.set_ylabel("accuracy")
    fig.suptitle("accuracy: mean and 95 % band over seeds, per re-clustering policy", fontsize="medium")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python analysis/policies_compare.py SWEEP_DIR [-o PLOT] [--table MD]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("-o", "--plot", type=Path, default=Path("policies_compare.png"))
    ap.add_argument("--table", type=Path, default=None, help="also write the markdown table here")
    args = ap.parse_args(argv)
    manifest = json.loads((args.sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    target = manifest.get("spec", {}).get("target")
    points = collect(args.sweep_dir)
    text = table_markdown(points, target)
    print(text, end="")
    if args.table is not None:
        args.table.write_text(text, encoding="utf-8")
    print(plot(points, args.plot, target))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
