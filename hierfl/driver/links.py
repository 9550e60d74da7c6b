"""Link events (``link_change`` and the like): capacities and latencies that change during a run.

Each window of the scenario's link dynamics sets a device's or an edge server's uplink, downlink or
latency for a while. At every window boundary the links it touches take the value the windows give
them then (:func:`~hierfl.core.dynamics.link_value` over the link's base value), the flow network
re-shares the changed capacities, a device's cached routes forget a changed latency, and the
change is traced (a ``link_change`` instant and a metrics record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace as dc_replace

from hierfl.core.dynamics import Dynamics, link_value
from hierfl.core.world import World
from hierfl.driver.routes import Routes
from hierfl.env.records import LinkChange
from hierfl.kernel.engine import Event, EventQueue, Priority
from hierfl.kernel.network import FlowNetwork
from hierfl.output.telemetry import RunTelemetry

__all__ = ["LinkEvents"]

Target = tuple[str, int]


def _nothing() -> None:
    return None


class LinkEvents:
    """Plays the run's link windows: one world event at each boundary."""

    def __init__(self, world: World, dyn: Dynamics, queue: EventQueue, telemetry: RunTelemetry) -> None:
        self.world, self.dyn, self.queue, self.telemetry = world, dyn, queue, telemetry
        self._base = {(w.target, w.field): self.get(w.target, w.field) for w in dyn.links}
        self.net: FlowNetwork | None = None
        self.routes: Routes | None = None
        self.on_change: Callable[[], None] = _nothing

    def start(self, net: FlowNetwork, routes: Routes, on_change: Callable[[], None]) -> None:
        """Play the windows over ``net`` and ``routes``; ``on_change`` runs after each boundary (the
        network's next finish may have moved)."""
        self.net, self.routes, self.on_change = net, routes, on_change
        for t in self.dyn.link_boundaries():
            self.queue.push(t, "_link", None, Priority.WORLD, handler=self.on_boundary)

    def watched(self) -> list[tuple[str, int]]:
        """The network links whose capacity a window changes (the flow network indexes only their flows)."""
        return [(("up" if fld == "uplink_mbps" else "down") if kind == "device" else
                 ("edge_up" if fld == "uplink_mbps" else "edge_down"), i)
                for (kind, i), fld in self._base if fld != "latency_ms"]

    def get(self, target: Target, fld: str) -> float:
        """The current value of ``fld`` (``uplink_mbps``, ``downlink_mbps``, ``latency_ms``) of ``target``."""
        kind, i = target
        if kind == "device":
            return float(getattr(self.world, fld)[i])
        return float(getattr(self.world.edge_links[i], fld))

    def set(self, target: Target, fld: str, value: float) -> None:
        """Set ``fld`` of ``target`` to ``value``, in the world and in the flow network."""
        kind, i = target
        now, net, routes = self.queue.now, self.net, self.routes
        assert net is not None and routes is not None, "LinkEvents.start first"
        if kind == "device":
            if fld == "latency_ms":  # its routes carry their latency
                routes.forget(i)
            getattr(self.world, fld)[i] = value
            if fld != "latency_ms":
                net.set_capacity(now, ("up" if fld == "uplink_mbps" else "down", i), value)
        else:
            self.world.edge_links[i] = dc_replace(self.world.edge_links[i], **{fld: value})
            if fld != "latency_ms":
                net.set_capacity(now, ("edge_up" if fld == "uplink_mbps" else "edge_down", i), value)

    def on_boundary(self, event: Event) -> None:
        """A window starts or ends now: every link it touches takes its new value."""
        t = self.queue.now
        touched = sorted({(w.target, w.field) for w in self.dyn.links if t in (w.start, w.end)})
        for target, fld in touched:
            windows = [w for w in self.dyn.links if w.target == target and w.field == fld]
            value = link_value(self._base[(target, fld)], windows, t)
            self.set(target, fld, value)
            lane = ("device", target[1]) if target[0] == "device" else ("edge", target[1])
            self.telemetry.instant(lane, "link_change", t, **{fld: value})
        if touched:
            self.telemetry.record(LinkChange([[f"{a}{i}", f] for (a, i), f in touched]))
        self.on_change()
