"""Typed event payloads: what a protocol's ``on_<kind>`` handler receives in ``event.payload``.

A protocol defines its own small frozen payload classes (a round number, an edge, a cluster…)
for the messages and timers it schedules; a payload that concerns one device has an ``int``
field ``device`` (the driver uses it to withdraw the device's pending events when it drops
out). Events raised by the driver itself are declared here, each with a harmless default
handler in :class:`~hierfl.protocols.base.Protocol`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Payload", "DeviceLost", "ServerDown", "ServerJobDone", "ServerUp", "SubProtocolDone", "Timer", "DRIVER_EVENTS",
           "describe"]


@dataclass(frozen=True)
class Payload:
    """Base of every payload (frozen: a payload is a value, shared by the event and its transfer)."""


@dataclass(frozen=True)
class Timer(Payload):
    """A protocol timer with no data (e.g. a periodic tick of the cloud)."""


@dataclass(frozen=True)
class DeviceLost(Payload):
    """``device`` dropped out (``reason``: offline, dropout) during ``stage`` (train, download, upload, …).

    ``origin`` is the payload of the activity that was lost (the protocol's own message), so a
    protocol can tell which round, edge or cluster it belonged to.
    """

    device: int
    stage: str
    reason: str
    origin: Any = None


@dataclass(frozen=True)
class ServerDown(Payload):
    """``server`` (``("edge", e)`` or ``("cloud", 0)``) failed now and is down until ``until``.

    Every transfer to or from it that was in flight is already withdrawn: ``lost`` lists them as
    ``(event, payload)`` — the protocol event each would have fired and its own message — in
    the order they were sent. ``on_edge_fail`` (edge servers): ``reattach`` or ``wait``.
    """

    server: tuple[str, int]
    until: float
    on_edge_fail: str
    lost: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ServerUp(Payload):
    """``server`` is back after ``down_s`` seconds (with nothing of what it held before it failed)."""

    server: tuple[str, int]
    down_s: float


@dataclass(frozen=True)
class ServerJobDone(Payload):
    """A server task is over: ``outputs`` (model handles) of ``task``, its ``stats``, when the server
    started and ended it (virtual s), and ``payload``, the protocol's own message given to ``run``."""

    task: str
    outputs: tuple[Any, ...]
    stats: dict[str, float]
    start: float
    end: float
    payload: Any = None


@dataclass(frozen=True)
class SubProtocolDone(Payload):
    """The payload of ``on_<done>``: the sub-protocol (:mod:`hierfl.subprotocol`) at ``(tier, entity)`` is over.

    ``participants``: the senders it started with; ``survivors``: those whose inputs the point
    aggregates (sorted); ``dropped``: those lost on the way (sorted); ``failed``: fewer than the
    threshold were left (or the aggregator went down: ``reason``), and the point aggregates
    nothing; ``rounds``: rounds completed; ``start`` / ``end``: virtual times; ``payload``: the
    protocol's own, given to ``prepare``.
    """

    tier: str
    entity: int
    participants: tuple[int, ...]
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    failed: bool
    reason: str | None
    rounds: int
    start: float
    end: float
    payload: Any = None

    @property
    def ok(self) -> bool:
        """Whether the point may aggregate the survivors' inputs."""
        return not self.failed


# event kinds the driver raises on its own; the protocol base class handles each by default
DRIVER_EVENTS: dict[str, type[Payload]] = {"device_lost": DeviceLost, "edge_down": ServerDown, "edge_up": ServerUp,
                                           "cloud_down": ServerDown, "cloud_up": ServerUp}


def describe(payload: Any) -> str:
    """``"device 3, round 2"``: a payload's fields, for error messages."""
    if isinstance(payload, dict):
        items = list(payload.items())
    elif hasattr(payload, "__dataclass_fields__"):
        items = [(f.name, getattr(payload, f.name)) for f in fields(payload)]
    else:
        items = []
    return ", ".join(f"{k} {v}" for k, v in items if not hasattr(v, "__dataclass_fields__"))
