"""Reading and plotting run directories: convergence curves and Gantt timelines."""

from hierfl.viz.plot import SUPPORTED_FORMATS, plot_runs
from hierfl.viz.runs import (
    RunReadError,
    eval_series,
    read_metrics,
    read_summary,
    read_trace,
    run_labels,
    run_name,
)
from hierfl.viz.timeline import plot_timeline, timeline_lanes

__all__ = [
    "RunReadError",
    "SUPPORTED_FORMATS",
    "eval_series",
    "plot_runs",
    "plot_timeline",
    "read_metrics",
    "read_summary",
    "read_trace",
    "run_labels",
    "run_name",
    "timeline_lanes",
]
