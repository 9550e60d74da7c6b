"""The network half of the driver: transfers as flows, link events, devices dropping out.

A model transfer is a flow in :class:`~hierfl.kernel.network.FlowNetwork` (max-min fair sharing of
finite-capacity links), then its latency, then the protocol's event. Link events change capacities
during the run; a device going offline withdraws its transfers and pending job events and tells
the protocol (``device_lost``). :class:`Transfers` is composed into the driver's
:class:`~hierfl.driver.context.Context`, which hands it the event queue, the world and the telemetry.
What it keeps of each transfer in flight, and that transfer's trace span, are in
:mod:`hierfl.driver.transfer_records`; the helpers at the end start a transfer through a transfer
channel (``channels:``: encoded first, decoded on arrival).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from hierfl.core.dynamics import Dynamics
from hierfl.core.world import World
from hierfl.channels.driver import ChannelLinks
from hierfl.driver.links import LinkEvents
from hierfl.driver.routes import Route, Routes
from hierfl.driver.transfer_records import FlowLost, JobLost, Transfer, trace_span
from hierfl.driver.transfer_records import device_of as device_of
from hierfl.energy.math import EnergyLedger
from hierfl.env.api import Endpoint
from hierfl.env.events import DeviceLost
from hierfl.env.records import DeviceLostRecord
from hierfl.kernel.engine import Event, EventQueue, Priority
from hierfl.kernel.network import Flow, FlowNetwork, index_add
from hierfl.output.telemetry import RunTelemetry

__all__ = ["Transfers", "device_of"]


class Transfers:
    """Transfers through the network, link events and device losses of one run."""

    # a transfer sharing no finite link has its arrival scheduled when it starts (a detached flow, ``FlowNetwork.add``);
    # False: every end goes through the network's wake-ups (same outputs, one more event per transfer; tests compare)
    detach = True

    def __init__(self, world: World, dyn: Dynamics, queue: EventQueue, telemetry: RunTelemetry,
                 contention: bool) -> None:
        self.world = world
        self.dyn = dyn
        self.queue = queue
        self.telemetry = telemetry
        self.counters = telemetry.counters
        self.links = LinkEvents(world, dyn, queue, telemetry)
        self.routes = Routes(world)
        # only the links that link events change need their flows indexed (FlowNetwork's ``watched``)
        self.net = FlowNetwork(self.routes.capacities(), contention=contention, watched=self.links.watched())
        self.routes.net = self.net
        self.net.on_attach = self._on_attach
        self._attached = False   # a detached flow was attached during the current change
        self._transfers: dict[int, Transfer] = {}
        self._device_transfers: dict[int, set[int]] = {}  # device → its transfers in flight
        self._server_transfers: dict[Endpoint, set[int]] = {}  # edge server / cloud → its transfers in flight
        self.track_servers = True  # kept only where servers can fail (the Context turns it off otherwise)
        self.down: set[Endpoint] = set()                        # servers down now (hierfl.faults.driver keeps it)
        self._device_events: dict[int, list[Event]] = {}  # pending train_done / lost events per device
        self._next_flow = 0
        self._net_event: Event | None = None
        self.energy: EnergyLedger | None = None  # the device-energy ledger (``energy:``), set by the Context
        self.channels: ChannelLinks | None = None  # transfer channels (``channels:``; set by the Context) or None
        # (sender kind, receiver tier) whose sub-protocol carries the senders' updates itself (secure aggregation's
        # masked inputs, SubProtocolConfig.carries_inputs; set by the Context): a model message along it keeps
        # its latency and moves no bytes, so each update is sent once
        self.carried: frozenset[tuple[str, str]] = frozenset()
        self.links.start(self.net, self.routes, self._reschedule_net)

    @property
    def now(self) -> float:
        """Current virtual time."""
        return self.queue.now

    # -- transfers through the network -----------------------------------------------------------
    def send(self, src: Endpoint, dst: Endpoint, event: str, payload: Any, name: str,
             priority: int = Priority.ARRIVAL, size: int | None = None, owner: Any = None, **args: Any) -> int:
        """Start a model transfer ``src → dst`` now; ``event`` (with ``payload``) fires when it arrives.

        The transfer is a flow in the network model: it shares finite-capacity links with the other
        transfers crossing them (max-min fair), follows link events, and arrives ``latency`` after
        its last bit. If a device at either end goes offline before it arrives, it is lost and the
        protocol gets ``device_lost`` instead. ``args`` go to its trace span (e.g. a ring hop's peer).
        ``owner``: a driver service that sent it hears its arrival and loss (:mod:`hierfl.subprotocol.driver`).
        """
        a, b = src[0], dst[0]
        if a == "device" and b == "edge":  # the common cases first: the device's cached route
            route = self.routes.access(src[1], dst[1], True)
        elif a == "edge" and b == "device":
            route = self.routes.access(dst[1], src[1], False)
        else:
            route = self.routes.between(src, dst)
        if self.down:
            _refuse_if_down(self.down, route, src, dst, event)
        coded = self.channels.plan(route.kind, src, dst) if size is None and self.channels is not None else None
        size = (0 if size is None and self.carried and (a, b) in self.carried  # (a sub-protocol carries it: `carried`)
                else coded[0] if coded is not None else self.world.model_bytes if size is None else size)
        counters = self.counters
        for counter in route.counted:
            counters[counter] += size
        if route.cloud_message:
            counters["messages_cloud"] += 1
        fid = self._next_flow
        self._next_flow = fid + 1
        now = self.queue.now
        lane = src if a == "device" else dst if b == "device" else src if a == "edge" else dst
        radio = (tuple((int(end[1]), end is src) for end in (src, dst) if end[0] == "device")
                 if self.energy is not None else ())  # only the energy ledger reads it
        tr = Transfer(route.kind, lane, name, now, route.latency_s, event, payload, priority, route.devices, size,
                       args, route.servers, radio, owner=owner)
        self._transfers[fid] = tr
        if coded is not None:  # a model message through a transfer channel: the sender encodes it first
            return _start_coded(self, tr, route, fid, src, dst, coded[1], coded[2])
        flow = tr.flow = self._start_flow(route, fid, size * 8 / 1e6, now)
        if not self.dyn.availability.trivial:
            self._guard(tr, fid, now)
        by_device = self._device_transfers
        for d in tr.devices:  # index_add(by_device, devices, fid), inline: every transfer
            mine = by_device.get(d)
            if mine is None:
                by_device[d] = {fid}
            else:
                mine.add(fid)
        if self.track_servers:
            index_add(self._server_transfers, tr.servers, fid)
        if flow.detached:
            # the arrival, as the network's wake-up at its end would have scheduled it
            end = flow.end
            delivery = tr.delivery = self.queue.push((end if end > now else now) + tr.latency_s, event, payload,
                                                     priority, None if owner is None else owner.on_arrival)
            delivery.transfer = fid  # a transfer's arrival carries its id (before_dispatch)
            if not self._attached:
                return fid  # no flow of the shared schedule changed: its next finish is the same
        self._reschedule_net()
        return fid

    def _start_flow(self, route: Route, fid: int, megabits: float, now: float) -> Flow:
        """The transfer's flow in the network, with the finite links its route knows where they still hold.

        Detached when it shares no finite link: its arrival is scheduled at once, with no network
        wake-up at its end (one event per transfer instead of two; ``FlowNetwork.add``).
        """
        self._attached = False
        net = self.net
        if route.known == net.capacity_changes:  # its finite links as the route's last flow found them
            return net.add(now, fid, route.links, megabits, None, self.detach, route.finite)
        flow = net.add(now, fid, route.links, megabits, None, self.detach)
        route.finite, route.known = flow.finite, net.capacity_changes
        return flow

    def _guard(self, tr: Transfer, fid: int, now: float) -> None:
        """The transfer is lost if one of its devices goes offline before it arrives: an event then."""
        avail, queue = self.dyn.availability, self.queue
        for d in tr.devices:
            down = now if not avail.is_up(d, now) else avail.next_down(d, now)
            if math.isfinite(down):
                guard = queue.push(down, "_lost", FlowLost(fid, d), Priority.ARRIVAL, handler=self._on_flow_lost)
                if tr.guards is None:
                    tr.guards = [guard]
                else:
                    tr.guards.append(guard)

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
            self._net_event = self.queue.push(max(when, self.now), "_net", None, Priority.ARRIVAL,
                                              handler=self._on_net)

    def _on_net(self, event: Event) -> None:
        """The network's wake-up: the flows that end now leave it; their arrivals follow their latency."""
        self._net_event = None
        net, queue, now = self.net, self.queue, self.queue.now
        net.advance(now)
        nxt = net.next_finish()
        while nxt is not None and nxt[0] <= now + 1e-12:
            for fid in nxt[1]:
                net.remove(now, fid)
                tr = self._transfers[fid]
                tr.delivery = queue.push(now + tr.latency_s, tr.event, tr.payload, tr.priority,
                                         None if tr.owner is None else tr.owner.on_arrival)
                tr.delivery.transfer = fid
            nxt = net.next_finish()
        self._reschedule_net(nxt)   # nothing changed since that answer

    def _finish_transfer(self, fid: int, lost: bool = False) -> None:
        tr = self._transfers.pop(fid)
        now = self.queue.now
        if tr.flow is not None and tr.flow.detached:  # its bits were all sent at its end: it leaves the network now
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
        if tr.decode_s and not lost:  # the receiver decoded a channel's message before it arrived: its span
            self.telemetry.span(tr.receiver, "decode", now - tr.decode_s, tr.decode_s, bytes=tr.size)
        if self.energy is not None:
            # each device end's radio is on from the start to the arrival (latency included) [D]; a transfer
            # cut off part-way costs its time on air only (how many of its bits went is not tracked)
            bits = 0.0 if lost else tr.size * 8.0
            for d, sends in tr.radio:
                self.energy.transfer(d, bits, now - tr.start, sends)
            if tr.encode_s or tr.decode_s:
                _coding_energy(self.energy, tr, now, lost)
        trace_span(self.telemetry, tr, now, lost)

    def _cancel_transfer(self, fid: int) -> None:
        tr = self._transfers[fid]
        if tr.delivery is not None:
            self.queue.cancel(tr.delivery)
        if fid in self.net.flows and tr.flow is not None and not tr.flow.detached:
            self.net.remove(self.now, fid)
            self._reschedule_net()
        self._finish_transfer(fid, lost=True)   # (a detached flow leaves the network there)
        if tr.owner is not None:
            tr.owner.transfer_lost(fid, tr.payload)

    def cancel_transfer(self, fid: int) -> None:
        """Withdraw a transfer still in flight (its event never fires)."""
        if fid in self._transfers:
            self._cancel_transfer(fid)

    def in_flight(self, fid: int) -> bool:
        """Whether transfer ``fid`` is still on its way (neither arrived nor withdrawn)."""
        return fid in self._transfers

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

    # -- devices dropping out ----------------------------------------------------------------------
    def _on_flow_lost(self, event: Event) -> None:
        """A device at an end of a transfer went offline before it arrived: the transfer is lost."""
        fid, d = event.payload.flow, event.payload.device
        if fid in self._transfers:
            tr = self._transfers[fid]
            self._cancel_transfer(fid)
            self.device_lost(d, tr.name, "offline", tr.payload)

    def job_lost(self, device: int, at: float, reason: str, origin: Any) -> Event:
        """``device``'s job will be lost at ``at`` (offline or dropout) before it ends: an event then."""
        return self.track(device, self.queue.push(at, "_job_lost", JobLost(device, reason, origin),
                                                  Priority.ARRIVAL, handler=self._on_job_lost))

    def _on_job_lost(self, event: Event) -> None:
        lost: JobLost = event.payload
        pending = self._device_events.get(lost.device)
        if pending:
            pending[:] = [e for e in pending if e.seq != event.seq]
        self.device_lost(lost.device, "train", lost.reason, lost.origin)

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
            if tr.owner is None:  # (an owned transfer's loss goes to its owner)
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



def _start_coded(t: Transfers, tr: Transfer, route: Route, fid: int, src: Endpoint, dst: Endpoint, encode_s: float,
                 decode_s: float) -> int:
    """Start model message ``fid`` through a transfer channel (``channels:``; registered already): the sender
    encodes for ``encode_s``, then its flow starts; the receiver decodes for ``decode_s`` after the latency
    (part of its delivery delay)."""
    now = t.queue.now
    tr.latency_s += decode_s
    tr.decode_s, tr.receiver = decode_s, dst
    tr.encode_s, tr.sender = encode_s, src
    tr.start = now + encode_s
    if encode_s > 0:
        t.telemetry.span(src, "encode", now, encode_s, bytes=tr.size, peer=f"{dst[0]} {dst[1]}")
    if not t.dyn.availability.trivial:
        t._guard(tr, fid, now)
    for d in tr.devices:
        t._device_transfers.setdefault(d, set()).add(fid)
    if t.track_servers:
        index_add(t._server_transfers, tr.servers, fid)
    if encode_s > 0:
        tr.delivery = t.queue.push(now + encode_s, "_encoded", (fid, route), Priority.ARRIVAL,
                                   handler=partial(_on_encoded, t))
    else:
        _launch(t, tr, route, fid, now)
    return fid


def _on_encoded(t: Transfers, event: Event) -> None:
    """The sender has encoded a channel's message: its flow starts now."""
    fid, route = event.payload
    tr = t._transfers.get(fid)
    if tr is not None:
        tr.delivery = None
        _launch(t, tr, route, fid, t.queue.now)


def _launch(t: Transfers, tr: Transfer, route: Route, fid: int, now: float) -> None:
    """Start a channel message's flow now (what :meth:`Transfers.send` does inline for other transfers)."""
    flow = tr.flow = t._start_flow(route, fid, tr.size * 8 / 1e6, now)
    if flow.detached:
        end = flow.end
        delivery = tr.delivery = t.queue.push((end if end > now else now) + tr.latency_s, tr.event, tr.payload,
                                              tr.priority)
        delivery.transfer = fid
        if not t._attached:
            return
    t._reschedule_net()


def _refuse_if_down(down: set[Endpoint], route: Route, src: Endpoint, dst: Endpoint, event: str) -> None:
    """No transfer starts through a server that is down (a protocol must not send one)."""
    if any(end in down for end in route.servers):
        dead = next(end for end in route.servers if end in down)
        raise RuntimeError(f"{dead[0]} {dead[1]} is down: no transfer {src} → {dst} ({event})")


def _coding_energy(energy: EnergyLedger, tr: Transfer, now: float, lost: bool) -> None:
    """A channel message's encoding and decoding on a device end, at its active power (``energy:``): the encoding
    once it was done (the flow started), the decoding when the message arrived; a server's work is not device
    energy. The same seconds as the timeline's, so privacy.dp's clipping and local noise (a channel overhead
    on the upload) are charged with them."""
    if tr.encode_s and tr.sender is not None and tr.sender[0] == "device" and (not lost or now >= tr.start):
        energy.work(int(tr.sender[1]), tr.encode_s)
    if tr.decode_s and not lost and tr.receiver is not None and tr.receiver[0] == "device":
        energy.work(int(tr.receiver[1]), tr.decode_s)
