"""What the driver keeps of a transfer in flight, and the events and trace span that concern it.

:class:`Transfer` is one model transfer's record (its flow, its latency, the protocol event it delivers,
its ends); :class:`FlowLost` and :class:`JobLost` are the driver's internal events of a device going
offline under a transfer or a job; :func:`trace_span` writes a transfer's span on its lane of the trace.
:class:`~hierfl.driver.transfers.Transfers` keeps and uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hierfl.env.api import Endpoint
from hierfl.kernel.engine import Event
from hierfl.output.telemetry import RunTelemetry

__all__ = ["Transfer", "FlowLost", "JobLost", "device_of", "trace_span"]


def device_of(payload: Any) -> int:
    """The device a payload concerns (-1: none)."""
    return int(getattr(payload, "device", -1))


@dataclass(frozen=True)
class FlowLost:
    """The driver's own event: a device at an end of flow ``flow`` goes offline."""

    flow: int
    device: int


@dataclass(frozen=True)
class JobLost:
    """The driver's own event: ``device``'s job is lost (offline or dropout) before it ends."""

    device: int
    reason: str
    origin: Any


@dataclass(slots=True)
class Transfer:
    """A model transfer in flight: a network flow, then its latency, then the protocol's event."""

    kind: str
    lane: Endpoint
    name: str
    start: float
    latency_s: float
    event: str
    payload: Any
    priority: int
    devices: tuple[int, ...]
    size: int
    args: dict[str, Any]
    servers: tuple[Endpoint, ...] = ()   # its edge-server / cloud ends (an edge_fail / cloud_fail cuts it)
    radio: tuple[tuple[int, bool], ...] = ()  # (device, sends?) per device end: whose radio energy it costs
    guards: list[Event] | None = None  # its devices' going-offline events (availability), made when needed
    delivery: Event | None = None
    flow: Any = None
    decode_s: float = 0.0   # a transfer channel's decoding at the receiver, in its latency (``channels:``)
    receiver: Any = None    # its receiving end, where a channel's decoding is traced
    encode_s: float = 0.0   # a transfer channel's encoding at the sender, before its flow (device energy only)
    sender: Any = None      # its sending end, when a channel encodes there
    owner: Any = None  # a driver service that sent it (a sub-protocol's message): it hears the arrival and a loss


def trace_span(telemetry: RunTelemetry, tr: Transfer, now: float, lost: bool) -> None:
    """The transfer's span on its lane of the trace (if that lane is kept)."""
    lane = tr.lane
    kept = telemetry.trace.devices  # trace.keeps(lane), inlined: most lanes of a large run are not kept
    if kept is not None and lane[0] == "device" and int(lane[1]) not in kept:
        return
    args = dict(tr.args)
    if tr.flow is not None and tr.flow.max_sharing > 1:
        args["shared_max"] = tr.flow.max_sharing
    if lost:
        args["lost"] = True
    telemetry.span(tr.lane, tr.name, tr.start, max(now - tr.start - tr.decode_s, 0.0), bytes=tr.size,
                   **args)  # (a channel's message: its encoding and decoding have spans of their own)
