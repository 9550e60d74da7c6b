"""Gantt timeline of a run from its ``trace.json`` (emulated time, one row per entity).

Lanes are ordered cloud, leaders (edge servers), devices, each by thread id, judged from the
``process_name`` metadata rather than from pid numbers; the picture groups the devices under their
leader (:mod:`hierfl.viz.groups`), as ``hierfl report`` does. Idle time is simply a gap in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from hierfl.viz.groups import device_groups, pick_devices, read_clusters, read_devices
from hierfl.viz.plot import X_LABELS, new_figure, output_format, save_figure
from hierfl.viz.runs import RunReadError, read_summary, read_trace, run_name

__all__ = ["MAX_DEVICE_LANES", "SPAN_COLORS", "TIME_AXIS", "TimelineRows", "draw_timeline", "grouped_rows",
           "plot_timeline", "run_end", "timeline_lanes"]

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


MAX_DEVICE_LANES = 48
"""Device lanes drawn by default, by ``hierfl timeline`` and ``hierfl report`` alike."""

TIME_AXIS = X_LABELS["time"]


@dataclass
class TimelineRows:
    """The rows of a grouped timeline: the cloud, then each group's leader followed by its devices.

    ``rows``: (label, lane or None for a heading without a lane, bold); ``bands``: (first row, end
    row, group label) of each group; ``drawn``/``total``: device lanes drawn and devices in all.
    """

    rows: list[tuple[str, _Lane | None, bool]]
    bands: list[tuple[int, int, str]]
    drawn: int
    total: int


def grouped_rows(lanes: list[_Lane], groups: list[tuple[str, list[int]]], max_devices: int) -> TimelineRows:
    """Order ``lanes`` as the groups say: the cloud; each group's leader (bold) with at most its share
    of ``max_devices`` device lanes (:func:`~hierfl.viz.groups.pick_devices`) and a "… N more" row;
    then leaders that lead no group and other processes."""
    by_label = {ln.label: ln for ln in lanes}
    device_lane = {ln.tid: ln for ln in lanes if ln.rank == _DEVICE_RANK and isinstance(ln.tid, int)}
    total = sum(len(m) for _, m in groups)
    rows: list[tuple[str, _Lane | None, bool]] = []
    used: set[int] = set()
    for ln in lanes:
        if ln.rank == 0:
            rows.append((ln.label, ln, True))
            used.add(id(ln))
    bands: list[tuple[int, int, str]] = []
    for (label, members), (_, picked) in zip(groups, pick_devices(groups, max_devices)):
        start = len(rows)
        leader = by_label.get(label)
        if leader is not None and id(leader) not in used:
            rows.append((f"{label}  [{len(members)} devices]", leader, True))
            used.add(id(leader))
        elif label != "cloud":
            rows.append((f"{label}  [{len(members)} devices]", None, True))
        for d in picked:
            dev = device_lane.get(d)
            if dev is not None and id(dev) not in used:
                rows.append((f"   device {d}", dev, False))
                used.add(id(dev))
        if len(picked) < len(members):
            rows.append((f"   … {len(members) - len(picked)} more", None, False))
        bands.append((start, len(rows), label))
    for ln in lanes:  # leaders that lead no group (e.g. a failed-over edge), other processes
        if id(ln) not in used and ln.rank != _DEVICE_RANK:
            rows.append((ln.label, ln, True))
    drawn = sum(1 for _, ln, bold in rows if ln is not None and ln.rank == _DEVICE_RANK and not bold)
    return TimelineRows(rows, bands, drawn, total)


def _names(items: list[str], most: int = 4) -> str:
    names = sorted(set(items))
    return ", ".join(names[:most]) + (", …" if len(names) > most else "")


def draw_timeline(fig: Any, tl: TimelineRows, global_instants: list[tuple[float, str]], t_lo: float, t_hi: float,
                  title: str, title_loc: str = "center") -> None:
    """Draw ``tl`` on ``fig`` between ``t_lo`` and ``t_hi`` (emulated seconds): bars are cut at both
    ends, point events outside are left out; the legend names each colour and the point events."""
    rows = tl.rows
    names = {name for _, ln, _ in rows if ln is not None for s, d, name in ln.spans if s <= t_hi and s + d >= t_lo}
    colors = _span_colors(names)
    ax = fig.add_subplot()
    for i, (first, end, _) in enumerate(tl.bands):
        if i % 2 == 0 and len(tl.bands) > 1:  # bands tell groups apart: a flat run has one
            ax.axhspan(first - 0.5, end - 0.5, color="0.93", zorder=0, linewidth=0)
    marked: list[str] = []
    for row, (_, ln, _) in enumerate(rows):
        if ln is None:
            continue
        by_name: dict[str, list[tuple[float, float]]] = {}
        for start, duration, name in ln.spans:
            lo, hi = max(start, t_lo), min(start + duration, t_hi)
            if start <= t_hi and start + duration >= t_lo:
                by_name.setdefault(name, []).append((lo, max(hi - lo, 0.0)))
        for name, bars in by_name.items():
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors[name], edgecolor="none", zorder=2)
        marks = [(t, n) for t, n in ln.instants if t_lo <= t <= t_hi]
        if marks:
            marked += [n for _, n in marks]
            ax.plot([t for t, _ in marks], [row] * len(marks), linestyle="none", marker="|", markersize=5,
                    color="black", zorder=3)
    shown_global = [(t, n) for t, n in global_instants if t_lo <= t <= t_hi]
    for when, _ in shown_global:
        ax.axvline(when, color="black", linestyle=":", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows], fontsize=8 if len(rows) <= 40 else 6)
    for tick, (_, _, bold) in zip(ax.get_yticklabels(), rows):
        if bold:
            tick.set_fontweight("bold")
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the cloud on top
    ax.set_xlim(t_lo, t_hi)
    ax.set_xlabel(TIME_AXIS)
    ax.set_title(title, fontsize=10, loc=title_loc)
    ax.set_axisbelow(True)
    ax.grid(True, axis="x", alpha=0.3)
    handles: list[Any] = [Patch(facecolor=c, label=n) for n, c in colors.items()]
    if marked:
        handles.append(Line2D([], [], linestyle="none", marker="|", color="black",
                              label=f"point event on a lane:\n{_names(marked)}"))
    if shown_global:
        handles.append(Line2D([], [], linestyle=":", linewidth=0.8, color="black",
                              label=f"run-wide event:\n{_names([n for _, n in shown_global])}"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False,
                  title="bars: busy spans; gaps: idle", title_fontsize="small")


def run_end(run_dir: Path, lanes: list[_Lane], global_instants: list[tuple[float, str]]) -> float:
    """Where a timeline ends: the run's stop (``summary.json``'s ``virtual_time_s``), else the last
    span's end or point event (a run still going, or killed)."""
    summary = read_summary(run_dir) if (Path(run_dir) / "summary.json").is_file() else {}
    stop = summary.get("virtual_time_s")
    if isinstance(stop, (int, float)) and not isinstance(stop, bool) and stop > 0:
        return float(stop)
    ends = [s + d for ln in lanes for s, d, _ in ln.spans]
    ends += [t for ln in lanes for t, _ in ln.instants] + [t for t, _ in global_instants]
    return max(ends, default=0.0) or 1.0


