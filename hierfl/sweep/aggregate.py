"""Seed-aggregated curves and tables of a sweep directory (``hierfl plot SWEEP_DIR``, ``hierfl table``).

Grouping
    Trials are grouped by the value of a key path of their resolved scenario (``config.yaml``), e.g.
    ``straggler.name`` or ``protocol.fraction``, or by ``scenario``, the base scenario's label in a
    ``scenarios:`` sweep; by default by everything the grid changed (the
    trial's grid point), so each group holds the seeds of one grid point.

Common time grid (the method ``hierfl plot`` documents)
    Evaluations happen at different virtual times in different runs (``evaluation.every_s`` is a
    minimum spacing; asynchronous protocols evaluate after the aggregation that crosses it). Each
    run's metric is linearly interpolated (``numpy.interp``) onto one grid per group: the sorted
    union of all the group's evaluation times, cut at the earliest final evaluation among the
    group's runs, so no run is extrapolated past its last evaluation. With ``x="round"`` the grid
    is the union of cloud rounds, cut the same way.

Band
    At every grid point: the mean over the group's runs and the 95 % confidence interval of that
    mean, ``mean ± t(0.975, n-1) · s / sqrt(n)`` (Student's t, ``s`` the sample standard deviation
    over seeds). A group of one run has no band. Tables use the same interval for final values
    and time to target (time to target over the runs that reached it; ``reached`` says how many).

Refused trials
    A trial the protocol refused by declaration (a sweep file with ``refused: skip``) has no run;
    the table gives its grid point one row, ``refused: <reason>``, so a crossed grid shows every
    combination it asked for.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hierfl.viz.runs import RunReadError, eval_series, read_summary

__all__ = ["SweepRun", "sweep_runs", "group_runs", "mean_ci", "common_grid", "plot_sweep", "sweep_table",
           "table_markdown", "table_csv"]


@dataclass
class SweepRun:
    """One trial of a sweep directory: its run directory, resolved config, summary and grid point."""

    id: str
    dir: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    changed: dict[str, Any]
    seed: int


def _label(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        rest = {k: v for k, v in value.items() if k != "name"}
        return value["name"] + (" " + " ".join(f"{k}={_label(v)}" for k, v in rest.items()) if rest else "")
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def sweep_runs(sweep_dir: str | Path) -> list[SweepRun]:
    """Every trial of ``sweep_dir`` that has a run directory with metrics (failed ones included)."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / "sweep.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunReadError(f"{sweep_dir}: not a sweep directory (no sweep.json; `hierfl sweep` writes one; "
                           "a run directory is read by `hierfl plot` and `hierfl report`)") from None
    except ValueError as exc:
        raise RunReadError(f"{path}: invalid JSON: {exc}") from None
    out = []
    for t in manifest["trials"]:
        run_dir = sweep_dir / "runs" / t["id"]
        if not (run_dir / "metrics.jsonl").is_file():
            continue
        try:
            config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            config = {}
        out.append(SweepRun(t["id"], run_dir, config, read_summary(run_dir), dict(t.get("changed", {})),
                            int(t["seed"])))
    if not out:
        raise RunReadError(f"{sweep_dir}: no trial has written metrics yet")
    return out


