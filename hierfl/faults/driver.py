"""Edge-server and cloud outages (``edge_fail`` / ``cloud_fail`` events) as the driver plays them.

At an outage's start the server goes down: every transfer to or from it is withdrawn (its span in
the trace ends ``lost``), further transfers to or from it are refused, the failure is counted
and written (``server_fail``), and the protocol hears ``edge_down`` / ``cloud_down`` with the
payloads of the lost transfers. At the end the server is back (``server_recover``, a ``down``
span on its trace lane, ``edge_up`` / ``cloud_up`` to the protocol, in the same dispatch). What the server held —
queues, partial aggregations, models — is the protocol's to drop: the protocol owns that state.
"""

from __future__ import annotations

from dataclasses import dataclass

from hierfl.core.dynamics import Dynamics
from hierfl.kernel.engine import Event, EventQueue, Priority
from hierfl.driver.transfers import Transfers
from hierfl.env.events import ServerDown, ServerUp
from hierfl.env.records import ServerFail, ServerRecover
from hierfl.faults.math import Outage, outages
from hierfl.output.telemetry import RunTelemetry

__all__ = ["Faults", "FAULT_COUNTERS"]

FAULT_COUNTERS = ("edge_failures", "cloud_failures", "edge_down_s", "cloud_down_s", "fault_transfers_lost",
                  "fault_updates_lost", "devices_reattached")


@dataclass(frozen=True)
class _Fault:
    """Internal: ``outage`` begins (``down``) or ends."""

    outage: Outage
    down: bool


class Faults:
    """The run's server outages: scheduled once, applied in virtual-time order."""

    def __init__(self, dyn: Dynamics, queue: EventQueue, transfers: Transfers, telemetry: RunTelemetry) -> None:
        self.queue = queue
        self.transfers = transfers
        self.telemetry = telemetry
        self.counters = telemetry.counters
        self.open: dict[tuple[str, int], Outage] = {}
        for name in FAULT_COUNTERS:  # only runs with faults carry these totals (others' outputs are unchanged)
            self.counters.setdefault(name, 0)
        for o in outages(dyn.faults):
            queue.push(o.start, "_fault", _Fault(o, True), Priority.WORLD, handler=self.handle)
            queue.push(o.end, "_fault", _Fault(o, False), Priority.WORLD, handler=self.handle)

    def handle(self, event: Event) -> Event:
        """A server goes down or comes back now; returns the protocol's event (``edge_down``, ``edge_up``,
        ``cloud_down``, ``cloud_up``), which the loop hands to the protocol at once — so the protocol
        hears of each change before the next one (two servers failing at one instant) or anything else."""
        fault: _Fault = event.payload
        o = fault.outage
        kind, ident = o.target
        now = self.queue.now
        tel = self.telemetry
        if fault.down:
            self.open[o.target] = o
            self.transfers.down.add(o.target)
            lost = self.transfers.cancel_server(o.target)
            self.counters[f"{kind}_failures"] += 1
            self.counters["fault_transfers_lost"] += len(lost)
            mode = o.on_edge_fail if kind == "edge" else None
            tel.instant(o.target, "fail", now, for_s=o.end - o.start, transfers_lost=len(lost))
            tel.record(ServerFail(kind, ident, o.end - o.start, len(lost), mode))
            return Event(now, Priority.WORLD, event.seq, f"{kind}_down",
                         ServerDown(o.target, o.end, o.on_edge_fail, tuple(lost)))
        self.open.pop(o.target, None)
        self.transfers.down.discard(o.target)
        down_s = now - o.start
        self.counters[f"{kind}_down_s"] += down_s
        tel.span(o.target, "down", o.start, down_s)
        tel.record(ServerRecover(kind, ident, down_s))
        return Event(now, Priority.WORLD, event.seq, f"{kind}_up", ServerUp(o.target, down_s))

    def finish(self, now: float) -> None:
        """The run ended: outages still open count (and are traced) up to ``now``."""
        for target, o in sorted(self.open.items()):
            if now > o.start:
                self.counters[f"{target[0]}_down_s"] += now - o.start
                self.telemetry.span(target, "down", o.start, now - o.start, open=True)
        self.open = {}
