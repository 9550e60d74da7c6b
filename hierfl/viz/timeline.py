"""Gantt timeline of a run from its ``trace.json`` (virtual time, one row per entity).

Lanes are ordered cloud, leaders (edge servers), devices, each by thread id, judged from the
``process_name`` metadata rather than from pid numbers. Idle time is simply a gap in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from hierfl.viz.plot import new_figure, output_format, save_figure
from hierfl.viz.runs import RunReadError, read_trace, run_name

__all__ = ["SPAN_COLORS", "timeline_lanes", "plot_timeline"]

#: Fixed colours of the standard spans; other span names get further colours in name order.
SPAN_COLORS: dict[str, str] = {
    "train": "tab:blue",
    "download": "tab:green",
    "upload": "tab:orange",
    "aggregate": "tab:red",
    "evaluate": "tab:purple",
}
_EXTRA_COLORS = ("tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "gold",
                 "navy", "teal", "maroon", "lime")

_US_PER_S = 1e6

# Rank of a process in the lane order, by keyword in its process_name.
_PROCESS_RANKS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (0, ("cloud",)),
    (1, ("leader", "edge")),
    (2, ("device",)),
)
_DEVICE_RANK = 2
_UNKNOWN_RANK = 3


@dataclass
class _Lane:
    """One timeline row: a (pid, tid) with its label, spans and instants (seconds)."""

    pid: Any
    tid: Any
    rank: int
    label: str
    spans: list[tuple[float, float, str]] = field(default_factory=list)
    instants: list[tuple[float, str]] = field(default_factory=list)


def _process_rank(process_name: str | None) -> int:
    """Lane-order rank of a process from its name: cloud 0, leaders 1, devices 2, else 3."""
    if process_name is None:
        return _UNKNOWN_RANK
    lowered = process_name.lower()
    for rank, words in _PROCESS_RANKS:
        if any(w in lowered for w in words):
            return rank
    return _UNKNOWN_RANK


def _sort_key(value: Any) -> tuple[int, float, str]:
    """Order numbers numerically before anything else, which is ordered as text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _number(event: dict[str, Any], key: str, index: int) -> float:
    """Read a numeric event field, naming the event on failure."""
    value = event.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(
            f"trace event #{index} ({event.get('ph')!r} {event.get('name')!r}): "
            f"{key!r} must be a number, got {value!r}"
        )
    return float(value)


def _build_lanes(events: list[dict[str, Any]]) -> tuple[list[_Lane], list[tuple[float, str]]]:
    """Group trace events into ordered lanes; also return global-scope instants."""
    process_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    for event in events:
        if event.get("ph") != "M":
            continue
        raw_args = event.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        if event.get("name") == "process_name":
            process_names[event.get("pid")] = str(args.get("name", ""))
        elif event.get("name") == "thread_name":
            thread_names[(event.get("pid"), event.get("tid"))] = str(args.get("name", ""))

    lanes: dict[tuple[Any, Any], _Lane] = {}

    def lane(pid: Any, tid: Any) -> _Lane:
        key = (pid, tid)
        if key not in lanes:
            pname = process_names.get(pid)
            label = thread_names.get(key) or f"{pname or f'pid {pid}'} {tid}"
            lanes[key] = _Lane(pid, tid, _process_rank(pname), label)
        return lanes[key]

    for pid, tid in thread_names:
        lane(pid, tid)
    global_instants: list[tuple[float, str]] = []
    for index, event in enumerate(events):
        ph = event.get("ph")
        name = str(event.get("name", ""))
        if ph == "X":
            start = _number(event, "ts", index) / _US_PER_S
            duration = _number(event, "dur", index) / _US_PER_S
            lane(event.get("pid"), event.get("tid")).spans.append((start, duration, name))
        elif ph in ("i", "I"):
            when = _number(event, "ts", index) / _US_PER_S
            if event.get("s") == "g":
                global_instants.append((when, name))
            else:
                lane(event.get("pid"), event.get("tid")).instants.append((when, name))

    ordered = sorted(
        lanes.values(),
        key=lambda ln: (ln.rank, _sort_key(ln.pid), _sort_key(ln.tid)),
    )
    for ln in ordered:
        ln.spans.sort(key=lambda span: (span[0], span[1]))
        ln.instants.sort()
    global_instants.sort()
    return ordered, global_instants


def timeline_lanes(events: list[dict[str, Any]]) -> list[tuple[str, list[tuple[float, float, str]]]]:
    """Group trace events into ordered timeline lanes.

    Parameters
    ----------
    events : list of dict
        Chrome trace events as returned by :func:`~hierfl.viz.runs.read_trace` (``ts`` and
        ``dur`` in microseconds of virtual time).

    Returns
    -------
    list of (label, spans)
        One entry per (pid, tid) that has a thread name, a span or an instant: cloud lanes
        first, then leaders, then devices, then processes of other names, each by tid. The
        label is the thread name (else ``"<process name> <tid>"``); ``spans`` is a list of
        ``(start_s, duration_s, span_name)`` in seconds, sorted by start.

    Raises
    ------
    ValueError
        If a span or instant lacks a numeric ``ts`` (or ``dur``).
    """
    lanes, _ = _build_lanes(events)
    return [(ln.label, list(ln.spans)) for ln in lanes]


