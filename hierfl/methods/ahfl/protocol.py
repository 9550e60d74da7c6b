"""AHFL: asynchronous hierarchical federated learning with leader and cloud queues.

Wang and Wang, "Asynchronous Hierarchical Federated Learning", arXiv 2206.00054 (2022).
docs/explanation/algorithms.md §4.3 (the paper body was not reachable; the queue mechanics are [B], the rest
[D], each a knob here):

* devices train continuously on ``f_i(w) + reg(w)`` (``prox``: (ρ/2)‖w − w_pulled‖²; ``l2``:
  weight decay λ) from their leader's model and push ``(Δ_i = w_i − w_start, v_start, n_i)``
  into the leader's queue; on arrival they pull the leader's current model and start again;
* every ``leader_period`` a leader with a non-empty queue applies
  ``w_k += Σ (n_u/S)·α·σ(v_k − v_u)·Δ_u`` (``S`` = samples in the queue), ``v_k += 1``, and
  pushes its progress since the last push ``Δ_k = w_k − w_k_last`` (with the cloud version
  ``g_k`` it started from) to the cloud queue;
* every ``cloud_period`` the cloud applies ``w += α·σ(g − g_e)·(n_k/N)·Δ_e`` for each queued
  entry in arrival order, ``g += 1``, and sends ``(w, g)`` to every leader, which rebases its
  unpushed progress: ``w_k = w + (w_k − w_k_last)``, ``w_k_last = w``, ``g_k = g``.

Leaders are the edge servers of ``topology`` (grouping ``nearest`` / ``random`` /
``round_robin``); versions only move on applied aggregations, so staleness is bounded by the
number of aggregations at the aggregator that measures it.

Re-grouping (``recluster:``, :mod:`hierfl.protocols.regroup`): a leader aggregation's "round time" is
the longest round trip (download sent → update arrived) among the updates it applies [D]; each leader
push applied at the cloud counts for the ``periodic`` trigger; the groups are re-formed at a cloud tick
(while no leader is down or recovering [D]). A moved device's job in flight finishes for its old leader
or is withdrawn (``migration.in_flight``); its next job starts from its new leader, and the cloud
weights ``n_k/N`` and ``auto`` leader periods follow the new groups.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, field_validator

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.core.recluster import moved_devices
from hierfl.kernel.engine import Event, Priority
from hierfl.env import Env, Payload, Timer
from hierfl.faults.protocol import CLOUD, count_lost, reattach_plan, record_loss, record_moves
from hierfl.policies.recluster import RECLUSTER, NeverRecluster
from hierfl.policies.staleness import STALENESS, PolynomialStaleness
from hierfl.protocols.base import AggregationPoint, DeviceMsg, PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.regroup import Regrouping

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["AHFLConfig", "AHFL", "LeaderMsg"]


@dataclass(frozen=True)
class LeaderMsg(DeviceMsg):
    """A device's download of leader ``edge``'s model version ``version`` (and its upload back)."""

    edge: int
    version: int


@dataclass(frozen=True)
class DeviceBack(DeviceMsg):
    """A device that dropped out is online again."""


@dataclass(frozen=True)
class LeaderTick(Payload):
    """Leader ``edge``'s aggregation period is over."""

    edge: int


@dataclass(frozen=True)
class LeaderPush(Payload):
    """Leader ``edge``'s progress on its way to the cloud (``push``: its sequence number)."""

    edge: int
    push: int


@dataclass(frozen=True)
class GlobalDown(Payload):
    """Global model version ``version`` on its way to leader ``edge``."""

    edge: int
    version: int


