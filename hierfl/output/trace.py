"""``trace.json``: Chrome trace-event array format (opens in Perfetto), in virtual time.

The closing bracket is optional in that format, so a crashed run's trace still opens. This
module is the only place a trace event is formed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hierfl.output.files import LineFile
from hierfl.output.jsonsafe import clean

__all__ = ["TraceWriter", "LANES"]

# Chrome-trace process ids of the three lane groups (pid, label).
# json.dumps(event, separators=(",", ":")) builds this encoder on every call: one, built once
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_FLUSH_CHARS = 1 << 20  # events kept in memory before they are written anyway

LANES = {"cloud": (1, "cloud"), "edge": (2, "leaders"), "device": (3, "devices")}


class TraceWriter:
    """Appends trace events to ``trace.json`` as the run goes.

    ``devices``: the device lanes to keep (None: all). Edge servers and the cloud are always kept;
    an event on a device lane that is not kept is not written, and a flow arrow only when both
    of its ends are kept (``output.trace``, for runs with many devices).
    """

    def __init__(self, path: Path, devices: set[int] | None = None, offset: int | None = None) -> None:
        # whole events only (issue 14): events gather in memory and go to disk together at each
        # flush, all or none, so a full disk leaves a valid prefix of the array, never half an event
        # offset: a resumed run goes on from a checkpoint's size of the file (which has its "[")
        self._fh = LineFile(path, offset)
        if offset is None:
            self._fh.append("[\n")
        self._pending: list[str] = []
        self._pending_chars = 0
        self._first = offset is None
        self.devices = devices

    def keeps(self, lane: tuple[str, int]) -> bool:
        """Whether events on ``lane`` are written."""
        return self.devices is None or lane[0] != "device" or int(lane[1]) in self.devices

    def _event(self, event: dict[str, Any]) -> None:
        text = ("" if self._first else ",\n") + _ENCODE(event)
        self._pending.append(text)
        self._pending_chars += len(text)
        self._first = False
        if self._pending_chars > _FLUSH_CHARS:
            self.flush()

    def lanes(self, num_edges: int, num_devices: int) -> None:
        """Name the lanes: one per device, leader and the cloud."""
        for group, (pid, label) in LANES.items():
            self._event({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
            self._event({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            count = {"cloud": 1, "edge": num_edges, "device": num_devices}[group]
            tids = sorted(self.devices) if group == "device" and self.devices is not None else range(count)
            for tid in tids:
                name = "cloud" if group == "cloud" else f"{'edge' if group == 'edge' else 'device'} {tid}"
                self._event({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    def span(self, lane: tuple[str, int], name: str, start: float, duration: float, **args: Any) -> None:
        """A complete event in virtual time (seconds in, microseconds out)."""
        if not self.keeps(lane):
            return
        pid = LANES[lane[0]][0]
        self._event({"ph": "X", "name": name, "cat": lane[0], "ts": start * 1e6, "dur": duration * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": clean(args)})

    def instant(self, lane: tuple[str, int], name: str, t: float, **args: Any) -> None:
        """An instant event on a lane."""
        if not self.keeps(lane):
            return
        pid = LANES[lane[0]][0]
        self._event({"ph": "i", "s": "t", "name": name, "cat": lane[0], "ts": t * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": clean(args)})

    def counter(self, lane: tuple[str, int], name: str, t: float, **values: float) -> None:
        """A counter sample (phase ``C``): each of ``values`` holds from ``t`` until the next sample.

        Counters are drawn per process (lane group) and told apart by ``name``, e.g. one queue
        length track per leader.
        """
        if not self.keeps(lane):
            return
        pid = LANES[lane[0]][0]
        self._event({"ph": "C", "name": name, "cat": lane[0], "ts": t * 1e6, "pid": pid, "tid": int(lane[1]),
                     "args": clean(values)})

    def flow(self, src: tuple[str, int], dst: tuple[str, int], start: float, end: float, name: str,
             flow_id: int) -> None:
        """An arrow from lane ``src`` at ``start`` to lane ``dst`` at ``end`` (e.g. a ring hop)."""
        if not (self.keeps(src) and self.keeps(dst)):
            return
        for ph, lane, t in (("s", src, start), ("f", dst, end)):
            event = {"ph": ph, "id": int(flow_id), "name": name, "cat": "flow", "ts": t * 1e6,
                     "pid": LANES[lane[0]][0], "tid": int(lane[1])}
            if ph == "f":
                event["bp"] = "e"  # bind to the slice enclosing the arrival
            self._event(event)

    def flush(self) -> None:
        """Write the events gathered since the last flush, whole (raises ``OutputWriteError``)."""
        if self._pending:
            text, self._pending, self._pending_chars = "".join(self._pending), [], 0
            self._fh.append(text)

    def close(self) -> None:
        """The array gets its closing bracket. Best effort, never raising: it runs while a failed
        run unwinds, and the format does not need the bracket."""
        if not self._fh.closed:
            try:
                self.flush()
                self._fh.append("\n]\n")
            except OSError:
                pass
            finally:
                self._fh.close()
