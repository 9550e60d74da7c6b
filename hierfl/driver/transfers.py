"""The network half of the driver: transfers as flows, link events, devices dropping out.

A model transfer is a flow in :class:`~hierfl.core.network.FlowNetwork` (max-min fair sharing of
finite-capacity links), then its latency, then the protocol's event. Link events change capacities
during the run; a device going offline withdraws its transfers and pending job events and tells
the protocol (``device_lost``). :class:`Transfers` is composed into the driver's
:class:`~hierfl.driver.context.Context`, which hands it the event queue, the world and the telemetry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any

import numpy as np

from hierfl.core.dynamics import Dynamics, link_value
from hierfl.core.engine import Event, EventQueue, Priority
from hierfl.core.network import FlowNetwork, index_add
from hierfl.core.world import World
from hierfl.energy.math import EnergyLedger
from hierfl.env.api import Endpoint
from hierfl.env.events import DeviceLost
from hierfl.env.records import DeviceLostRecord, LinkChange
from hierfl.output.telemetry import RunTelemetry

__all__ = ["Transfers", "device_of"]


def device_of(payload: Any) -> int:
    """The device a payload concerns (-1: none)."""
    return int(getattr(payload, "device", -1))


@dataclass(frozen=True)
class _FlowLost:
    """Internal: a device at an end of flow ``flow`` goes offline."""

    flow: int
    device: int


@dataclass(frozen=True)
class _JobLost:
    """Internal: ``device``'s job is lost (offline or dropout) before it ends."""

    device: int
    reason: str
    origin: Any


@dataclass(slots=True)
class _Transfer:
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


