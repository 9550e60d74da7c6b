"""HierFAVG: client–edge–cloud hierarchical federated averaging.

Liu, Zhang, Song, Letaief, "Client-Edge-Cloud Hierarchical Federated Learning", ICC 2020
(arXiv 1905.06641); reference code LuminLiu/HierFL. docs/explanation/algorithms.md §5.2: every device of an
edge runs ``κ1`` local SGD steps from the edge model; the edge waits for all its (sampled)
devices and averages them weighted by samples; after every ``κ2`` edge aggregations each
edge sends its model to the cloud, which waits for all edges and averages them weighted by
``n_ℓ`` (the data of all the edge's devices), then broadcasts the result to every edge.

With ``fraction < 1`` an edge samples ``max(⌊frac·|C_ℓ|⌋, 1)`` devices per edge round without
replacement with probability ∝ sample count (as the reference code does). With ``sampling: bernoulli``
each online member joins an edge round on its own coin of probability ``fraction``
(:mod:`hierfl.protocols.cohort`); an edge round with nobody (``empty_cohort: skip``) passes with the
edge model unchanged and counts towards the ``κ2`` edge rounds of the cloud round [D]. Training
``epochs``/``steps`` are ignored: the local budget is ``kappa1`` steps.

Re-grouping (``recluster:``, :mod:`hierfl.protocols.regroup`): an edge round's duration feeds the
``adaptive`` trigger and each edge model applied at the cloud the ``periodic`` one; the groups are
re-formed only between cloud rounds, when every edge is idle, so no work is in flight when a device
moves [D]. An edge left without devices sits out the cloud rounds until a re-grouping gives it some.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.kernel.engine import Event, Priority
from hierfl.env import Env, Payload, RoundEmpty
from hierfl.faults.protocol import CLOUD, count_lost, reattach_plan, record_loss, record_moves
from hierfl.policies.recluster import NeverRecluster, RECLUSTER
from hierfl.protocols.base import AggregationPoint, DeviceMsg, PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_cohort, coin_problems, empty_cohort_field, sampling_field
from hierfl.protocols.regroup import Regrouping
from hierfl.protocols.straggler import Barrier, GUARD_S, planned_spec

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["HierFAVGConfig", "HierFAVG", "EdgeMsg"]


@dataclass(frozen=True)
class EdgeMsg(DeviceMsg):
    """A device's model download from / upload to its edge server."""

    edge: int


@dataclass(frozen=True)
class EdgeEvent(Payload):
    """An edge server's own event: retry a round, its model to / from the cloud."""

    edge: int


@dataclass(frozen=True)
class EdgeUpload(Payload):
    """An edge model on its way to the cloud for cloud round ``cloud_round``."""

    edge: int
    cloud_round: int