def _lookup(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def group_runs(runs: list[SweepRun], group_by: str | None = None) -> dict[str, list[SweepRun]]:
    """Runs by group label, in first-seen order: the value at key path ``group_by`` of each run's
    resolved scenario, or (None) the trial's grid point."""
    groups: dict[str, list[SweepRun]] = {}
    for r in runs:
        if group_by is None:
            label = ", ".join(f"{k}={_label(v)}" for k, v in r.changed.items()) or "all"
        else:
            try:
                label = _label(_lookup(r.config, group_by))
            except KeyError:
                if group_by in r.changed:  # a changed key that is not a scenario key: `scenario` (the base's label)
                    label = _label(r.changed[group_by])
                    groups.setdefault(label, []).append(r)
                    continue
                raise RunReadError(f"{r.dir}/config.yaml: no key {group_by!r} to group by; top-level keys: "
                                   f"{', '.join(r.config)}") from None
        groups.setdefault(label, []).append(r)
    return groups


def mean_ci(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the half-width of its 95 % Student-t confidence interval along ``axis`` (NaN for n < 2)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = values.shape[axis]
    mean = values.mean(axis=axis)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    sem = values.std(axis=axis, ddof=1) / math.sqrt(n)
    return mean, stats.t.ppf(0.975, n - 1) * sem


def common_grid(series: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The grid (union of x values up to the earliest last x) and each series interpolated onto it
    (rows: series). See the module docstring."""
    end = min(float(xs[-1]) for xs, _ in series)
    grid = np.unique(np.concatenate([xs[xs <= end] for xs, _ in series]))
    return grid, np.vstack([np.interp(grid, xs, ys) for xs, ys in series])


def plot_sweep(sweep_dir: str | Path, out: str | Path, group_by: str | None = None, metric: str = "accuracy",
               x: str = "time", title: str | None = None) -> Path:
    """Mean and 95 % band over seeds of ``metric`` per group, against virtual time or round."""
    from hierfl.viz.plot import X_LABELS, new_figure, output_format, save_figure

    fmt = output_format(Path(out))
    groups = group_runs(sweep_runs(sweep_dir), group_by)
    fig = new_figure(8.0, 5.0)
    ax = fig.add_subplot()
    targets = set()
    for label, runs in groups.items():
        series = []
        for r in runs:
            try:
                xs, ys = eval_series(r.dir, metric=metric, x=x)
            except RunReadError:
                if r.summary.get("status") == "completed":
                    raise  # a finished run without the metric: the metric name is wrong
                continue  # a failed trial that never evaluated
            ok = ~np.isnan(ys)
            if ok.any():
                series.append((xs[ok], ys[ok]))
            if isinstance(r.summary.get("target_accuracy"), (int, float)):
                targets.add(float(r.summary["target_accuracy"]))
        if not series:
            continue
        grid, values = common_grid(series)
        mean, half = mean_ci(values)
        (line,) = ax.plot(grid, mean, label=f"{label} (n={len(series)})", linewidth=1.6)
        if len(series) > 1:
            ax.fill_between(grid, mean - half, mean + half, color=line.get_color(), alpha=0.2, linewidth=0)
    if metric == "accuracy":
        for target in sorted(targets):
            ax.axhline(target, linestyle="--", color="0.4", linewidth=1.0, label=f"target {target:g}")
    ax.legend(loc="best", fontsize="small")
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel(metric)
    by = group_by or "grid point"
    ax.set_title(title if title is not None else f"{metric}: mean and 95 % CI over seeds, by {by}")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, Path(out), fmt)


def _final(run: SweepRun, metric: str) -> float | None:
    try:
        _, ys = eval_series(run.dir, metric=metric, x="time")
    except RunReadError:
        return None
    ys = ys[~np.isnan(ys)]
    return float(ys[-1]) if ys.size else None


def _refused_groups(sweep_dir: Path, group_by: str | None) -> dict[str, tuple[int, str]]:
    """Group label -> (trials, reason) of the trials refused by declaration, labelled as
    :func:`group_runs` labels runs (the grid point, or the changed key ``group_by``)."""
    try:
        manifest = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, tuple[int, str]] = {}
    for t in manifest.get("trials", []):
        why, changed = t.get("refused"), dict(t.get("changed", {}))
        if why is None:
            continue
        if group_by is None:
            label = ", ".join(f"{k}={_label(v)}" for k, v in changed.items()) or "all"
        elif group_by in changed:
            label = _label(changed[group_by])
        else:
            continue  # grouped by a key the grid did not change: the refused trials have no config to read it from
        n, _ = out.get(label, (0, why))
        out[label] = (n + 1, why)
    return out


def sweep_table(sweep_dir: str | Path, group_by: str | None = None, metric: str = "accuracy") -> list[dict[str, Any]]:
    """Per group: runs, completed, final ``metric`` mean and CI half-width, time to target mean and CI
    (over the runs that reached it), how many reached it, rounds mean; ``refused`` the reason of a
    group whose trials the protocol refused by declaration (empty otherwise)."""
    rows = []
    refused = _refused_groups(Path(sweep_dir), group_by)
    try:
        groups = group_runs(sweep_runs(sweep_dir), group_by)
    except RunReadError:
        if not refused:
            raise
        groups = {}
    # refused grid points take their place in the grid's order: rows follow the manifest's trial order
    labels = list(dict.fromkeys([*groups, *refused]))
    if refused:
        order = {label: i for i, label in enumerate(_grid_order(Path(sweep_dir), group_by))}
        labels.sort(key=lambda lb: order.get(lb, len(order)))  # stable: groups the grid did not name keep theirs
    for label in labels:
        if label not in groups:
            n, why = refused[label]
            rows.append({"group": label, "runs": n, "completed": 0, f"final_{metric}_mean": math.nan,
                         f"final_{metric}_ci95": math.nan, "target": None, "time_to_target_s_mean": math.nan,
                         "time_to_target_s_ci95": math.nan, "reached": 0, "rounds_mean": math.nan,
                         "refused": why})
            continue
        runs = groups[label]
        done = [r for r in runs if r.summary.get("status") == "completed"]
        finals = [v for v in (_final(r, metric) for r in done) if v is not None]
        ttt = [float(r.summary["time_to_target_s"]) for r in done
               if isinstance(r.summary.get("time_to_target_s"), (int, float))]
        targets = {r.summary.get("target_accuracy") for r in done} - {None}
        fm, fc = mean_ci(np.asarray(finals)) if finals else (np.nan, np.nan)
        tm, tc = mean_ci(np.asarray(ttt)) if ttt else (np.nan, np.nan)
        rounds = [float(r.summary["rounds"]) for r in done if isinstance(r.summary.get("rounds"), (int, float))]
        rows.append({"group": label, "runs": len(runs), "completed": len(done),
                     f"final_{metric}_mean": float(fm), f"final_{metric}_ci95": float(fc),
                     "target": next(iter(targets)) if len(targets) == 1 else None,
                     "time_to_target_s_mean": float(tm), "time_to_target_s_ci95": float(tc),
                     "reached": len(ttt), "rounds_mean": float(np.mean(rounds)) if rounds else math.nan,
                     "refused": refused[label][1] if label in refused else ""})
    return rows


def _grid_order(sweep_dir: Path, group_by: str | None) -> list[str]:
    """Group labels in the order their first trial appears in the manifest."""
    try:
        manifest = json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    seen: dict[str, None] = {}
    for t in manifest.get("trials", []):
        changed = dict(t.get("changed", {}))
        if group_by is None:
            seen.setdefault(", ".join(f"{k}={_label(v)}" for k, v in changed.items()) or "all")
        elif group_by in changed:
            seen.setdefault(_label(changed[group_by]))
    return list(seen)


def _pm(mean: float, half: float, digits: int) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.{digits}f}" + ("" if math.isnan(half) else f" ± {half:.{digits}f}")


def table_markdown(rows: list[dict[str, Any]], metric: str = "accuracy", group_by: str | None = None) -> str:
    """The table as markdown: mean ± 95 % CI half-width."""
    target = next((r["target"] for r in rows if r["target"] is not None), None)
    ttt_head = f"time to {target:g} (s)" if target is not None else "time to target (s)"
    lines = [f"| {group_by or 'grid point'} | runs | final {metric} | {ttt_head} | reached | rounds |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("refused") and not r["completed"]:
            lines.append(f"| {r['group']} | 0/{r['runs']} | refused: {r['refused']} | – | – | – |")
            continue
        lines.append(f"| {r['group']} | {r['completed']}/{r['runs']} | "
                     f"{_pm(r[f'final_{metric}_mean'], r[f'final_{metric}_ci95'], 4)} | "
                     f"{_pm(r['time_to_target_s_mean'], r['time_to_target_s_ci95'], 1)} | "
                     f"{r['reached']}/{r['completed']} | {_pm(r['rounds_mean'], math.nan, 1)} |")
    return "\n".join(lines) + "\n"


def table_csv(rows: list[dict[str, Any]]) -> str:
    """The table as CSV (mean and CI half-width in separate columns; empty for none)."""
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in r.items()})
    return buf.getvalue()