class Transfers:
    """Transfers through the network, link events and device losses of one run."""

    # a transfer that shares no finite link gets its arrival scheduled when it starts (a detached
    # flow, ``FlowNetwork.add``); False: every end goes through the network's wake-ups (the same
    # times and outputs, one more event per transfer; tests compare the two)
    detach = True

    def __init__(self, world: World, dyn: Dynamics, queue: EventQueue, telemetry: RunTelemetry,
                 contention: bool) -> None:
        self.world = world
        self.dyn = dyn
        self.queue = queue
        self.telemetry = telemetry
        self.counters = telemetry.counters
        self._base_links = {(w.target, w.field): self._link_get(w.target, w.field) for w in dyn.links}
        # only the links that link events change need their flows indexed (FlowNetwork's ``watched``)
        watched = [(("up" if fld == "uplink_mbps" else "down") if kind == "device" else
                    ("edge_up" if fld == "uplink_mbps" else "edge_down"), i)
                   for (kind, i), fld in self._base_links if fld != "latency_ms"]
        self.net = FlowNetwork(self._capacities(), contention=contention, watched=watched)
        self.net.on_attach = self._on_attach
        self._attached = False   # a detached flow was attached during the current change
        self._transfers: dict[int, _Transfer] = {}
        self._device_transfers: dict[int, set[int]] = {}  # device → its transfers in flight
        self._server_transfers: dict[Endpoint, set[int]] = {}  # edge server / cloud → its transfers in flight
        self.track_servers = True  # kept only where servers can fail (the Context turns it off otherwise)
        self.down: set[Endpoint] = set()                        # servers down now (driver.faults keeps it)
        self._device_events: dict[int, list[Event]] = {}  # pending train_done / lost events per device
        self._next_flow = 0
        self._net_event: Event | None = None
        # each device's routes to and from its edge server, ``(edge, links, latency_s, finite links,
        # capacity_changes)`` (the last two: what FlowNetwork.add found, and when), formed on its first
        # transfer (a slot per device and direction; a link event on its latency empties its slots)
        self._up_routes: list[tuple[Any, ...] | None] = [None] * world.num_devices
        self._down_routes: list[tuple[Any, ...] | None] = [None] * world.num_devices
        self.energy: EnergyLedger | None = None  # the device-energy ledger (``energy:``), set by the Context
        for t in dyn.link_boundaries():
            queue.push(t, "_link", None, Priority.WORLD)

    @property
    def now(self) -> float:
        """Current virtual time."""
        return self.queue.now

    # -- transfers through the network -----------------------------------------------------------
    def _capacities(self) -> dict[Any, float]:
        w = self.world
        cap: dict[Any, float] = {("cloud_in",): w.cloud_ingress_mbps, ("cloud_out",): w.cloud_egress_mbps}
        # the device ↔ edge links' keys, made once: every route and flow over them shares these tuples
        self._up_key = [("up", d) for d in range(w.num_devices)]
        self._down_key = [("down", d) for d in range(w.num_devices)]
        self._in_key = [("edge_in", e) for e in range(len(w.edge_links))]
        self._out_key = [("edge_out", e) for e in range(len(w.edge_links))]
        cap.update(zip(self._up_key, np.asarray(w.uplink_mbps, dtype=np.float64).tolist()))
        cap.update(zip(self._down_key, np.asarray(w.downlink_mbps, dtype=np.float64).tolist()))
        assert w.edge_ingress_mbps is not None and w.edge_egress_mbps is not None
        for e, link in enumerate(w.edge_links):
            cap[("edge_up", e)] = link.uplink_mbps
            cap[("edge_down", e)] = link.downlink_mbps
            cap[self._in_key[e]] = float(w.edge_ingress_mbps[e])
            cap[self._out_key[e]] = float(w.edge_egress_mbps[e])
        return cap

    def route(self, src: Endpoint, dst: Endpoint) -> tuple[str, list[Any], float, tuple[int, ...]]:
        """(transfer kind, links crossed, one-way latency in s, devices involved) of ``src → dst``."""
        w = self.world
        (a, i), (b, j) = src, dst
        if a == "device" and b == "edge" or a == "edge" and b == "device":  # the common case first
            d, e = (i, j) if a == "device" else (j, i)
            links: Any = ((self._up_key[d], self._in_key[e]) if a == "device" else
                          (self._out_key[e], self._down_key[d]))
            # ndarray.item: the same Python float as float(array[i]), without the numpy scalar
            lat = w.edge_latency_ms
            extra = lat.item(d, e) if lat.shape[1] > e else 0.0
            return "device_edge", links, (w.latency_ms.item(d) + extra) / 1000.0, (d,)
        if a == "device" and b == "device":
            # both access links are crossed (docs/explanation/algorithms.md §1.2); a topology's d2d rule sets the latency
            # and may cap the hop's bandwidth: a private link per (src, dst) pair, shared only by
            # concurrent hops between the same two devices
            links_dd: list[Any] = [("up", i), ("down", j)]
            rule = w.d2d_link
            if rule is not None and math.isfinite(rule.bandwidth_mbps):
                self.net.capacity.setdefault(("d2d", i, j), rule.bandwidth_mbps)
                links_dd.append(("d2d", i, j))
            return "device_device", links_dd, w.d2d_latency_ms(i, j) / 1000.0, (i, j)
        if {a, b} == {"device", "cloud"}:
            d = i if a == "device" else j
            links = [("up", d), ("cloud_in",)] if a == "device" else [("cloud_out",), ("down", d)]  # type: ignore[list-item]
            return "device_cloud", links, w.link_latency_ms(d) / 1000.0, (d,)
        if {a, b} == {"edge", "cloud"}:
            e = i if a == "edge" else j
            links = [("edge_up", e), ("cloud_in",)] if a == "edge" else [("cloud_out",), ("edge_down", e)]  # type: ignore[list-item]
            return "edge_cloud", links, w.edge_links[e].latency_ms / 1000.0, ()
        raise ValueError(f"no route {src} → {dst}")

    def send(self, src: Endpoint, dst: Endpoint, event: str, payload: Any, name: str,
             priority: int = Priority.ARRIVAL, size: int | None = None, **args: Any) -> int:
        """Start a model transfer ``src → dst`` now; ``event`` (with ``payload``) fires when it arrives.

        The transfer is a flow in the network model: it shares finite-capacity links with the other
        transfers crossing them (max-min fair), follows link events, and arrives ``latency`` after
        its last bit. If a device at either end goes offline before it arrives, it is lost and the
        protocol gets ``device_lost`` instead. ``args`` go to its trace span (e.g. a ring hop's peer).
        """
        a, b = src[0], dst[0]
        if a == "device" and b == "edge" or a == "edge" and b == "device":  # the common case first
            # its route from the device's own cache slot (per direction: the edge, then route()'s answer)
            up = a == "device"
            servers: tuple[Endpoint, ...] = (dst,) if up else (src,)
            d, e = (src[1], dst[1]) if up else (dst[1], src[1])
            routes = self._up_routes if up else self._down_routes
            slot = routes[d]
            if slot is None or slot[0] != e:
                slot = routes[d] = (e, *self.route(src, dst)[1:3], None, -1)
            _, links, latency_s, finite, known = slot
            kind, devices = "device_edge", (d,)
        else:
            if a == "device":
                servers = () if b == "device" else (dst,)
            else:
                servers = (src,) if b == "device" else (src, dst)
            kind, links, latency_s, devices = self.route(src, dst)
            routes, finite, known = None, None, -1
        if self.down and any(end in self.down for end in servers):
            dead = next(end for end in servers if end in self.down)
            raise RuntimeError(f"{dead[0]} {dead[1]} is down: no transfer {src} → {dst} ({event})")
        size = self.world.model_bytes if size is None else size
        counters = self.counters
        if kind == "device_edge":
            counters["bytes_device_tier"] += size
        elif kind == "device_cloud":
            counters["bytes_device_tier"] += size
            counters["bytes_cloud"] += size
            counters["messages_cloud"] += 1
        elif kind == "edge_cloud":
            counters["bytes_edge_tier"] += size
            counters["bytes_cloud"] += size
            counters["messages_cloud"] += 1
        else:  # device_device
            counters["bytes_d2d"] += size
        lane = src if a == "device" else dst if b == "device" else src if a == "edge" else dst
        fid = self._next_flow
        self._next_flow = fid + 1
        queue = self.queue
        now = queue.now
        radio = (tuple((int(end[1]), end is src) for end in (src, dst) if end[0] == "device")
                 if self.energy is not None else ())  # only the energy ledger reads it
        tr = _Transfer(kind, lane, name, now, latency_s, event, payload, priority, devices, size, args, servers, radio)
        self._transfers[fid] = tr
        # detached when it shares no finite link: its arrival is scheduled now, with no network
        # wake-up at its end (one event per transfer instead of two; ``FlowNetwork.add``)
        self._attached = False
        net = self.net
        if known == net.capacity_changes:  # its finite links as the route's last flow found them
            flow = tr.flow = net.add(now, fid, links, size * 8 / 1e6, None, self.detach, finite)
        else:
            flow = tr.flow = net.add(now, fid, links, size * 8 / 1e6, None, self.detach)
            if routes is not None:
                routes[d] = (e, links, latency_s, flow.finite, net.capacity_changes)
        avail = self.dyn.availability
        if not avail.trivial:
            for d in devices:
                down = now if not avail.is_up(d, now) else avail.next_down(d, now)
                if math.isfinite(down):
                    guard = queue.push(down, "_lost", _FlowLost(fid, d), Priority.ARRIVAL)
                    if tr.guards is None:
                        tr.guards = [guard]
                    else:
                        tr.guards.append(guard)
        by_device = self._device_transfers
        for d in devices:  # index_add(by_device, devices, fid), inline: every transfer
            mine = by_device.get(d)
            if mine is None:
                by_device[d] = {fid}
            else:
                mine.add(fid)
        if self.track_servers:
            index_add(self._server_transfers, servers, fid)
        if flow.detached:
            # the arrival, as the network's wake-up at its end would have scheduled it
            end = flow._end
            delivery = tr.delivery = queue.push((end if end > now else now) + latency_s, event, payload, priority)
            delivery.transfer = fid  # a transfer's arrival carries its id (before_dispatch)
            if not self._attached:
                return fid  # no flow of the shared schedule changed: its next finish is the same
        self._reschedule_net()
        return fid

    def _on_attach(self, fid: int) -> None:
        """A detached flow shares a link again: its arrival is withdrawn; the network's wake-ups take over."""
        tr = self._transfers[fid]
        assert tr.delivery is not None
        self.queue.cancel(tr.delivery)
        tr.delivery = None
        self._attached = True

    def _reschedule_net(self, nxt: tuple[float, list[int]] | None | bool = False) -> None:
        """One ``_net`` wake-up at the network's next finish (``nxt``: that answer, when known)."""
        if nxt is False:
            nxt = self.net.next_finish()
        when = None if nxt is None else nxt[0]
        if self._net_event is not None:
            if when is not None and self._net_event.time == when:
                return
            self.queue.cancel(self._net_event)
            self._net_event = None
        if when is not None:
            self._net_event = self.queue.push(max(when, self.now), "_net", None, Priority.ARRIVAL)

    def _on_net(self) -> None:
        self._net_event = None
        net, queue, now = self.net, self.queue, self.queue.now
        net.advance(now)
        nxt = net.next_finish()
        while nxt is not None and nxt[0] <= now + 1e-12:
            for fid in nxt[1]:
                net.remove(now, fid)
                tr = self._transfers[fid]
                tr.delivery = queue.push(now + tr.latency_s, tr.event, tr.payload, tr.priority)
                tr.delivery.transfer = fid
            nxt = net.next_finish()
        self._reschedule_net(nxt)   # nothing changed since that answer

    def _finish_transfer(self, fid: int, lost: bool = False) -> None:
        tr = self._transfers.pop(fid)
        now = self.queue.now
        if tr.flow.detached:  # its bits were all sent at its end: it leaves the network now
            self.net.remove(now, fid)
        if tr.guards is not None:
            for g in tr.guards:
                self.queue.cancel(g)
        for d in tr.devices:
            mine = self._device_transfers.get(d)
            if mine is not None:
                mine.discard(fid)
        if self.track_servers:
            for end in tr.servers:
                mine = self._server_transfers.get(end)
                if mine is not None:
                    mine.discard(fid)
        if self.energy is not None:
            # each device end's radio is on from the start to the arrival (latency included) [D]; a transfer
            # cut off part-way costs its time on air only (how many of its bits went is not tracked)
            bits = 0.0 if lost else tr.size * 8.0
            for d, sends in tr.radio:
                self.energy.transfer(d, bits, now - tr.start, sends)
        lane = tr.lane
        kept = self.telemetry.trace.devices  # trace.keeps(lane), inlined: most lanes of a large run are not kept
        if kept is not None and lane[0] == "device" and int(lane[1]) not in kept:
            return
        args = dict(tr.args)
        if tr.flow is not None and tr.flow.max_sharing > 1:
            args["shared_max"] = tr.flow.max_sharing
        if lost:
            args["lost"] = True
        self.telemetry.span(tr.lane, tr.name, tr.start, now - tr.start, bytes=tr.size, **args)

    def _cancel_transfer(self, fid: int) -> None:
        tr = self._transfers[fid]
        if tr.delivery is not None:
            self.queue.cancel(tr.delivery)
        if fid in self.net.flows and not tr.flow.detached:
            self.net.remove(self.now, fid)
            self._reschedule_net()
        self._finish_transfer(fid, lost=True)   # (a detached flow leaves the network there)

    def cancel_transfer(self, fid: int) -> None:
        """Withdraw a transfer still in flight (its event never fires)."""
        if fid in self._transfers:
            self._cancel_transfer(fid)

    def before_dispatch(self, event: Event) -> None:
        """Bookkeeping before a protocol event runs (a transfer's arrival closes its trace span)."""
        # what the event is to the driver is written on it: a transfer's arrival carries the transfer's
        # id (``transfer``), a device's pending job event its device (``device``, :meth:`track`)
        fid = event.transfer
        if fid is not None:
            self._finish_transfer(fid)
            return
        device = event.device
        if device is not None:
            pending = self._device_events.get(device)
            if pending is None:  # (withdrawn with the device's other work)
                return
            if len(pending) == 1:
                if pending[0] is event:
                    pending.clear()
            else:
                pending[:] = [e for e in pending if e is not event]

    def handle_internal(self, event: Event) -> None:
        """Events of the world itself: network progress, devices going offline, link changes."""
        if event.kind == "_net":
            self._on_net()
        elif event.kind == "_lost":
            fid, d = event.payload.flow, event.payload.device
            if fid in self._transfers:
                tr = self._transfers[fid]
                self._cancel_transfer(fid)
                self.device_lost(d, tr.name, "offline", tr.payload)
        elif event.kind == "_link":
            self._on_link()
        elif event.kind == "_job_lost":
            lost: _JobLost = event.payload
            pending = self._device_events.get(lost.device)
            if pending:
                pending[:] = [e for e in pending if e.seq != event.seq]
            self.device_lost(lost.device, "train", lost.reason, lost.origin)
        else:
            raise RuntimeError(f"unknown internal event {event.kind!r}")

    # -- the world changing ------------------------------------------------------------------------
    def _link_get(self, target: tuple[str, int], fld: str) -> float:
        kind, i = target
        if kind == "device":
            return float(getattr(self.world, fld)[i])
        link = self.world.edge_links[i]
        return float(getattr(link, fld))

    def _link_set(self, target: tuple[str, int], fld: str, value: float) -> None:
        kind, i = target
        if kind == "device" and fld == "latency_ms":  # its routes carry their latency
            self._up_routes[i] = self._down_routes[i] = None
        if kind == "device":
            getattr(self.world, fld)[i] = value
            if fld != "latency_ms":
                self.net.set_capacity(self.now, ("up" if fld == "uplink_mbps" else "down", i), value)
        else:
            self.world.edge_links[i] = dc_replace(self.world.edge_links[i], **{fld: value})
            if fld != "latency_ms":
                self.net.set_capacity(self.now, ("edge_up" if fld == "uplink_mbps" else "edge_down", i), value)

    def _on_link(self) -> None:
        t = self.now
        touched = sorted({(w.target, w.field) for w in self.dyn.links if t in (w.start, w.end)})
        for target, fld in touched:
            windows = [w for w in self.dyn.links if w.target == target and w.field == fld]
            value = link_value(self._base_links[(target, fld)], windows, t)
            self._link_set(target, fld, value)
            lane = ("device", target[1]) if target[0] == "device" else ("edge", target[1])
            self.telemetry.instant(lane, "link_change", t, **{fld: value})
        if touched:
            self.telemetry.record(LinkChange([[f"{a}{i}", f] for (a, i), f in touched]))
        self._reschedule_net()

    def device_lost(self, device: int, stage: str, reason: str, origin: Any) -> None:
        """``device`` dropped out now (offline or a failed task): its other work is cancelled and the
        protocol gets ``device_lost`` (a :class:`~hierfl.env.events.DeviceLost` with the lost activity's
        payload as ``origin``)."""
        self.cancel_device(device)
        self.counters["devices_lost"] += 1
        self.telemetry.instant(("device", device), "lost", self.now, stage=stage, reason=reason)
        self.telemetry.record(DeviceLostRecord(device, stage, reason))
        self.queue.push(self.now, "device_lost", DeviceLost(device, stage, reason, origin), Priority.ARRIVAL)

    def cancel_device(self, device: int) -> None:
        """Withdraw everything ``device`` has in flight (its transfers and pending job events)."""
        for fid in sorted(self._device_transfers.get(device, ())):
            self._cancel_transfer(fid)
        for e in self._device_events.pop(device, []):
            self.queue.cancel(e)
        if self.energy is not None:  # its cancelled jobs never finish: never charged
            self.energy.job_lost(device)

    def cancel_server(self, server: Endpoint) -> list[tuple[str, Any]]:
        """Withdraw every transfer to or from ``server`` (it failed); returns each one's ``(event, payload)``
        in the order they were sent."""
        assert self.track_servers, "transfers by server are kept only where servers can fail"
        lost = []
        for fid in sorted(self._server_transfers.get(server, set())):
            tr = self._transfers[fid]
            lost.append((tr.event, tr.payload))
            self._cancel_transfer(fid)
        return lost

    def track(self, device: int, event: Event) -> Event:
        """Remember a pending event of ``device`` so :meth:`cancel_device` can withdraw it."""
        event.device = device  # (before_dispatch: it leaves the list when it fires)
        pending = self._device_events.get(device)
        if pending is None:
            self._device_events[device] = [event]
        else:
            pending.append(event)
        return event