@PROTOCOLS.register
class AHFLConfig(ProtocolConfig):
    """``protocol: {name: ahfl, alpha: 0.6, staleness: {name: polynomial, a: 0.5}, reg: prox, ...}``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud", "edge")
    rule_tiers: ClassVar[tuple[str, ...]] = ("edge", "cloud")
    aggregation_style: ClassVar[str] = "queue"
    supports_infra_faults: ClassVar[bool] = True
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→edge", synchronous=False,
                         note="a leader applies its queue every leader_period, whatever has arrived"),
        AggregationPoint("straggler.cloud", "edge→cloud", synchronous=False, participants="edge servers",
                         note="the cloud applies its queue every cloud_period, whatever has arrived"))

    name: Literal["ahfl"] = "ahfl"
    alpha: float = Field(default=0.6, gt=0.0, le=1.0, description="base weight α at leaders and cloud [D]")
    staleness: STALENESS.union() = Field(default=PolynomialStaleness(a=0.5), description="σ(τ) weighting stale updates (a staleness function by name)")  # type: ignore[valid-type]
    reg: Literal["prox", "l2"] = Field(default="prox", description="local regulariser [D]/[B]")
    rho: float = Field(default=0.005, ge=0.0, description="ρ of reg=prox (another value under l2 is refused) [D]")
    lam: float = Field(default=5e-4, ge=0.0, description="λ (weight decay) of reg=l2 (another value under prox is "
                                                        "refused) [D]")
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        "rho": ReadWith("reg", ("prox",)), "lam": ReadWith("reg", ("l2",))}
    leader_period: float | Literal["auto"] = Field(
        default="auto", description="seconds; auto = median over members of compute + upload time [D]")
    cloud_period: float | Literal["auto"] = Field(
        default="auto", description="seconds; auto = 2 × median of the leader periods [D]")
    cloud_weight: Literal["samples", "devices"] = Field(default="samples", description="n_k/N counts [D]")
    max_staleness: NonNegativeInt | None = Field(default=None, description="drop staler updates; null = ∞ [D]")
    recluster: RECLUSTER.union() = Field(  # type: ignore[valid-type]
        default=NeverRecluster(),
        description="when and how the leader groups are re-formed (never, periodic, adaptive, on_event); applied "
                    "at a cloud tick")

    @field_validator("leader_period", "cloud_period", mode="before")
    @classmethod
    def _period(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
            raise ValueError("must be 'auto' or a finite number of seconds > 0")
        return value

    def check(self, scenario: Scenario) -> list[Problem]:
        """AHFL needs leaders: edge servers in the topology."""
        if (scenario.topology.edge_servers or 0) < 1:
            return [Problem("topology.edge_servers", "ahfl needs at least 1 edge server (its leaders)", 0)]
        return []

    def create(self, env: Env) -> AHFL:
        """An AHFL run."""
        return AHFL(self, env)


@dataclass
class _DeviceUpdate:
    device: int
    update: Any
    start: Any
    version: int
    samples: float
    trip_s: float = 0.0   # download sent → update arrived (the adaptive re-grouping trigger's round time)


@dataclass
class _LeaderUpdate:
    leader: int
    new: Any
    last: Any
    version: int


class AHFL(Protocol):
    """Leader queues aggregated every leader period, a cloud queue every cloud period."""

    def __init__(self, cfg: AHFLConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.sigma = cfg.staleness
        base = env.spec
        self.spec = (replace(base, prox=cfg.rho) if cfg.reg == "prox" else replace(base, weight_decay=cfg.lam))
        world = env.world
        members = {e: world.edge_members(e) for e in range(world.num_edges)}
        self._samples = world.samples  # n_i per device (read on every update arrival)
        self.leaders = [e for e, m in members.items() if m.size > 0]
        self.members = {e: members[e] for e in self.leaders}
        if cfg.cloud_weight == "samples":
            size = {e: float(world.samples[m].sum()) for e, m in self.members.items()}
        else:
            size = {e: float(m.size) for e, m in self.members.items()}
        total = sum(size.values())
        self.share = {e: size[e] / total for e in self.leaders}
        self.leader_period = {e: self._leader_period(e) for e in self.leaders}
        if cfg.cloud_period == "auto":
            self.cloud_period = 2.0 * float(np.median([self.leader_period[e] for e in self.leaders]))
        else:
            self.cloud_period = float(cfg.cloud_period)
        w0 = env.global_model
        self.model = {e: w0 for e in self.leaders}        # w_k
        self.last = {e: w0 for e in self.leaders}         # w_k_last: model at the last push / rebase
        self.version = {e: 0 for e in self.leaders}       # v_k: applied leader aggregations
        self.cloud_version_of = {e: 0 for e in self.leaders}  # g_k
        self.queue: dict[int, list[_DeviceUpdate]] = {e: [] for e in self.leaders}
        self.cloud_queue: list[_LeaderUpdate] = []
        self.cloud_version = 0                            # g: applied cloud aggregations
        self.start_of: dict[int, tuple[Any, int]] = {}
        self.leader_of = {int(d): e for e, m in self.members.items() for d in m}
        self.pushes: dict[int, _LeaderUpdate] = {}
        self.sent: dict[tuple[int, int], Any] = {}
        self._push_seq = 0
        # edge-server and cloud faults (the edge_fail and cloud_fail event kinds)
        self.ticks: dict[int, Event] = {}                 # leader → its pending leader_tick
        self.busy_at: dict[int, int] = {}                 # device → the leader its job in flight belongs to
        self.group = {e: {int(d) for d in m} for e, m in self.members.items()}  # leader → devices it serves now
        self.down: set[int] = set()                       # leaders down now
        self.recovering: set[int] = set()                 # back up, waiting for the global model
        self.recovery_sent: set[int] = set()              # ... which is on its way
        self.parked: dict[int, set[int]] = {}             # leader → devices waiting for it
        self.regroup = Regrouping(cfg.recluster, env, self.leaders)  # recluster:
        self.sent_at: dict[int, float] = {}               # device → when its current job's download was sent
        self.timing = self.regroup.active                 # only a policy that can fire pays for the round trips
        env.tier("edge").track_staleness()
        env.tier("cloud").track_staleness()

    def _leader_period(self, edge: int) -> float:
        if self.cfg.leader_period != "auto":
            return float(self.cfg.leader_period)
        w = self.env.world
        return float(np.median([w.compute_s(int(d), self.spec) + w.upload_s(int(d)) for d in self.members[edge]]))

    # -- devices ------------------------------------------------------------------------------
    def start(self) -> None:
        """Every device pulls the initial model; leader and cloud timers start."""
        for e in self.leaders:
            self.env.tier("edge", e).queue(0)
            for d in self.members[e]:
                self._send(int(d))
            self.ticks[e] = self.env.schedule(self.leader_period[e], "leader_tick", LeaderTick(e), Priority.CONTROL)
        self.env.tier("cloud").queue(0)
        self.env.schedule(self.cloud_period, "cloud_tick", Timer(), Priority.CONTROL)

    def _send(self, device: int) -> None:
        e = self.leader_of[device]
        if self.down and (e in self.down or e in self.recovering):  # its leader is away: wait for it
            self.parked.setdefault(e, set()).add(device)
            return
        self.busy_at[device] = e
        if self.timing:
            self.sent_at[device] = self.env.now
        version = self.version[e]
        self.start_of[device] = (self.model[e], version)
        # send_model(device, "device_edge", msg), without its two frames (one download per job)
        self.env.send(("edge", int(e)), ("device", device), "train_start", LeaderMsg(device, e, version), "download",
                      Priority.START)

    def on_train_start(self, event: Event) -> None:
        """The device has its leader's model: train from it."""
        self.start_job(event, self.start_of[event.payload.device][0], self.spec)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and upload it to the leader."""
        self.collect_and_upload(event, "device_edge")

    def on_upload_done(self, event: Event) -> None:
        """The update joins the leader's queue; the device pulls the current leader model and goes on."""
        device, e = event.payload.device, event.payload.edge
        start, version = self.start_of.pop(device)
        self.busy_at.pop(device, None)
        queue = self.queue[e]
        env = self.env
        queue.append(_DeviceUpdate(device, self.jobs.pop(device).params, start, version,
                                   float(self._samples.item(device)), env.now - self.sent_at.get(device, env.now)))
        env.tier("edge", e).queue(len(queue))
        if not env.stopping:
            self._send(device)

    def on_device_lost(self, event: Event) -> None:
        """The device dropped out: its update is lost; it pulls the leader's model when back online."""
        device = event.payload.device
        self.start_of.pop(device, None)
        self.busy_at.pop(device, None)
        when = self.env.live.next_up([device])
        if math.isfinite(when) and not self.env.stopping:
            self.env.at(when, "device_back", DeviceBack(device), Priority.CONTROL)

    def on_device_back(self, event: Event) -> None:
        """A device that dropped out is online again: it resumes training."""
        if not self.env.stopping:
            self._send(event.payload.device)

    # -- leaders ------------------------------------------------------------------------------
    def on_leader_tick(self, event: Event) -> None:
        """Aggregate the leader's queue (if any survives ``max_staleness``) and push the progress."""
        env, e = self.env, event.payload.edge
        queue, self.queue[e] = self.queue[e], []
        env.tier("edge", e).queue(0)  # applied or dropped, every queued update leaves now
        kept = []
        for u in queue:
            tau = self.version[e] - u.version
            if self.cfg.max_staleness is not None and tau > self.cfg.max_staleness:
                env.tier("edge", e).drop(u.device, tau)
            else:
                kept.append((u, tau))
        if kept:
            total = sum(u.samples for u, _ in kept)
            # n_i / n · α · σ(τ_i), σ once per distinct τ of the queue (the same floats)
            alpha, sigma = self.cfg.alpha, self.sigma
            sig: dict[int, float] = {}
            coefs = [u.samples / total * alpha * (sig[tau] if tau in sig else sig.setdefault(tau, sigma(tau)))
                     for u, tau in kept]
            deltas = [(c, u.update, u.start) for c, (u, _) in zip(coefs, kept)]
            self.version[e] += 1
            self.model[e] = env.tier("edge", e).step(self.model[e], deltas, [u.device for u, _ in kept],
                                                     [t for _, t in kept], self.version[e], len(queue))
            if self.timing:
                self.regroup.round_closed(e, max(u.trip_s for u, _ in kept))
            if env.live.server_up(CLOUD):  # else the progress accumulates, pushed when the cloud is back
                self._push(e)
        if not env.stopping:
            self.ticks[e] = env.schedule(self.leader_period[e], "leader_tick", LeaderTick(e), Priority.CONTROL)

    def _push(self, e: int) -> None:
        env = self.env
        self.pushes[self._push_seq] = _LeaderUpdate(e, self.model[e], self.last[e], self.cloud_version_of[e])
        env.send(("edge", e), ("cloud", 0), "leader_upload_done", LeaderPush(e, self._push_seq), "upload")
        self._push_seq += 1
        self.last[e] = self.model[e]

    def on_leader_upload_done(self, event: Event) -> None:
        """A leader's progress reached the cloud queue."""
        self.cloud_queue.append(self.pushes.pop(event.payload.push))
        self.env.tier("cloud").queue(len(self.cloud_queue))

    def on_leader_download_done(self, event: Event) -> None:
        """A new global model reached the leader: rebase the unpushed progress on it."""
        e, g = event.payload.edge, event.payload.version
        w = self.sent.pop((e, g))
        if e in self.recovering:
            self._recovered(e, w, g)
            return
        if self.model[e] is not self.last[e]:
            self.model[e] = self.env.tier("edge", e).combine([(1.0, w, None), (1.0, self.model[e], self.last[e])])
        else:
            self.model[e] = w
        self.last[e] = w
        self.cloud_version_of[e] = g

    # -- cloud --------------------------------------------------------------------------------
    def on_cloud_tick(self, event: Event) -> None:
        """Apply the cloud queue in arrival order and broadcast the new global model."""
        env = self.env
        queue, self.cloud_queue = self.cloud_queue, []
        env.tier("cloud").queue(0)
        kept = []
        for u in queue:
            tau = self.cloud_version - u.version
            if self.cfg.max_staleness is not None and tau > self.cfg.max_staleness:
                env.tier("cloud").drop(u.leader, tau)
            else:
                kept.append((u, tau))
        if kept:
            coefs = [self.cfg.alpha * self.sigma(tau) * self.share[u.leader] for u, tau in kept]
            deltas = [(c, u.new, u.last) for c, (u, _) in zip(coefs, kept)]
            self.cloud_version += 1
            env.set_global(env.tier("cloud").step(env.global_model, deltas, [u.leader for u, _ in kept],
                                                  [t for _, t in kept], self.cloud_version, len(queue), source="edge"))
            for u, _ in kept:
                self.regroup.applied(u.leader)
            if not env.stopping and env.live.server_up(CLOUD):  # else sent when the cloud is back
                for e in self.leaders:
                    if self.down and (e in self.down or e in self.recovering):
                        continue
                    self._send_global(e)
        if not env.stopping and not self.down and not self.recovering and self.regroup.due():
            self._regroup()
        if not env.stopping:
            env.schedule(self.cloud_period, "cloud_tick", Timer(), Priority.CONTROL)

    def _regroup(self) -> None:
        """Re-form the leader groups now: moved devices' jobs in flight finish for their old leader or are
        withdrawn (then restarted from the new one); shares and ``auto`` periods follow the new groups."""
        env = self.env
        old = np.array([self.leader_of[d] for d in range(env.world.num_devices)], dtype=np.int64)
        new = self.regroup.plan(old)
        moves = moved_devices(old, new)
        restart = []
        if self.regroup.cfg.migration.in_flight == "abort":
            for d in moves:
                if d in self.busy_at:  # withdrawn before the migration transfer starts (which it would cancel)
                    self.abandon(d)
                    self.start_of.pop(d, None)
                    del self.busy_at[d]
                    restart.append(d)
        self.regroup.migrate(old, new)
        for d, (src, dst) in moves.items():
            self.leader_of[d] = dst
            self.group[src].discard(d)
            self.group[dst].add(d)
        self.members = {e: np.asarray(sorted(self.group[e]), dtype=np.int64) for e in self.leaders}
        size = {e: float(self._samples[m].sum()) if self.cfg.cloud_weight == "samples" else float(m.size)
                for e, m in self.members.items()}
        total = sum(size.values())
        self.share = {e: size[e] / total for e in self.leaders}
        if self.cfg.leader_period == "auto":  # an empty group keeps its period (its ticks find no updates)
            self.leader_period = {e: self._leader_period(e) if self.members[e].size else self.leader_period[e]
                                  for e in self.leaders}
        for d in restart:
            self._send(d)

    def _send_global(self, e: int) -> None:
        self.sent[(e, self.cloud_version)] = self.env.global_model
        self.env.send(("cloud", 0), ("edge", e), "leader_download_done", GlobalDown(e, self.cloud_version), "download")

    # -- edge-server and cloud faults ------------------------------------------------------------
    def on_edge_down(self, event: Event) -> None:
        """A leader failed: its queue, its unpushed progress, the updates on their way to it and its pushes on
        their way to the cloud are lost; the jobs training for it are withdrawn; its devices re-attach to the
        nearest live leader (and start again from its model) or wait for it."""
        env, down = self.env, event.payload
        e = down.server[1]
        self.down.add(e)
        self.recovering.discard(e)
        self.recovery_sent.discard(e)
        tick = self.ticks.pop(e, None)
        if tick is not None:
            env.cancel(tick)
        updates = len(self.queue[e]) + count_lost(down.lost, ("upload_done", "leader_upload_done"))
        self.queue[e] = []
        env.tier("edge", e).queue(0)
        for kind, msg in down.lost:
            if kind == "leader_upload_done":
                self.pushes.pop(msg.push, None)
            elif kind == "leader_download_done":
                self.sent.pop((msg.edge, msg.version), None)
        self.model[e] = self.last[e]  # its progress since the last push is gone with it
        busy = sorted(d for d, x in self.busy_at.items() if x == e)
        wasted = sum(self.abandon(d) for d in busy)
        for d in busy:
            self.start_of.pop(d, None)
            del self.busy_at[d]
        record_loss(env, ("edge", e), updates, wasted, version=self.version[e], on_edge_fail=down.on_edge_fail)
        idle = set(busy) | self.parked.pop(e, set())  # devices to restart (others are offline: device_back)
        moved: set[int] = set()
        if down.on_edge_fail == "reattach":
            live = [x for x in self.leaders if x not in self.down]
            plan = reattach_plan(env, sorted(self.group[e]), live)
            for dst, ds in plan.items():
                for d in ds:
                    self.leader_of[d] = dst
                self.group[dst] |= set(ds)
                self.group[e] -= set(ds)
                moved |= set(ds)
            record_moves(env, e, plan, "edge_fail")
        for d in sorted(idle):
            if self.leader_of[d] != e or d in moved:
                if not env.stopping:
                    self._send(d)
            else:
                self.parked.setdefault(e, set()).add(d)

    def on_edge_up(self, event: Event) -> None:
        """A leader is back, empty: it asks the cloud for the global model (when the cloud is reachable)."""
        e = event.payload.server[1]
        self.down.discard(e)
        self.recovering.add(e)
        if self.env.live.server_up(CLOUD) and not self.env.stopping:
            self._send_recovery(e)

    def _send_recovery(self, e: int) -> None:
        self.recovery_sent.add(e)
        self._send_global(e)

    def _recovered(self, e: int, w: Any, g: int) -> None:
        """A recovered leader has the global model: it restarts from it, its ticks resume, its devices return."""
        env = self.env
        self.recovering.discard(e)
        self.recovery_sent.discard(e)
        self.model[e] = self.last[e] = w
        self.cloud_version_of[e] = g
        if env.stopping:
            return
        self.ticks[e] = env.schedule(self.leader_period[e], "leader_tick", LeaderTick(e), Priority.CONTROL)
        plan: dict[int, list[int]] = {}
        for d in self.members[e]:
            src = self.leader_of[int(d)]
            if src != e:
                plan.setdefault(src, []).append(int(d))
        for src, ds in sorted(plan.items()):
            for d in ds:
                self.leader_of[d] = e  # a device busy at src switches after its update arrives there
            self.group[src] -= set(ds)
            self.group[e] |= set(ds)
            for d in ds:
                if d in self.parked.get(src, set()):  # waiting for a leader that is away: come home now
                    self.parked[src].discard(d)
                    self.parked.setdefault(e, set()).add(d)
            record_moves(env, src, {e: ds}, "edge_back")
        for d in sorted(self.parked.pop(e, set())):
            self._send(d)

    def on_cloud_down(self, event: Event) -> None:
        """The cloud is unreachable: pushes on their way up are lost, models on their way down too; the leaders
        keep aggregating their queues, and their progress accumulates until the cloud is back."""
        env, down = self.env, event.payload
        updates = count_lost(down.lost, ("leader_upload_done",))
        for kind, msg in down.lost:
            if kind == "leader_upload_done":
                self.pushes.pop(msg.push, None)
            elif kind == "leader_download_done":
                self.sent.pop((msg.edge, msg.version), None)
                self.recovery_sent.discard(msg.edge)
        record_loss(env, CLOUD, updates, 0.0, version=self.cloud_version)

    def on_cloud_up(self, event: Event) -> None:
        """The cloud is back: every live leader pushes its progress since its last push, leaders that missed a
        global model get the current one, and recovered leaders get theirs."""
        env = self.env
        if env.stopping:
            return
        for e in self.leaders:
            if e in self.down:
                continue
            if e in self.recovering:
                if e not in self.recovery_sent:
                    self._send_recovery(e)
                continue
            if self.model[e] is not self.last[e]:
                self._push(e)
            if self.cloud_version_of[e] != self.cloud_version and (e, self.cloud_version) not in self.sent:
                self._send_global(e)

    def queue_lengths(self) -> dict[str, int]:
        """Updates waiting in the leader queues (summed) and in the cloud queue."""
        return {"edge": sum(len(q) for q in self.queue.values()), "cloud": len(self.cloud_queue)}
