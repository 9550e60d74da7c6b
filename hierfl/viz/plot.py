"""Convergence plots: a metric against emulated time or cloud rounds, one line per run.

Figures are built on the Agg canvas directly (no pyplot, no display, no global figure state),
so plotting is safe in headless runs and in parallel tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from hierfl.viz.runs import X_AXES, eval_series, read_summary, run_labels

__all__ = ["SUPPORTED_FORMATS", "X_LABELS", "output_format", "plot_runs"]

SUPPORTED_FORMATS = ("png", "svg", "pdf")

#: Axis label for each allowed ``x``.
X_LABELS: dict[str, str] = {"time": "emulated wall-clock time (s)", "round": "cloud round"}


def output_format(out: Path) -> str:
    """Return the image format implied by ``out``'s extension.

    Parameters
    ----------
    out : Path
        The output file path.

    Returns
    -------
    str
        One of :data:`SUPPORTED_FORMATS`.

    Raises
    ------
    ValueError
        If the extension is missing or not supported; the message lists the allowed formats.
    """
    suffix = Path(out).suffix.lower().lstrip(".")
    if suffix not in SUPPORTED_FORMATS:
        shown = repr(Path(out).suffix) if suffix else "no extension"
        raise ValueError(
            f"{out}: unsupported output format ({shown}); allowed: "
            f"{', '.join(SUPPORTED_FORMATS)}"
        )
    return suffix


def new_figure(width_in: float, height_in: float) -> Figure:
    """Create a figure attached to an Agg canvas (headless, outside pyplot)."""
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out: Path, fmt: str) -> Path:
    """Write ``fig`` to ``out`` in ``fmt``, creating parent directories, and release it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out, format=fmt, dpi=150)
    finally:
        fig.clear()
    return out


def plot_runs(
    run_dirs: Sequence[Path],
    out: Path,
    x: str = "time",
    metric: str = "accuracy",
    title: str | None = None,
) -> Path:
    """Plot a metric of one or more runs on shared axes.

    Parameters
    ----------
    run_dirs : sequence of Path
        Run directories; one line each, labelled by :func:`~hierfl.viz.runs.run_labels`
        (run name, disambiguated by directory when names repeat).
    out : Path
        Output file; its extension (``png``, ``svg`` or ``pdf``) picks the format. Parent
        directories are created.
    x : {"time", "round"}
        Emulated wall-clock time in virtual seconds, or cloud rounds.
    metric : str
        Key of the ``eval`` lines plotted on the y axis.
    title : str, optional
        Figure title; defaults to ``"<metric> vs <x axis>"``.

    Returns
    -------
    Path
        ``out``.

    Notes
    -----
    With ``x="time"``, each run whose summary has ``time_to_target_s`` gets a marker at that
    time on its line. With ``metric="accuracy"``, each distinct ``target_accuracy`` found in
    the summaries is drawn as a dashed horizontal line.

    Raises
    ------
    ValueError
        If no run is given, the format or ``x`` is not supported.
    RunReadError
        If a run's files cannot be read or lack the metric.
    """
    fmt = output_format(out)
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not supported; allowed: {', '.join(map(repr, X_AXES))}")
    paths = [Path(d) for d in run_dirs]
    if not paths:
        raise ValueError("plot_runs needs at least one run directory")

    series = [eval_series(p, metric=metric, x=x) for p in paths]
    summaries = [read_summary(p) for p in paths]
    labels = run_labels(paths)

    fig = new_figure(8.0, 5.0)
    ax = fig.add_subplot()
    any_target_marker = False
    for (xs, ys), summary, label in zip(series, summaries, labels):
        marker = "." if len(xs) <= 60 else None
        (line,) = ax.plot(xs, ys, label=label, marker=marker, linewidth=1.5)
        ttt = summary.get("time_to_target_s")
        if x == "time" and isinstance(ttt, (int, float)) and len(xs) > 0:
            ax.plot(
                [float(ttt)],
                [float(np.interp(float(ttt), xs, ys))],
                marker="*",
                markersize=13,
                color=line.get_color(),
                markeredgecolor="black",
                linestyle="none",
                zorder=5,
            )
            any_target_marker = True

    if metric == "accuracy":
        targets = sorted(
            {
                float(s["target_accuracy"])
                for s in summaries
                if isinstance(s.get("target_accuracy"), (int, float))
            }
        )
        for target in targets:
            ax.axhline(
                target, linestyle="--", color="0.4", linewidth=1.0, label=f"target {target:g}"
            )

    handles, legend_labels = ax.get_legend_handles_labels()
    if any_target_marker:
        handles.append(
            Line2D([], [], marker="*", markersize=11, color="0.5",
                   markeredgecolor="black", linestyle="none")
        )
        legend_labels.append("time to target")
    ax.legend(handles, legend_labels, loc="best", fontsize="small")
    ax.set_xlabel(X_LABELS[x])
    ax.set_ylabel(metric)
    ax.set_title(title if title is not None else f"{metric} vs {X_LABELS[x]}")
    ax.grid(True, alpha=0.3)
    return save_figure(fig, out, fmt)
