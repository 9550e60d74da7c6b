"""Discrete-event engine: a virtual clock and a heap keyed ``(time, priority, seq)``.

Modelled on SimPy's core (one heap, a tiny API): ``seq`` is a monotonically increasing
counter, so events at equal time and priority pop in insertion order, identically every run.
An event is a kind and a small typed payload (a frozen dataclass, see :mod:`hierfl.env.events`)
for the protocol's ``on_<kind>`` handler, or carries its own ``handler`` (the world's events: the
network's wake-ups, link changes, devices going offline), which the run loop calls instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

__all__ = ["Event", "EventQueue", "Priority"]


class Priority:
    """Tie-break order for events at the same virtual time (lower pops first).

    Arrivals are processed before the decisions that consume them, and evaluation sees every
    aggregation that happened at the same instant.
    """

    WORLD = 5         # the world changes (link capacity or latency events)
    ARRIVAL = 10      # a transfer or a computation finishes
    START = 20        # a device starts a job (its inputs have arrived)
    AGGREGATE = 30    # a server aggregates what has arrived
    CONTROL = 40      # protocol timers (deadlines, periods)
    EVALUATE = 50     # evaluation of the global model
    STOP = 90         # end of the run


class Event:
    """One scheduled event: at ``time``, its ``handler(event)`` runs, or, without one, the protocol's
    ``on_<kind>(event)``.

    Events order, compare and hash by ``(time, priority, seq)`` only. Besides its fields an event
    carries what the driver needs to know about it, declared here rather than attached: ``queued``
    (it is in the queue and not cancelled), ``transfer`` (the id of the transfer whose arrival it
    is) and ``device`` (the device whose pending job event it is).
    """

    __slots__ = ("time", "priority", "seq", "kind", "payload", "handler", "queued", "transfer", "device")

    def __init__(self, time: float, priority: int, seq: int, kind: str, payload: Any = None,
                 handler: Callable[[Event], Any] | None = None) -> None:
        self.time = time
        self.priority = priority
        self.seq = seq
        self.kind = kind
        self.payload = payload
        self.handler = handler
        self.queued = False
        self.transfer: int | None = None
        self.device: int | None = None

    def key(self) -> tuple[float, int, int]:
        """What orders events: ``(time, priority, seq)``."""
        return (self.time, self.priority, self.seq)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Event) and self.key() == other.key()

    def __lt__(self, other: Event) -> bool:
        return self.key() < other.key()

    def __le__(self, other: Event) -> bool:
        return self.key() <= other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return (f"Event(time={self.time!r}, priority={self.priority!r}, seq={self.seq!r}, kind={self.kind!r}, "
                f"payload={self.payload!r})")


class EventQueue:
    """The virtual clock and its pending events.

    ``now`` only moves forward, and only when an event is popped: nothing in the emulator
    reads the real clock to decide what happens.
    """

    def __init__(self, start: float = 0.0) -> None:
        # entries are (time, priority, seq, event): tuples compare in C, the event is never compared
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self._cancelled: set[int] = set()
        self.now = float(start)

    def __len__(self) -> int:
        return len(self._heap) - len(self._cancelled)

    def cancel(self, event: Event) -> None:
        """Withdraw a pending event (it will never pop); cancelling a popped event does nothing."""
        # a flag on the event, not a population-sized set of pending seqs updated on every push and pop
        if event.queued:
            event.queued = False
            self._cancelled.add(event.seq)
            self._prune()

    def _prune(self) -> None:
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][2] in cancelled:
            cancelled.discard(heapq.heappop(heap)[2])

    def push(self, time: float, kind: str, payload: Any = None,
             priority: int = Priority.CONTROL, handler: Callable[[Event], Any] | None = None) -> Event:
        """Schedule ``kind`` at absolute virtual ``time`` (seconds); never in the past.

        ``handler``: what handles the event when it pops (the run loop calls it); None: the protocol.
        """
        if not time >= self.now:  # also rejects NaN
            raise ValueError(f"cannot schedule {kind!r} at t={time!r} before now={self.now!r}")
        # a mapping is copied (the caller may reuse it); a frozen payload value is shared
        time, priority, seq = float(time), int(priority), self._seq
        event = Event(time, priority, seq, kind, dict(payload) if isinstance(payload, dict) else payload, handler)
        event.queued = True
        self._seq = seq + 1
        heapq.heappush(self._heap, (time, priority, seq, event))
        return event

    def push_after(self, delay: float, kind: str, payload: Any = None,
                   priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` ``delay`` seconds after now."""
        if not delay >= 0:
            raise ValueError(f"negative delay {delay!r} for {kind!r}")
        return self.push(self.now + delay, kind, payload, priority)

    def peek(self) -> Event | None:
        """The next event without removing it."""
        self._prune()
        return self._heap[0][3] if self._heap else None

    def pop(self) -> Event:
        """Remove the next event and advance the clock to its time."""
        self._prune()
        event = heapq.heappop(self._heap)[3]
        event.queued = False
        self.now = event.time
        return event

    def pop_next(self) -> Event | None:
        """:meth:`pop`, or None when no event is pending (the run loop's one call per event)."""
        if self._cancelled:
            self._prune()
        heap = self._heap
        if not heap:
            return None
        event = heapq.heappop(heap)[3]
        event.queued = False
        self.now = event.time
        return event