@PROTOCOLS.register
class HierFAVGConfig(ProtocolConfig):
    """``protocol: {name: hierfavg, kappa1: 60, kappa2: 1, fraction: 1.0}``."""

    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→edge", synchronous=True),
        AggregationPoint("straggler.cloud", "edge→cloud", synchronous=True, participants="edge servers",
                         selects=False))  # partial work: an edge runs the edge rounds that fit
    supports_infra_faults: ClassVar[bool] = True

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud", "edge")
    rule_tiers: ClassVar[tuple[str, ...]] = ("edge", "cloud")
    # the device tier through the base helpers; the edge tier here: an edge server's model to the cloud is coded
    # when it is sent (_upload), the global model to an edge server when it arrives (on_edge_download_done)
    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink", "edge_uplink", "edge_downlink")
    control_variates: ClassVar[bool] = True
    subprotocol_tiers: ClassVar[tuple[str, ...]] = ("edge", "cloud")
    # an edge round aggregates its own devices only (privacy.dp.tier: edge composes each device's edge releases)
    edge_cohort_sampling: ClassVar[str | None] = "members"

    name: Literal["hierfavg"] = "hierfavg"
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    kappa1: PositiveInt = Field(default=60, description="local SGD steps per edge aggregation")
    kappa2: PositiveInt = Field(default=1, description="edge aggregations per cloud aggregation")
    fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="fraction of an edge's devices per edge round")
    sampling: SamplingKind = sampling_field("max(⌊fraction·|members|⌋, 1) of the edge's online members without "
                                            "replacement, ∝ sample count, as the reference code",
                                            "online member of the edge")
    empty_cohort: EmptyCohort = empty_cohort_field("skip", "the edge round passes with the edge model unchanged "
                                                           "and counts towards kappa2")
    recluster: RECLUSTER.union() = Field(  # type: ignore[valid-type]
        default=NeverRecluster(),
        description="when and how the edge groups are re-formed (never, periodic, adaptive, on_event); applied "
                    "between cloud rounds")
    weighting: Literal["samples", "uniform"] = Field(
        default="samples", description="an edge averages its devices' models weighted by sample count (the paper's "
                                       "rule) or uniformly (FedDC's code rule needs it); the cloud always weights "
                                       "edges by their data")

    def check(self, scenario: Scenario) -> list[Problem]:
        """HierFAVG needs edge servers; its re-grouping has no work in flight to abort; with coins, no
        straggler policy that over-selects."""
        if (scenario.topology.edge_servers or 0) < 1:
            return [Problem("topology.edge_servers", "hierfavg needs at least 1 edge server", 0)]
        edge_round = self.expected_inputs(scenario.devices.count, scenario.topology.edge_servers)["edge"] or 1
        problems = coin_problems(self, scenario, edge_round)
        if self.recluster.migration.in_flight != "finish":
            problems.append(Problem("protocol.recluster.migration.in_flight", "hierfavg re-groups between cloud "
                                    "rounds, when no work is in flight; allowed: finish",
                                    self.recluster.migration.in_flight))
        return problems

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """The edge servers at the cloud, ``⌈C·⌊N/E⌋⌉`` devices at an edge."""
        if edges <= 0:
            return {"cloud": None, "edge": None}
        return {"cloud": edges, "edge": max(1, math.ceil(self.fraction * (devices // edges) - 1e-9))}

    def edge_expected(self, members: int) -> int | None:
        """``max(⌊C·|C_ℓ|⌋, 1)``: the devices an edge round of ``members`` samples (all of them when online)."""
        return max(math.floor(self.fraction * members + 1e-9), 1) if members > 0 else None

    def create(self, env: Env) -> HierFAVG:
        """A HierFAVG run."""
        return HierFAVG(self, env)


class HierFAVG(Protocol):
    """Synchronous edge rounds, synchronous cloud rounds every ``kappa2`` edge rounds."""

    def __init__(self, cfg: HierFAVGConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        base = env.spec
        self.spec = replace(base, epochs=None, steps=cfg.kappa1)  # keeps the trainer's fields
        world = env.world
        self.members = {e: world.edge_members(e) for e in range(world.num_edges)}
        self.edges = [e for e, m in self.members.items() if m.size > 0]  # empty edges take no part
        self.home = {e: self.members[e] for e in self.edges}  # the topology's members (members: where they are now)
        self.edge_weight = {e: float(world.edge_samples(e)) for e in self.edges}
        self.edge_model: dict[int, Any] = {e: env.global_model for e in self.edges}
        self.edge_start: dict[int, Any] = {}  # model each edge round started from (edge optimizer's base)
        self.control: Any = env.controls.control()      # SCAFFOLD: the cloud's c, relayed by the edges (None otherwise)
        # FedDC's edge-scoped control: each edge's own c_e, read when its round begins (empty otherwise)
        self.edge_control: dict[int, Any] = {}
        self.edge_round = {e: 0 for e in self.edges}
        self.selected: dict[int, list[int]] = {}
        self.barrier: dict[int, Barrier] = {}
        self.cloud_round = 0
        self.cloud_barrier: Barrier | None = None
        self.uploading: dict[int, int] = {}       # edge → its in-flight transfer to the cloud
        self.sent: dict[int, Any] = {}            # edge → its model as the cloud receives it (channels.edge_uplink)
        self.retry: dict[int, Event] = {}          # edge → pending edge_retry (no member online)
        # edge-server and cloud faults (the edge_fail and cloud_fail event kinds)
        self.attached = world.edge_of.copy()      # device → the edge server it works with now
        self.down: set[int] = set()                # edge servers down now
        self.rejoin: set[int] = set()              # back up, waiting for the next cloud broadcast
        self.owed: set[int] = set()                # must push to the cloud at their next edge round's close
        self.hungry: set[int] = set()              # lost the global model on its way: sent again when the cloud is back
        self.broadcast_owed = False                # a cloud round closed while the cloud was unreachable
        # re-grouping (recluster:): edge round start times feed its adaptive trigger
        self.regroup = Regrouping(cfg.recluster, env, self.edges)
        self.round_began: dict[int, float] = {}
        self.benched: set[int] = set()             # edges a re-grouping left without devices
        # sub-protocols before an aggregation (subprotocol.edge / .cloud): the round's updates in arrival order,
        # added once it has said whose inputs survive (None: none at that tier); the token of each edge's
        # running one (a result for another token is stale: the edge failed or was abandoned meanwhile)
        self.edge_held: dict[int, list[tuple[int, Any, float, float | None]]] | None = None
        self.cloud_held: list[tuple[int, Any, float, float | None]] | None = None
        self.sub_token: dict[int, int] = {}
        self.sub_next = 0

    def start(self) -> None:
        """Every edge starts its first round from the initial model at t = 0."""
        if self.edges and getattr(self.env.tier("edge", self.edges[0]), "subprotocol", None) is not None:
            self.edge_held = {e: [] for e in self.edges}
        if getattr(self.env.tier("cloud"), "subprotocol", None) is not None:
            self.cloud_held = []
        self._begin_cloud_round()
        for e in self.edges:
            self._begin_edge_round(e)

    def _sample(self, edge: int, pool: list[int], m: int, k: int) -> list[int]:
        """``k`` of the online members ``pool`` without replacement, ∝ samples (all when k ≥ |pool|)."""
        if k >= len(pool):
            return list(pool)
        rng = self.env.rng("hierfavg.select", edge, self.edge_round[edge])
        arr = np.asarray(pool, dtype=np.int64)
        n = self.env.world.samples[arr].astype(np.float64)
        chosen = rng.choice(arr, size=k, replace=False, p=n / n.sum())
        return sorted(int(i) for i in chosen)

    def _begin_edge_round(self, edge: int) -> None:
        env = self.env
        members = self.members[edge]
        pool = env.live.available(members)
        if not pool:  # nobody of this edge is online: try again when one comes back
            when = env.live.next_up(members)
            if math.isfinite(when):
                self.retry[edge] = env.at(when, "edge_retry", EdgeEvent(edge), Priority.CONTROL)
            return
        until = self._cloud_until(edge)
        if until is not None and until <= env.now:  # not even one edge round fits before the cloud's deadline
            if self.edge_round[edge] > self.cloud_round * self.cfg.kappa2:
                self._upload(edge)         # what it did this cycle
            else:
                assert self.cloud_barrier is not None  # (a cloud deadline exists)
                self.cloud_barrier.drop(edge)  # nothing to send: the cloud round stops waiting for it
            return
        policy = env.straggler
        if self.cfg.sampling == "bernoulli":  # each online member's own coin (check: the policy selects no extra)
            chosen = coin_cohort(env, ("hierfavg.select", edge, self.edge_round[edge]), np.asarray(pool, dtype=np.int64),
                                 self.cfg.fraction, self.cfg.empty_cohort)
            if not chosen:  # nobody's coin came up (empty_cohort: skip): the round passes, at once, with no update
                env.telemetry.record(RoundEmpty({"round": self.edge_round[edge], "edge": edge, "sampling": "bernoulli"}))
                self.edge_start[edge] = self.edge_model[edge]
                self.round_began[edge] = env.now
                self.retry[edge] = env.at(env.now, "edge_round_empty", EdgeEvent(edge), Priority.CONTROL)
                return
            m = len(chosen)
            self.selected[edge] = chosen
        else:
            want = self.cfg.edge_expected(int(members.size)) or 1
            m = min(want, len(pool))
            k = min(policy.select_count(m), len(pool))
            self.selected[edge] = self._sample(edge, pool, m, k)
        self.barrier[edge] = Barrier(self, policy, ("edge", edge), self.edge_round[edge], self.selected[edge], m,
                                     functools.partial(self._close_edge_round, edge), until=until)
        self.edge_start[edge] = self.edge_model[edge]
        self.round_began[edge] = env.now
        if env.controls.on and not env.controls.relays:
            self.edge_control[edge] = env.controls.control(edge)
        for device in self.selected[edge]:
            self.send_model(device, "device_edge", EdgeMsg(device, edge))

    def on_edge_retry(self, event: Event) -> None:
        """A member of an idle edge came back online."""
        edge = event.payload.edge
        self.retry.pop(edge, None)
        if not self.env.stopping:
            self._begin_edge_round(edge)

    def on_edge_round_empty(self, event: Event) -> None:
        """An edge round whose coins all came up tails is over (a pending retry, cancelled if the edge fails)."""
        edge = event.payload.edge
        self.retry.pop(edge, None)
        self._finish_edge_round(edge, [], started=self.env.now)

    def on_train_start(self, event: Event) -> None:
        """The device has its edge's model: start κ1 local steps (fewer under a partial-work deadline)."""
        edge = event.payload.edge
        spec = planned_spec(self, event.payload.device, self.barrier[edge], self.spec)
        if spec is not None:
            self.start_job(event, self.edge_model[edge], spec, self.edge_control.get(edge, self.control))

    def on_train_done(self, event: Event) -> None:
        """Collect the job and upload it to the edge."""
        self.collect_and_upload(event, "device_edge")

    def on_upload_done(self, event: Event) -> None:
        """An update reached its edge: fold it in; the edge's barrier decides when the round closes."""
        env = self.env
        device, edge = event.payload.device, event.payload.edge
        barrier = self.barrier[edge]
        # partial work may weigh less; FedDC's code rule averages uniformly (weighting: uniform)
        base = float(env.world.samples[device]) if self.cfg.weighting == "samples" else 1.0
        if self.edge_held is not None:  # it waits for the edge's sub-protocol
            self.edge_held.setdefault(edge, []).append((device, self.jobs.pop(device).params,
                                                        barrier.weight(device, base), env.controls.coef(device)))
        else:
            env.tier("edge", edge).add(self.jobs.pop(device).params, barrier.weight(device, base),
                                       env.controls.coef(device))
        barrier.arrive(device)

    def on_device_lost(self, event: Event) -> None:
        """A device went offline: its edge round no longer waits for it."""
        device = event.payload.device
        barrier = self.barrier.get(int(self.attached[device]))
        if barrier is not None and not barrier.closed:
            barrier.drop(device)

    def on_round_deadline(self, event: Event) -> None:
        """A straggler deadline: of an edge round, or of the cloud round."""
        kind, ident = event.payload.server
        if kind == "cloud":
            if self.cloud_barrier is not None and event.payload.round == self.cloud_round:
                self.cloud_barrier.on_deadline()
            return
        barrier = self.barrier.get(ident)
        if barrier is not None and barrier.round == event.payload.round:
            barrier.on_deadline()

    def _cloud_until(self, edge: int) -> float | None:
        """Under partial work at the cloud round (``straggler.cloud: {name: deadline, partial: true}``):
        when ``edge``'s rounds must be over so that its model, sent then, reaches the cloud by the
        deadline (an uncontended upload); None otherwise."""
        cb = self.cloud_barrier
        if cb is None or cb.closed or cb.plan_by is None:
            return None
        return cb.plan_by - self.env.world.edge_upload_s(edge) - GUARD_S

    def _close_edge_round(self, edge: int, arrived: list[int]) -> None:
        if arrived and self.edge_held is not None:  # the edge's sub-protocol runs first; its end commits
            self.sub_next += 1
            self.sub_token[edge] = self.sub_next
            self.env.tier("edge", edge).prepare(sorted(arrived), done="edge_subprotocol_done",
                                                payload=(edge, self.sub_next))
            return
        self._finish_edge_round(edge, arrived)

    def on_edge_subprotocol_done(self, event: Event) -> None:
        """An edge's sub-protocol is over: its survivors' updates are aggregated in arrival order (none when it
        failed: the edge model stays as it was); a stale result (the edge failed meanwhile) is ignored."""
        result = event.payload
        edge, token = result.payload
        if self.sub_token.get(edge) != token:
            return
        del self.sub_token[edge]
        assert self.edge_held is not None
        held, self.edge_held[edge] = self.edge_held.get(edge, []), []
        survivors = [] if result.failed else list(result.survivors)
        keep, point = set(survivors), self.env.tier("edge", edge)
        for device, params, weight, coef in held:
            if device in keep:
                point.add(params, weight, coef)
        self._finish_edge_round(edge, survivors)

    def _finish_edge_round(self, edge: int, arrived: list[int], started: float | None = None) -> None:
        env = self.env
        until = self._cloud_until(edge)
        began = self.barrier[edge].started if started is None else started
        # partial work at the cloud: an edge uploads early when another round as long as this one would
        # end after its cloud deadline [D] (that round's devices would plan partial steps to fit anyway)
        short = until is not None and env.now + (env.now - began) > until
        upload = (self.edge_round[edge] + 1) % self.cfg.kappa2 == 0 or edge in self.owed or short
        if upload and not env.live.server_up(CLOUD):  # the cloud is away: aggregate locally, push when it is back
            self.owed.add(edge)
            upload = False
        if arrived:
            # SCAFFOLD: the upload carries [edge model; Σ κ_i Δc_i of its devices since the last upload]
            self.edge_model[edge] = env.tier("edge", edge).commit(sorted(arrived), base=self.edge_start[edge],
                                                                  pack_control=upload and env.controls.relays)
        self.edge_round[edge] += 1
        self.regroup.round_closed(edge, env.now - self.round_began.get(edge, env.now))
        if upload:
            self._upload(edge)
        elif not env.stopping:
            self._begin_edge_round(edge)

    def _upload(self, edge: int) -> None:
        """``edge`` sends its model to the cloud; under partial work at the cloud, with the share of its κ2
        edge rounds it did this cycle (its weight there may scale with it: ``partial_weight``)."""
        env = self.env
        self.owed.discard(edge)
        done = self.edge_round[edge] - self.cloud_round * self.cfg.kappa2
        cb = self.cloud_barrier
        if cb is not None and cb.plan_by is not None and 0 <= done < self.cfg.kappa2:
            cb.work[edge] = done / self.cfg.kappa2
            env.telemetry.instant(("edge", edge), "partial_work", env.now, edge_rounds=done, of=self.cfg.kappa2,
                                  weight=cb.weight(edge, self.edge_weight[edge]))
        size = self._upload_size(edge)
        if size is None and self.edge_model[edge] is not None and getattr(env, "channels", None) is not None:
            # coded before it is sent (a channel that measures its bytes has its length known when they are charged)
            self.sent[edge] = env.tier("cloud").coded(("edge", edge), self.edge_model[edge])
        self.uploading[edge] = env.send(("edge", edge), ("cloud", 0), "edge_upload_done",
                                        EdgeUpload(edge, self.cloud_round), "upload", size=size)

    def _upload_size(self, edge: int) -> int | None:
        """Bytes of ``edge``'s upload to the cloud (None: one model); a variant that sends more overrides it."""
        return None

    # -- the cloud round -----------------------------------------------------------------------------
    def _live(self) -> list[int]:
        """The edge servers that are up (and have devices)."""
        out = [e for e in self.edges if e not in self.down] if self.down else list(self.edges)
        return [e for e in out if e not in self.benched] if self.benched else out

    def _begin_cloud_round(self) -> None:
        policy = self.env.cloud_straggler
        live = self._live()
        self.cloud_barrier = Barrier(self, policy, ("cloud", 0), self.cloud_round, live,
                                     len(live), self._close_cloud_round, abandon=self._abandon_edge)

    def _abandon_edge(self, edge: int) -> float:
        """The cloud round closed without ``edge``: withdraw its upload or its current edge round."""
        env = self.env
        if edge in self.uploading:
            env.cancel_transfer(self.uploading.pop(edge))
            self.sent.pop(edge, None)
        if edge in self.retry:
            env.cancel(self.retry.pop(edge))
        self.owed.discard(edge)
        self._forget_subprotocol(edge)
        wasted = 0.0
        barrier = self.barrier.get(edge)
        if barrier is not None and not barrier.closed:
            wasted = barrier.abort()
            if barrier.arrived:  # discard what the aborted round had folded in (nothing to discard: no-op)
                self._discard_edge(edge)
        return wasted

    def on_edge_upload_done(self, event: Event) -> None:
        """An edge model reached the cloud; the cloud barrier decides when the round closes."""
        env = self.env
        edge = event.payload.edge
        self.uploading.pop(edge, None)
        assert self.cloud_barrier is not None
        weight = self.cloud_barrier.weight(edge, self.edge_weight[edge])  # partial work may weigh less
        model = self.sent.pop(edge, self.edge_model[edge])  # as the edge uplink's channel delivers it
        if self.cloud_held is not None:  # it waits for the cloud's sub-protocol
            self.cloud_held.append((edge, model, weight, 1.0 if env.controls.relays else None))
        else:
            env.tier("cloud").add(model, weight, 1.0 if env.controls.relays else None)
        self.regroup.applied(edge)
        self.cloud_barrier.arrive(edge)

    def _close_cloud_round(self, arrived: list[int]) -> None:
        if arrived and self.cloud_held is not None:  # the cloud's sub-protocol with the edges runs first
            self.env.tier("cloud").prepare(sorted(arrived), done="cloud_subprotocol_done", payload=self.cloud_round,
                                           source="edge")
            return
        self._finish_cloud_round(arrived)

    def on_cloud_subprotocol_done(self, event: Event) -> None:
        """The cloud's sub-protocol with the edge servers is over: the surviving edges' models are aggregated
        in arrival order (none when it failed: the global model stays as it was)."""
        result = event.payload
        held, self.cloud_held = self.cloud_held or [], []
        survivors = [] if result.failed else list(result.survivors)
        keep, cloud = set(survivors), self.env.tier("cloud")
        for edge, model, weight, coef in held:
            if edge in keep:
                cloud.add(model, weight, coef)
        self._finish_cloud_round(survivors)

    def _finish_cloud_round(self, arrived: list[int]) -> None:
        env = self.env
        if arrived:
            env.set_global(env.tier("cloud").commit(sorted(arrived), base=env.global_model, source="edge"))
        self.cloud_round += 1
        if env.stopping:
            return
        self.control = env.controls.control()  # travels down with the global model
        self._next_cloud_round()

    def _next_cloud_round(self) -> None:
        """Every edge is idle now: recovered edges take their devices back, the next cloud round opens over
        the live edges and the global model goes down to them (once the cloud is reachable)."""
        self._return_devices()
        if not self.down and self.regroup.due():  # [D] a re-grouping waits until no edge server is down
            self._regroup()
        self.broadcast_owed = False  # this broadcast supersedes any owed one and any lost global model
        self.hungry.clear()
        if not self._live():  # every edge server is down: the cloud waits for one to come back
            self.cloud_barrier = None
            return
        self._begin_cloud_round()
        if not self.env.live.server_up(CLOUD):
            self.broadcast_owed = True
            return
        assert self.cloud_barrier is not None
        self._broadcast(list(self.cloud_barrier.selected))

    def _broadcast(self, edges: list[int]) -> None:
        for e in edges:
            self.env.send(("cloud", 0), ("edge", e), "edge_download_done", EdgeEvent(e), "download")

    def on_edge_download_done(self, event: Event) -> None:
        """The edge has the new global model: start its next cycle of κ2 edge rounds."""
        edge = event.payload.edge
        self.hungry.discard(edge)
        model = self.env.global_model
        if getattr(self.env, "channels", None) is not None:  # as the edge downlink's channel delivers it
            model = self.env.tier("edge", edge).coded(("cloud", 0), model)
        self.edge_model[edge] = model
        self.edge_round[edge] = self.cloud_round * self.cfg.kappa2
        if not self.env.stopping:
            self._begin_edge_round(edge)

    def _regroup(self) -> None:
        """Re-form the edge groups (every edge is idle): devices move with the migration the policy accounts;
        the new groups are also the ones recovered edge servers take back."""
        new = self.regroup.plan(self.attached)
        self.regroup.migrate(self.attached.copy(), new)
        for e in self.edges:
            self._set_members(e, np.flatnonzero(new == e))
        self.home = {e: self.members[e] for e in self.edges}
        self.benched = {e for e in self.edges if self.members[e].size == 0}

    def _discard_edge(self, edge: int) -> None:
        """Forget the updates an aborted edge round gathered (held for a sub-protocol, or folded in)."""
        if self.edge_held is not None:
            self.edge_held[edge] = []
        else:
            self.env.tier("edge", edge).discard()

    def _forget_subprotocol(self, edge: int) -> int:
        """``edge`` failed or the cloud round closed without it: the result of its running sub-protocol will be
        stale; returns how many held updates are lost with it."""
        if self.sub_token.pop(edge, None) is None or self.edge_held is None:
            return 0
        lost = len(self.edge_held.get(edge, []))
        self.edge_held[edge] = []
        return lost

    # -- edge-server and cloud faults ------------------------------------------------------------
    def _set_members(self, edge: int, devices: Any) -> None:
        self.members[edge] = np.asarray(sorted(int(d) for d in devices), dtype=np.int64)
        self.attached[self.members[edge]] = edge
        # the edge's weight at the cloud is the data it serves now
        self.edge_weight[edge] = float(self.env.world.samples[self.members[edge]].sum())

    def on_edge_down(self, event: Event) -> None:
        """An edge server failed: its round, the updates it held and its transfers are lost; the cloud round
        no longer waits for it; its devices re-attach to the nearest live edge server or wait for it."""
        env, down = self.env, event.payload
        edge = down.server[1]
        self.down.add(edge)
        self.rejoin.discard(edge)
        self.owed.discard(edge)
        self.hungry.discard(edge)
        self.uploading.pop(edge, None)
        self.sent.pop(edge, None)
        if edge in self.retry:
            env.cancel(self.retry.pop(edge))
        # device updates on their way to it and its model on its way to the cloud (and those held for its sub-protocol)
        updates = count_lost(down.lost, ("upload_done", "edge_upload_done")) + self._forget_subprotocol(edge)
        wasted = 0.0
        barrier = self.barrier.get(edge)
        if barrier is not None and not barrier.closed:
            updates += len(barrier.arrived)  # folded into its partial aggregation
            wasted = barrier.abort(stragglers=False)  # withdraws the jobs still training for it
            if barrier.arrived:
                self._discard_edge(edge)
        self.edge_model[edge] = None
        record_loss(env, ("edge", edge), updates, wasted, round=self.edge_round[edge], on_edge_fail=down.on_edge_fail)
        if down.on_edge_fail == "reattach":
            plan = reattach_plan(env, self.members[edge], self._live())
            for dst, ds in plan.items():
                self._set_members(dst, list(self.members[dst]) + ds)
            if plan:
                self.members[edge] = np.zeros(0, dtype=np.int64)
            record_moves(env, edge, plan, "edge_fail")
        cb = self.cloud_barrier
        if cb is not None and not cb.closed and edge in cb.waiting:
            cb.drop(edge)  # may close the cloud round with the edges that did arrive

    def on_edge_up(self, event: Event) -> None:
        """A failed edge server is back, empty: it rejoins (and takes its devices back) at the next cloud
        broadcast; if every edge had been down, that round starts now."""
        edge = event.payload.server[1]
        self.down.discard(edge)
        self.rejoin.add(edge)
        if self.cloud_barrier is None and self.env.live.server_up(CLOUD) and not self.env.stopping:
            self._next_cloud_round()

    def _return_devices(self) -> None:
        """Recovered edge servers take their own devices back (every edge is idle when this runs)."""
        for edge in sorted(self.rejoin):
            plan: dict[int, list[int]] = {}
            for d in self.home[edge]:
                cur = int(self.attached[d])
                if cur != edge:
                    plan.setdefault(cur, []).append(int(d))
            for src, ds in sorted(plan.items()):
                self._set_members(src, sorted(set(int(d) for d in self.members[src]) - set(ds)))
                record_moves(self.env, src, {edge: ds}, "edge_back")
            self._set_members(edge, set(int(d) for d in self.members[edge]) | set(int(d) for d in self.home[edge]))
        self.rejoin.clear()

    def on_cloud_down(self, event: Event) -> None:
        """The cloud is unreachable: edge models on their way up are lost (those edges keep aggregating and push
        when it is back); an edge whose new global model was cut waits for it to be sent again."""
        env, down = self.env, event.payload
        updates = 0
        for kind, msg in down.lost:
            if kind == "edge_upload_done":
                updates += 1
                self.uploading.pop(msg.edge, None)
                self.owed.add(msg.edge)
                if not env.stopping:
                    self._begin_edge_round(msg.edge)
            elif kind == "edge_download_done":
                self.hungry.add(msg.edge)
        record_loss(env, CLOUD, updates, 0.0, round=self.cloud_round)

    def on_cloud_up(self, event: Event) -> None:
        """The cloud is back: edges owing an upload push at their next edge round's close; a deferred
        broadcast (or a lost global model) goes down now."""
        if self.env.stopping:
            return
        if self.cloud_barrier is None:
            if self._live():
                self._next_cloud_round()
            return
        if self.broadcast_owed:  # to the edges of the round that opened meanwhile (not to edges back since)
            self.broadcast_owed = False
            self.hungry.clear()
            self._broadcast([e for e in self.cloud_barrier.selected if e not in self.down])
            return
        # only edges that lost the global model on its way are idle and waiting for it
        self._broadcast(sorted(e for e in self.hungry if e not in self.down))
