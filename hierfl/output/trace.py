"""``trace.json``: Chrome trace-event array format (opens in Perfetto), in virtual time.

The file is a JSON array whenever it is read: each flush writes its events and the closing
bracket after them, over the previous closing bracket, in one write, so a run ended any way (an
exception, Ctrl-C, a killed process) leaves a trace that ``json.loads`` parses. This module is the
only place a trace event is formed.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from hierfl.output.files import LineFile
from hierfl.output.bounded import bound_lists
from hierfl.output.jsonsafe import jsonable

__all__ = ["TraceWriter", "CounterTrack", "LANES"]

# one compact encoder for every event (json.dumps with these separators would build one per call)
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_FLUSH_CHARS = 1 << 20  # events kept in memory before they are written anyway
_CLOSE = "\n]\n"  # the array's end, rewritten after the events of every flush

# Chrome-trace process ids of the lane groups (pid, label). The chain group (a ledger's blocks, one lane per
# chain host) is named on its first event, so runs without a ledger have the three groups they always had.
LANES = {"cloud": (1, "cloud"), "edge": (2, "leaders"), "device": (3, "devices"), "chain": (4, "chain")}
_CHAIN_PID = LANES["chain"][0]


class TraceWriter:
    """Appends trace events to ``trace.json`` as the run goes.

    ``devices``: the device lanes to keep (None: all). Edge servers and the cloud are always kept;
    an event on a device lane that is not kept is not written, and a flow arrow only when both
    of its ends are kept (``output.trace``, for runs with many devices).
    """

    def __init__(self, path: Path, devices: set[int] | None = None, offset: int | None = None,
                 list_limit: int | None = None, counter_s: float = 0.0) -> None:
        """``list_limit``: longer lists in event arguments are written as summaries
        (:mod:`hierfl.output.bounded`); ``counter_s``: a counter track made by :meth:`counter_track`
        writes at most about one sample per that many virtual seconds (0: every sample)."""
        self.list_limit = list_limit
        self.counter_s = counter_s
        # whole events only (reliability): events gather in memory and go to disk together at each
        # flush, all or none, so a full disk leaves a valid prefix of the array, never half an event
        # offset: a resumed run goes on from a checkpoint's size of the file (which has its "[")
        self._fh = LineFile(path, offset)
        # the array's start (a resumed run's file has it), and its end at once: a valid, empty array
        self._fh.append("[\n" if offset is None else "", _CLOSE)
        self.lock = threading.Lock()  # a flush is whole before another thread may end the process
        self._pending: list[str] = []
        self._pending_chars = 0
        self._first = offset is None
        self.devices = devices
        self.chain_lanes: set[int] = set()  # chain lanes named so far (kept by a checkpoint)

    def keeps(self, lane: tuple[str, int]) -> bool:
        """Whether events on ``lane`` are written."""
        return self.devices is None or lane[0] != "device" or int(lane[1]) in self.devices

    def _event(self, event: dict[str, Any]) -> None:
        self._text(_ENCODE(event))

    def _text(self, encoded: str) -> None:
        """One event's JSON text, after a separator unless it is the first."""
        text = encoded if self._first else ",\n" + encoded
        self._pending.append(text)
        self._pending_chars += len(text)
        self._first = False
        if self._pending_chars > _FLUSH_CHARS:
            self.flush()

    def lanes(self, num_edges: int, num_devices: int) -> None:
        """Name the lanes: one per device, leader and the cloud."""
        for group, (pid, label) in LANES.items():
            if pid == _CHAIN_PID:  # named on first use (_name_chain)
                continue
            self._event({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
            self._event({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            count = {"cloud": 1, "edge": num_edges, "device": num_devices}[group]
            tids = sorted(self.devices) if group == "device" and self.devices is not None else range(count)
            for tid in tids:
                name = "cloud" if group == "cloud" else f"{'edge' if group == 'edge' else 'device'} {tid}"
                self._event({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    def _name_chain(self, tid: int) -> None:
        """The chain group's and lane ``tid``'s names, before the lane's first event."""
        if not self.chain_lanes:
            self._event({"ph": "M", "name": "process_name", "pid": _CHAIN_PID, "args": {"name": "chain"}})
            self._event({"ph": "M", "name": "process_sort_index", "pid": _CHAIN_PID, "args": {"sort_index": _CHAIN_PID}})
        self.chain_lanes.add(tid)
        self._event({"ph": "M", "name": "thread_name", "pid": _CHAIN_PID, "tid": tid, "args": {"name": f"chain {tid}"}})

    def span(self, lane: tuple[str, int], name: str, start: float, duration: float, **args: Any) -> None:
        """A complete event in virtual time (seconds in, microseconds out)."""
        devices = self.devices  # keeps(lane), inlined: most device lanes of a large run are not kept
        if devices is not None and lane[0] == "device" and int(lane[1]) not in devices:
            return
        pid = LANES[lane[0]][0]
        if pid == _CHAIN_PID and int(lane[1]) not in self.chain_lanes:
            self._name_chain(int(lane[1]))
        self._event({"ph": "X", "name": name, "cat": lane[0], "ts": start * 1e6, "dur": duration * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": jsonable(bound_lists(args, self.list_limit))})

    def instant(self, lane: tuple[str, int], name: str, t: float, **args: Any) -> None:
        """An instant event on a lane."""
        if not self.keeps(lane):
            return
        pid = LANES[lane[0]][0]
        if pid == _CHAIN_PID and int(lane[1]) not in self.chain_lanes:
            self._name_chain(int(lane[1]))
        self._event({"ph": "i", "s": "t", "name": name, "cat": lane[0], "ts": t * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": jsonable(bound_lists(args, self.list_limit))})

    def counter(self, lane: tuple[str, int], name: str, t: float, **values: float) -> None:
        """A counter sample (phase ``C``): each of ``values`` holds from ``t`` until the next sample.

        Counters are drawn per process (lane group) and told apart by ``name``, e.g. one queue
        length track per leader.
        """
        if not self.keeps(lane):
            return
        pid = LANES[lane[0]][0]
        self._event({"ph": "C", "name": name, "cat": lane[0], "ts": t * 1e6, "pid": pid, "tid": int(lane[1]),
                     "args": jsonable(values)})

    def counter_track(self, lane: tuple[str, int], name: str, field: str) -> CounterTrack:
        """One counter track (``name`` on ``lane``, one value ``field``) whose samples are formed from
        cached text, for speed (:class:`CounterTrack`); they read as :meth:`counter`'s events."""
        return CounterTrack(self, lane, name, field)

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
            with self.lock:
                self._fh.append(text, _CLOSE)

    @property
    def started(self) -> bool:
        """Whether the trace holds an event yet (the next one is written after a separator)."""
        return not self._first

    @started.setter
    def started(self, value: bool) -> None:
        self._first = not value

    @property
    def closed(self) -> bool:
        """Whether the trace file is closed."""
        return self._fh.closed

    def sync(self) -> int:
        """Flush the events to disk; the size of the array without its closing bracket (where a
        resumed run goes on writing events)."""
        self.flush()
        return self._fh.sync()

    def close(self) -> None:
        """Write the events held, the array ending with its closing bracket. Best effort, never
        raising: it runs while a failed run unwinds."""
        if not self._fh.closed:
            try:
                self.flush()
            except OSError:
                try:  # a failed write cut the file back to its last whole event: end the array there
                    self._fh.append("", _CLOSE)
                except OSError:
                    pass
            finally:
                self._fh.close()


class CounterTrack:
    """A counter track of a :class:`TraceWriter` with one value field, its samples formed by
    concatenation, for speed: a queue protocol traces a queue length on every update arrival, and building and
    encoding an event dict per sample cost more than everything else the run writes (4 to 6 µs a
    sample through :meth:`TraceWriter.counter`, under 1 µs here).

    The event's fixed parts are encoded once; the two varying numbers, a finite float time and an
    int value, are written with ``repr``, which is how ``json`` writes them, so a sample's text is
    the text :meth:`TraceWriter.counter` writes for it (tests/output/test_output_encoding.py holds the two
    paths to that). Any other value or time goes the general way.

    With the writer's ``counter_s`` > 0 (``output.trace_counter_s``, large runs), a sample less than
    ``counter_s`` after the last one written is held back, replacing any held before it, and is
    written, at its own time, when the next sample comes after that window (or at :meth:`close`):
    the trace keeps every value that lasted, exactly when it began, and drops only values replaced
    within the window. The held sample is part of the run's checkpoint (:meth:`state`).
    """

    __slots__ = ("_writer", "lane", "name", "field", "_kept", "_head", "_middle", "_every", "_last", "_held")

    def __init__(self, writer: TraceWriter, lane: tuple[str, int], name: str, field: str) -> None:
        self._writer, self.lane, self.name, self.field = writer, lane, name, field
        self._kept = writer.keeps(lane)
        self._every = writer.counter_s
        self._last = -math.inf                      # virtual time of the last sample written
        self._held: tuple[float, int] | None = None  # a sample within the window, not written yet
        # the event dict of TraceWriter.counter, keys in its order, around the time and the value
        self._head = f'{{"ph":"C","name":{json.dumps(name)},"cat":{json.dumps(lane[0])},"ts":'
        self._middle = f',"pid":{LANES[lane[0]][0]},"tid":{int(lane[1])},"args":{{{json.dumps(field)}:'

    def sample(self, t: float, value: int) -> None:
        """The track holds ``value`` from virtual time ``t`` (seconds) on."""
        if not self._kept:
            return
        if self._every:
            if t < self._last + self._every:
                self._held = (t, value)
                return
            held = self._held
            if held is not None:
                self._held = None
                self._last = held[0]
                self._write(*held)
                if t < self._last + self._every:
                    self._held = (t, value)
                    return
            self._last = t
        self._write(t, value)

    def close(self) -> None:
        """Write the sample held back, if any (the run ends)."""
        held, self._held = self._held, None
        if held is not None:
            self._last = held[0]
            self._write(*held)

    def state(self) -> tuple[float, tuple[float, int] | None]:
        """The coalescing state a checkpoint keeps (last written time, the sample held)."""
        return self._last, self._held

    def set_state(self, state: tuple[float, tuple[float, int] | None]) -> None:
        """Take over :meth:`state` (a resumed run)."""
        self._last, self._held = state

    def _write(self, t: float, value: int) -> None:
        ts = t * 1e6
        if type(value) is int and type(ts) is float and ts - ts == 0.0:  # a plain int and a finite float
            w = self._writer  # TraceWriter._text, inlined
            text = f"{self._head}{ts!r}{self._middle}{value!r}}}}}" if w._first else \
                f",\n{self._head}{ts!r}{self._middle}{value!r}}}}}"
            w._pending.append(text)
            w._pending_chars += len(text)
            w._first = False
            if w._pending_chars > _FLUSH_CHARS:
                w.flush()
        else:  # numpy numbers, bools, non-finite times: the general way
            self._writer.counter(self.lane, self.name, t, **{self.field: value})