def _span_colors(names: set[str]) -> dict[str, str]:
    """Colour per span name: fixed for the standard spans, further colours for the rest."""
    colors = {n: c for n, c in SPAN_COLORS.items() if n in names}
    others = sorted(names - SPAN_COLORS.keys())
    for i, name in enumerate(others):
        colors[name] = _EXTRA_COLORS[i % len(_EXTRA_COLORS)]
    return colors


def plot_timeline(
    run_dir: Path, out: Path, max_devices: int = 40, t_max: float | None = None
) -> Path:
    """Draw a Gantt chart of a run's trace: one row per cloud, leader and device lane.

    Parameters
    ----------
    run_dir : Path
        The run directory (its ``trace.json`` is read; a crashed run's file is accepted).
    out : Path
        Output file; its extension (``png``, ``svg`` or ``pdf``) picks the format. Parent
        directories are created.
    max_devices : int
        Most device lanes to draw; the first ``max_devices`` (by tid) are shown and the title
        says how many were omitted.
    t_max : float, optional
        Right end of the x axis in virtual seconds; spans starting later are not drawn.
        Defaults to the end of the last span or instant.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    ValueError
        If the format is not supported, ``max_devices`` is negative or ``t_max`` not positive.
    RunReadError
        If ``trace.json`` is missing, damaged before its end, or holds no lanes.
    """
    fmt = output_format(out)
    if max_devices < 0:
        raise ValueError(f"max_devices must be >= 0, got {max_devices}")
    if t_max is not None and not t_max > 0:
        raise ValueError(f"t_max must be > 0 virtual seconds, got {t_max}")

    lanes, global_instants = _build_lanes(read_trace(run_dir))
    if not lanes:
        raise RunReadError(f"{Path(run_dir) / 'trace.json'}: no lanes (no spans or thread names)")
    n_devices = sum(1 for ln in lanes if ln.rank == _DEVICE_RANK)
    shown: list[_Lane] = []
    devices_seen = 0
    for ln in lanes:
        if ln.rank == _DEVICE_RANK:
            devices_seen += 1
            if devices_seen > max_devices:
                continue
        shown.append(ln)
    omitted = n_devices - min(n_devices, max_devices)

    if t_max is None:
        ends = [s + d for ln in lanes for s, d, _ in ln.spans]
        ends += [t for ln in lanes for t, _ in ln.instants] + [t for t, _ in global_instants]
        t_end = max(ends, default=0.0) or 1.0
    else:
        t_end = float(t_max)

    names = {name for ln in shown for s, _, name in ln.spans if s <= t_end}
    colors = _span_colors(names)

    height = max(2.5, 0.22 * len(shown) + 1.6)
    fig = new_figure(11.0, height)
    ax = fig.add_subplot()
    bar_height = 0.8
    for row, ln in enumerate(shown):
        by_name: dict[str, list[tuple[float, float]]] = {}
        for start, duration, name in ln.spans:
            if start <= t_end:
                by_name.setdefault(name, []).append((start, duration))
        for name, bars in by_name.items():
            ax.broken_barh(bars, (row - bar_height / 2, bar_height), facecolors=colors[name],
                           edgecolor="none")
        visible = [t for t, _ in ln.instants if t <= t_end]
        if visible:
            ax.plot(visible, [row] * len(visible), linestyle="none", marker="|",
                    markersize=6, color="black")
    for when, _ in global_instants:
        if when <= t_end:
            ax.axvline(when, color="black", linestyle=":", linewidth=0.8)

    ax.set_yticks(range(len(shown)), [ln.label for ln in shown],
                  fontsize=8 if len(shown) <= 30 else 6)
    ax.set_ylim(len(shown) - 0.5, -0.5)  # first lane (cloud) on top
    ax.set_xlim(0.0, t_end)
    ax.set_xlabel("virtual time (s)")
    ax.set_axisbelow(True)
    ax.grid(True, axis="x", alpha=0.3)

    handles: list[Any] = [Patch(facecolor=c, label=n) for n, c in colors.items()]
    if any(ln.instants for ln in shown):
        handles.append(Line2D([], [], linestyle="none", marker="|", color="black",
                              label="instant"))
    if global_instants:
        handles.append(Line2D([], [], linestyle=":", linewidth=0.8, color="black",
                              label="global instant"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  fontsize="small", frameon=False)

    title = f"{run_name(run_dir)} — timeline"
    if omitted:
        title += f" ({max_devices} of {n_devices} devices shown, {omitted} omitted)"
    ax.set_title(title)
    return save_figure(fig, out, fmt)
