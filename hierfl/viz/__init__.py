"""Reading and plotting run directories: convergence curves and Gantt timelines.

The readers (:mod:`hierfl.viz.runs`) import without matplotlib; the plotting names load it the first
time one of them is used, so that reading a run or a sweep's table (``hierfl table``) does not pay for it.
"""

from __future__ import annotations

import importlib
from typing import Any

from hierfl.viz.runs import (
    RunReadError,
    eval_series,
    read_metrics,
    read_summary,
    read_trace,
    run_labels,
    run_name,
)

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

# the plotting names and the module of each (imported on first use: they import matplotlib)
_PLOTTING = {"SUPPORTED_FORMATS": "hierfl.viz.plot", "plot_runs": "hierfl.viz.plot",
             "plot_timeline": "hierfl.viz.timeline", "timeline_lanes": "hierfl.viz.timeline"}


def __getattr__(name: str) -> Any:
    module = _PLOTTING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