def plot_timeline(
    run_dir: Path, out: Path, max_devices: int = MAX_DEVICE_LANES, t_max: float | None = None
) -> Path:
    """Draw a Gantt chart of a run's trace: the cloud, then each leader with its devices under it.

    The groups are those of ``hierfl report`` (:func:`~hierfl.viz.groups.device_groups`: the first
    ``clusters.jsonl`` record, else ``devices.csv``'s ``edge`` column), on shaded bands.

    Parameters
    ----------
    run_dir : Path
        The run directory (its ``trace.json`` is read; a crashed run's file is accepted).
    out : Path
        Output file; its extension (``png``, ``svg`` or ``pdf``) picks the format. Parent
        directories are created.
    max_devices : int
        Most device lanes to draw, taken evenly from every group (lowest ids first); the title
        says how many were omitted. Default :data:`MAX_DEVICE_LANES`.
    t_max : float, optional
        Right end of the x axis in emulated seconds; bars are cut there. Defaults to the run's
        stop (``summary.json``'s ``virtual_time_s``), else the end of the last span or instant.

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
        raise ValueError(f"t_max must be > 0 emulated seconds, got {t_max}")

    lanes, global_instants = _build_lanes(read_trace(run_dir))
    if not lanes:
        raise RunReadError(f"{Path(run_dir) / 'trace.json'}: no lanes (no spans or thread names)")
    devices = read_devices(run_dir)
    if devices:
        groups, _ = device_groups(read_clusters(run_dir), devices)
    else:  # no devices.csv: every device lane of the trace, under the cloud
        groups = [("cloud", sorted(ln.tid for ln in lanes if ln.rank == _DEVICE_RANK and isinstance(ln.tid, int)))]
    tl = grouped_rows(lanes, groups, max_devices)
    t_end = float(t_max) if t_max is not None else run_end(run_dir, lanes, global_instants)

    fig = new_figure(11.0, max(2.5, 0.22 * len(tl.rows) + 1.6))
    title = f"{run_name(run_dir)} — timeline, 0–{t_end:g} s"
    omitted = tl.total - tl.drawn
    if omitted > 0:
        title += f" ({tl.drawn} of {tl.total} devices shown, {omitted} omitted)"
    draw_timeline(fig, tl, global_instants, 0.0, t_end, title)
    return save_figure(fig, out, fmt)
