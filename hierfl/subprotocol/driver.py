"""How the driver runs a sub-protocol at an aggregation point (:mod:`hierfl.subprotocol.config`).

Each round of an instance is real traffic: for every participant still taking part, the
aggregator's message down (a transfer on the emulated links, with contention, latency, link events
and outages like any other), the participant's work (a timer at its FLOP/s and slowdown), its
message up; when the last one is in, the aggregator's work; then the threshold is checked and the
next round begins. The transfers are owned by this service (``Transfers.send(..., owner=...)``):
their arrivals and losses come here, never to the protocol.

A device participant that goes offline is dropped by a guard made when the instance starts (at its
next going-offline time): it is lost like any device (``devices_lost``, the ``lost`` instant, the
protocol's ``device_lost`` with this service's message as ``origin``) and the instance goes on
without it. A transfer cut by anything else (a ``leave`` event, an edge server failing) drops its
participant, or, when the aggregator itself went down, fails the instance. The protocol hears
``on_<done>`` once, with a :class:`~hierfl.subprotocol.config.SubProtocolDone`.

Accounting (only in runs that use a sub-protocol, so every other run's outputs stay as they were):
counters ``subprotocol_runs``, ``subprotocol_rounds``, ``subprotocol_dropped``,
``subprotocol_failed`` and ``subprotocol_s`` (virtual seconds from start to end, summed); a span per
round on the aggregator's lane, each message's span on its lane, the senders' work on theirs, and
within a work span one span per crypto operation it charges (``SubRound.sender_ops`` /
``server_ops``, at the tier's ``crypto`` rates of hierfl/profiles/tiers.yaml: a device's own tier,
the ``servers.<tier>.tier`` of an edge server or the cloud). With ``energy:``, a device sender's work of
each round (crypto operations and mask arithmetic) is charged in joules at its active power when it ends
(:meth:`hierfl.energy.math.EnergyLedger.work`); its messages cost radio energy as every transfer does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hierfl.env.api import Endpoint
from hierfl.env.events import Payload, SubProtocolDone
from hierfl.kernel.engine import Event, Priority
from hierfl.subprotocol.config import SubProtocolConfig, senders_are_edge_servers
from hierfl.subprotocol.math import RoundView, SubRound, ops_seconds

__all__ = ["SubMsg", "SubProtocols"]


@dataclass(frozen=True)
class SubMsg(Payload):
    """A sub-protocol message or timer of participant ``device`` (a device, or an edge server when
    ``source="edge"``) in round ``round`` of instance ``instance``; ``step``: down, work, up."""

    instance: int
    device: int
    round: int
    step: str
    source: str = "device"


@dataclass(frozen=True)
class _Guard:
    """Internal: participant ``device`` of ``instance`` goes offline."""

    instance: int
    device: int


@dataclass
class _Instance:
    """One sub-protocol run at one aggregation point."""

    ident: int
    cfg: SubProtocolConfig
    tier: str
    entity: int
    server: Endpoint
    source: str
    participants: tuple[int, ...]
    done: str
    payload: Any
    start: float
    threshold: int
    alive: set[int] = field(default_factory=set)
    kept: set[int] = field(default_factory=set)          # lost in a round that keeps their inputs
    lost: list[int] = field(default_factory=list)
    lost_in_round: int = 0                                # lost during the current round
    lost_before: int = 0                                  # lost during the previous round
    lost_ids: list[int] = field(default_factory=list)     # lost during the current round, by id
    lost_before_ids: tuple[int, ...] = ()                  # lost during the previous round, by id
    plans: dict[int, SubRound] = field(default_factory=dict)  # a sender's own plan of this round (plan_sender)
    round: int = 0
    plan: SubRound | None = None
    round_start: float = 0.0
    waiting: set[int] = field(default_factory=set)
    pending: dict[int, tuple[str, Any]] = field(default_factory=dict)  # participant → ("t", fid) / ("e", event)
    server_event: Event | None = None
    starting: bool = False                                # its round's first messages are being sent
    guards: list[Event] = field(default_factory=list)


class SubProtocols:
    """Every sub-protocol instance of one run (``ctx``: the run's :class:`~hierfl.driver.context.Context`,
    which is still being built when this is made; it is read only once the run goes)."""

    def __init__(self, scenario: Any, ctx: Any) -> None:
        section = getattr(scenario, "subprotocol", None)
        self._at = {tier: None if section is None else section.at(tier) for tier in ("cloud", "edge")}
        self.ctx = ctx
        self._instances: dict[int, _Instance] = {}
        self._next = 0
        self._tier_gflops: dict[str, float] | None = None
        self._rates: dict[str, dict[str, float]] = {}
        # per sender kind, the integer levels of its upload channel when it quantises onto a grid every sender
        # shares (a masking sub-protocol sums those integers: RoundView.field_levels); none without channels
        self._levels: dict[str, int | None] = {"device": None, "edge": None}
        # (sender kind, tier) of each tier whose sub-protocol carries the senders' inputs itself
        # (SubProtocolConfig.carries_inputs): the Context hands it to Transfers, where an upload into such a
        # tier moves no bytes of its own (the update goes up once, inside the sub-protocol)
        self.carried: frozenset[tuple[str, str]] = frozenset(
            ("edge" if senders_are_edge_servers(scenario, tier) else "device", tier)
            for tier, cfg in self._at.items() if cfg is not None and not cfg.none and cfg.carries_inputs)
        self._work_s: dict[tuple[int, int], float] = {}  # (instance, device) → seconds of work under way (energy:)
        channels = getattr(scenario, "channels", None)
        if section is not None and channels is not None and not channels.default:
            placed = channels.resolved(tuple(getattr(type(scenario.protocol), "channel_links", ())))
            for source, direction in (("device", "device_uplink"), ("edge", "edge_uplink")):
                if direction in placed:
                    self._levels[source] = placed[direction].field_levels()

    def at(self, tier: str) -> SubProtocolConfig | None:
        """The sub-protocol the scenario places at ``tier`` (None: none)."""
        return self._at.get(tier)

    # -- starting one ------------------------------------------------------------------------------------
    def prepare(self, cfg: SubProtocolConfig, tier: str, entity: int, participants: list[int], done: str,
                payload: Any = None, source: str = "device") -> None:
        """Run ``cfg`` between ``(tier, entity)`` and ``participants`` now; ``on_<done>`` fires at its end."""
        ctx = self.ctx
        ident = self._next
        self._next += 1
        parts = tuple(sorted(int(p) for p in participants))
        server: Endpoint = ("cloud", 0) if tier == "cloud" else (tier, int(entity))
        inst = _Instance(ident, cfg, tier, int(entity), server, source, parts, done, payload, ctx.now,
                         int(cfg.threshold(len(parts))), alive=set(parts))
        self._instances[ident] = inst
        ctx.telemetry.count("subprotocol_runs")
        if source == "device":
            avail, queue = ctx.dyn.availability, ctx.queue
            if not avail.trivial:
                for d in parts:
                    down = ctx.now if not avail.is_up(d, ctx.now) else avail.next_down(d, ctx.now)
                    if math.isfinite(down):
                        inst.guards.append(queue.push(down, "_sub_lost", _Guard(ident, d), Priority.ARRIVAL,
                                                      handler=self._on_guard))
        if server in ctx.transfers.down:
            self._fail(inst, "server_down")
        elif len(inst.alive) < inst.threshold:  # too few senders to begin with
            self._fail(inst, "below_threshold")
        else:
            self._begin_round(inst)

    # -- one round -----------------------------------------------------------------------------------------
    def _view(self, inst: _Instance) -> RoundView:
        return RoundView(inst.round, len(inst.participants), len(inst.alive), len(inst.lost), inst.lost_before,
                         int(self.ctx.world.model_bytes), inst.tier, inst.source, inst.participants,
                         tuple(sorted(inst.alive)), inst.lost_before_ids, inst.ident, int(self.ctx.scenario.seed),
                         self._levels.get(inst.source))

    def _begin_round(self, inst: _Instance) -> None:
        if inst.round > 0:  # those lost during the round just over are the new round's `dropped_last`
            inst.lost_before, inst.lost_in_round = inst.lost_in_round, 0
            inst.lost_before_ids, inst.lost_ids = tuple(sorted(inst.lost_ids)), []
        view = self._view(inst)
        plan = inst.cfg.plan(view)
        if plan is None:
            self._finish(inst)
            return
        inst.plans = ({d: inst.cfg.plan_sender(view, d, plan) for d in sorted(inst.alive)}
                      if type(inst.cfg).plan_sender is not SubProtocolConfig.plan_sender else {})
        inst.plan, inst.round_start = plan, self.ctx.now
        inst.waiting = set(inst.alive)
        inst.starting = True
        for d in sorted(inst.alive):
            if inst.ident not in self._instances or d not in inst.alive:
                continue  # (failed, or dropped while the round was being started)
            self._down(inst, d)
        inst.starting = False
        if inst.ident in self._instances and not inst.waiting and inst.server_event is None:
            self._senders_in(inst)

    def _end(self, source: str, d: int) -> Endpoint:
        return (source, int(d))

    def _send(self, inst: _Instance, d: int, src: Endpoint, dst: Endpoint, step: str, size: int) -> None:
        transfers = self.ctx.transfers
        if inst.server in transfers.down:
            self._fail(inst, "server_down")
            return
        sender = self._end(inst.source, d)
        if sender in transfers.down:  # an edge server sender that failed
            self._drop(inst, d, "server_down")
            return
        assert inst.plan is not None
        msg = SubMsg(inst.ident, d, inst.round, step, inst.source)
        fid = transfers.send(src, dst, "_sub_" + step, msg, f"sub:{inst.cfg.name}:{inst.plan.name}:{step}",
                             Priority.ARRIVAL, size=int(size), owner=self)
        inst.pending[d] = ("t", fid)

    def _plan(self, inst: _Instance, d: int) -> SubRound:
        """Sender ``d``'s plan of the current round (its own, or the round's)."""
        assert inst.plan is not None
        return inst.plans.get(d, inst.plan)

    def _down(self, inst: _Instance, d: int) -> None:
        plan = self._plan(inst, d)
        if plan.down_bytes > 0:
            self._send(inst, d, inst.server, self._end(inst.source, d), "down", plan.down_bytes)
        else:
            self._work(inst, d)

    def _sender_flops_per_s(self, inst: _Instance, d: int) -> float:
        ctx = self.ctx
        if inst.source == "edge":
            return float(ctx.scenario.servers.flops_per_s("edge"))
        if inst.cfg.sender_gflops is not None:
            return float(inst.cfg.sender_gflops) * 1e9
        if self._tier_gflops is None:
            from hierfl.devices.tiers import shipped_tiers

            specs = {**shipped_tiers(), **ctx.scenario.devices.custom_tiers}
            self._tier_gflops = {name: float(spec.gflops) for name, spec in specs.items()}
        return self._tier_gflops[str(ctx.world.tier[d])] * 1e9

    def _crypto(self, tier_name: str) -> dict[str, float]:
        """Seconds per unit of each crypto operation at tier ``tier_name`` (its ``crypto`` rates)."""
        rates = self._rates.get(tier_name)
        if rates is None:
            from hierfl.devices.tiers import shipped_tiers

            spec = {**shipped_tiers(), **self.ctx.scenario.devices.custom_tiers}.get(tier_name)
            if spec is None or spec.crypto is None:  # (the load-time checks of a sub-protocol refuse this)
                raise ValueError(f"tier {tier_name!r} has no crypto rates")
            rates = self._rates[tier_name] = spec.crypto.seconds_per_unit()
        return rates

    def _op_spans(self, lane: Endpoint, prefix: str, start: float, ops: list[tuple[str, float]], scale: float) -> None:
        """One span per crypto operation, one after another from ``start``."""
        at = start
        for op, seconds in ops:
            if seconds > 0:
                self.ctx.telemetry.span(lane, f"{prefix}:{op}", at, seconds * scale)
                at += seconds * scale

    def _work(self, inst: _Instance, d: int) -> None:
        ctx, plan = self.ctx, self._plan(inst, d)
        tier = (str(ctx.scenario.servers.edge.tier) if inst.source == "edge" else str(ctx.world.tier[d])
                if ctx.scenario.devices.tiers is not None else str(inst.cfg.sender_crypto_tier))
        ops = ops_seconds(plan.sender_ops, self._crypto(tier)) if plan.sender_ops else []
        base = plan.sender_s + (plan.sender_flops / self._sender_flops_per_s(inst, d) if plan.sender_flops else 0.0)
        seconds = base + sum(s for _, s in ops)
        if getattr(ctx, "energy", None) is not None and inst.source == "device" and seconds > 0:
            # its joules at the device's active power, charged when the work is done (as a training job's); the
            # seconds before any slowdown: a slowed device does the same work (the same FLOPs), only later
            self._work_s[(inst.ident, d)] = seconds
        scale = ctx.live.compute_factor(d) if inst.source == "device" and seconds > 0 else 1.0
        seconds *= scale
        if seconds > 0:
            lane = self._end(inst.source, d)
            ctx.telemetry.span(lane, f"sub:{inst.cfg.name}:{plan.name}:work", ctx.now, seconds,
                               flops=plan.sender_flops)
            self._op_spans(lane, f"sub:{inst.cfg.name}:{plan.name}", ctx.now + base * scale, ops, scale)
            msg = SubMsg(inst.ident, d, inst.round, "work", inst.source)
            inst.pending[d] = ("e", ctx.queue.push(ctx.now + seconds, "_sub_work", msg, Priority.ARRIVAL,
                                                   handler=self._on_work))
        else:
            self._up(inst, d)

    def _up(self, inst: _Instance, d: int) -> None:
        plan = self._plan(inst, d)
        if plan.up_bytes > 0:
            self._send(inst, d, self._end(inst.source, d), inst.server, "up", plan.up_bytes)
        else:
            self._in(inst, d)

    def _in(self, inst: _Instance, d: int) -> None:
        inst.pending.pop(d, None)
        inst.waiting.discard(d)
        if not inst.waiting and inst.server_event is None and not inst.starting:
            self._senders_in(inst)

    def _senders_in(self, inst: _Instance) -> None:
        """Every sender still taking part is in: the aggregator's work, then the round is over."""
        ctx, plan = self.ctx, inst.plan
        assert plan is not None
        ops = (ops_seconds(plan.server_ops, self._crypto(str(getattr(ctx.scenario.servers, inst.tier).tier)))
               if plan.server_ops else [])
        base = plan.server_s + (plan.server_flops / ctx.scenario.servers.flops_per_s(inst.tier)
                                if plan.server_flops else 0.0)
        seconds = base + sum(s for _, s in ops)
        if seconds > 0:
            ctx.telemetry.span(inst.server, f"sub:{inst.cfg.name}:{plan.name}:server", ctx.now, seconds,
                               flops=plan.server_flops)
            self._op_spans(inst.server, f"sub:{inst.cfg.name}:{plan.name}:server", ctx.now + base, ops, 1.0)
            inst.server_event = ctx.queue.push(ctx.now + seconds, "_sub_server",
                                               SubMsg(inst.ident, -1, inst.round, "server", inst.source),
                                               Priority.ARRIVAL, handler=self._on_server)
            return
        self._round_over(inst)

    def _round_over(self, inst: _Instance) -> None:
        ctx, plan = self.ctx, inst.plan
        assert plan is not None
        inst.server_event = None
        ctx.telemetry.span(inst.server, f"sub:{inst.cfg.name}:{plan.name}", inst.round_start,
                           ctx.now - inst.round_start, round=inst.round, alive=len(inst.alive),
                           lost=inst.lost_in_round, up_bytes=plan.up_bytes, down_bytes=plan.down_bytes)
        ctx.telemetry.count("subprotocol_rounds")
        inst.round += 1
        self._begin_round(inst)

    # -- events of its own ---------------------------------------------------------------------------------
    def on_arrival(self, event: Event) -> None:
        """A sub-protocol message arrived (the handler of its transfers' arrivals)."""
        self.ctx.transfers.before_dispatch(event)  # its transfer is over: its span, its network flow
        msg: SubMsg = event.payload
        inst = self._instances.get(msg.instance)
        if inst is None or msg.device not in inst.alive or inst.pending.get(msg.device) != ("t", event.transfer):
            return None
        if msg.step == "down":
            self._work(inst, msg.device)
        else:
            self._in(inst, msg.device)
        return None

    def _on_work(self, event: Event) -> None:
        msg: SubMsg = event.payload
        inst = self._instances.get(msg.instance)
        if inst is None or msg.device not in inst.alive:
            return None
        inst.pending.pop(msg.device, None)
        work_s = self._work_s.pop((inst.ident, msg.device), None) if self._work_s else None
        if work_s is not None:  # (energy:) the crypto and masking work of the round, on the device that did it
            self.ctx.energy.work(msg.device, work_s)
        self._up(inst, msg.device)
        return None

    def _on_server(self, event: Event) -> None:
        inst = self._instances.get(event.payload.instance)
        if inst is not None and inst.server_event is event:
            self._round_over(inst)
        return None

    def _on_guard(self, event: Event) -> None:
        """A device participant goes offline now: lost like any device, dropped from the instance."""
        guard: _Guard = event.payload
        inst = self._instances.get(guard.instance)
        if inst is None or guard.device not in inst.alive:
            return None
        inst.guards = [g for g in inst.guards if g is not event]
        round_ = inst.round
        self._drop(inst, guard.device, "offline")
        # (the device's other work is withdrawn and the protocol hears device_lost, as for any device)
        self.ctx.transfers.device_lost(guard.device, "subprotocol", "offline",
                                       SubMsg(guard.instance, guard.device, round_, "lost"))
        return None

    def transfer_lost(self, fid: int, payload: Any) -> None:
        """One of this service's transfers was withdrawn by someone else (a device leaving, a server failing)."""
        msg: SubMsg = payload
        inst = self._instances.get(msg.instance)
        if inst is None or inst.pending.get(msg.device) != ("t", fid):
            return  # (withdrawn by this service itself)
        inst.pending.pop(msg.device, None)
        if inst.server in self.ctx.transfers.down:
            self._fail(inst, "server_down")
        else:
            self._drop(inst, msg.device, "lost")

    # -- dropping, failing, ending ---------------------------------------------------------------------------
    def _withdraw(self, inst: _Instance, d: int) -> None:
        kind, what = inst.pending.pop(d, ("", None))
        if kind == "t":
            self.ctx.transfers.cancel_transfer(what)
        elif kind == "e":
            self.ctx.queue.cancel(what)
            self._work_s.pop((inst.ident, d), None)  # work cut off part-way is never charged (as a lost job)

    def _drop(self, inst: _Instance, d: int, reason: str) -> None:
        """Participant ``d`` is out of the instance from now on."""
        if d not in inst.alive:
            return
        ctx = self.ctx
        inst.alive.discard(d)
        inst.lost.append(d)
        inst.lost_ids.append(d)
        inst.lost_in_round += 1
        if inst.plan is not None and inst.plan.keeps_lost_inputs:
            inst.kept.add(d)
        self._withdraw(inst, d)
        ctx.telemetry.count("subprotocol_dropped")
        ctx.telemetry.instant(inst.server, "subprotocol_drop", ctx.now, participant=d, round=inst.round,
                              reason=reason)
        if len(inst.alive) < inst.threshold:
            self._fail(inst, "below_threshold")
            return
        was_waiting = d in inst.waiting
        inst.waiting.discard(d)
        if was_waiting and not inst.waiting and inst.server_event is None and not inst.starting:
            self._senders_in(inst)

    def _close(self, inst: _Instance) -> None:
        self._instances.pop(inst.ident, None)
        for g in inst.guards:
            self.ctx.queue.cancel(g)
        inst.guards = []
        for d in sorted(inst.pending):
            self._withdraw(inst, d)
        if inst.server_event is not None:
            self.ctx.queue.cancel(inst.server_event)
            inst.server_event = None
        self.ctx.telemetry.count("subprotocol_s", self.ctx.now - inst.start)

    def _fail(self, inst: _Instance, reason: str) -> None:
        ctx = self.ctx
        if inst.ident not in self._instances:
            return
        self._close(inst)
        ctx.telemetry.count("subprotocol_failed")
        ctx.telemetry.instant(inst.server, "subprotocol_failed", ctx.now, reason=reason, round=inst.round,
                              alive=len(inst.alive), threshold=inst.threshold)
        self._done(inst, failed=True, reason=reason)

    def _finish(self, inst: _Instance) -> None:
        self._close(inst)
        self._done(inst, failed=False, reason=None)

    def _done(self, inst: _Instance, failed: bool, reason: str | None) -> None:
        ctx = self.ctx
        survivors = () if failed else tuple(sorted(inst.alive | inst.kept))
        result = SubProtocolDone(inst.tier, inst.entity, inst.participants, survivors, tuple(sorted(inst.lost)),
                                 failed, reason, inst.round, inst.start, ctx.now, inst.payload)
        ctx.queue.push(ctx.now, inst.done, result, Priority.ARRIVAL)
