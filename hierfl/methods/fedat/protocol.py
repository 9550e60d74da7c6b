"""FedAT: synchronous tiers, asynchronous across tiers, cross-tier weights that favour slow tiers.

Z. Chai, Y. Chen, A. Anwar, L. Zhao, Y. Cheng, H. Rangwala, "FedAT: A High-Performance and
Communication-Efficient Federated Learning System with Asynchronous Tiers", SC 2021
(arXiv 2010.05958). What is verified and what is ours ([V]: the abstract and a summary of the
paper's method section; [V3]: two third-party re-implementations agree; [K]: the paper as
remembered, not re-checked; [D]: our choice, a knob where it matters):

* a tiering module profiles each client's response latency and splits the clients into ``M``
  tiers, tier 1 the fastest, tier M the slowest [V]. We profile the uncontended time of one
  job — download + local training + upload — from the drawn device profile, and split it into
  equal-size tiers (``tiering: quantile``, TiFL-style) or by 1-D k-means (``kmeans``) [D];
* every tier trains synchronously, FedAvg-style: a round samples clients of the tier at random,
  each trains from the current global model, and the tier model is their sample-weighted
  average [V]; ``fraction`` of the tier per round is [D] (``sampling: bernoulli``: each online member's own coin, an empty tier round passing at once, :mod:`hierfl.protocols.cohort`);
* tiers run asynchronously to each other: a fast tier does not wait for a slow one [V];
* the server keeps one model per tier and, whenever a tier model changes, forms the global
  model as ``w = Σ_m (T_{M+1−m} / T) · w_tier_m``, where ``T_m`` counts tier m's updates so far
  and ``T = Σ T_m`` — tier m is weighted by the update count of its mirror tier, so the slowest
  tier gets the fastest tier's (largest) count [V; V3: the same weights in two re-implementations].
  Until a tier has reported, its model is the initial model [V3]; with the paper's weights the
  global model therefore stays close to the initial one until the slow tiers report.
  ``weighting: uniform`` (every tier 1/M) is an ablation [D];
* the new global model goes back to the tier that just reported, whose next round starts [V];
* local training adds the constraint term ``(λ/2)‖w − w_global‖²`` [K]; ``lam`` (λ) defaults
  to 0 [D, value not verified];
* the paper compresses up- and downlinks with a polyline-encoding-based lossy codec [V]; hierfl ships
  it as a transfer channel, not a protocol knob (``compression`` allows only ``none``): ``channels:
  {device_uplink: {name: polyline, exact_bytes: true}}`` (scenarios/fedat_polyline.yaml). Downloads
  carry the float32 model (a measured length cannot be charged on a download, which is coded when it
  arrives), so only the upload half of FedAT's savings is reproduced.

Timing: a tier round lasts ``max over its selected devices of (download + compute + upload)``
(straggler policies of ``straggler:`` apply inside a tier); server aggregation is instantaneous.

Re-tiering (``recluster:``, :mod:`hierfl.protocols.regroup`; beyond the paper, whose tiering module
re-profiles periodically): the groups are the tiers, formed again by the same ``tiering`` from each
device's response time *now* (slowdowns, link changes). A tier round's duration feeds the
``adaptive`` trigger and each tier model applied the ``periodic`` one; the decision is taken when a
tier's round closes. A moved device's round in flight in its old tier finishes there or is withdrawn
(``migration.in_flight``); its migration transfer is the global model from the cloud [D].
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.core.capacity import capacity_classes
from hierfl.core.recluster import moved_devices
from hierfl.kernel.engine import Event, Priority
from hierfl.env import ClustersRecord, Env, Payload, RoundEmpty
from hierfl.policies.recluster import NeverRecluster, RECLUSTER
from hierfl.protocols.base import AggregationPoint, DeviceMsg, PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.regroup import Regrouping
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_cohort, coin_problems, empty_cohort_field, sampling_field
from hierfl.protocols.straggler import Barrier, planned_spec

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["FedATConfig", "FedAT", "TierMsg", "cross_tier_weights"]


def cross_tier_weights(counts: list[int] | np.ndarray, weighting: str = "reversed") -> list[float]:
    """FedAT's cross-tier weights: tier ``m`` (0 = fastest) gets ``counts[M−1−m] / Σ counts``.

    ``uniform``: ``1/M`` each. Raises on zero total updates (no tier has reported: nothing to weigh).
    """
    c = [int(x) for x in counts]
    if not c or any(x < 0 for x in c):
        raise ValueError(f"need one non-negative update count per tier, got {c}")
    if weighting == "uniform":
        return [1.0 / len(c)] * len(c)
    if weighting != "reversed":
        raise ValueError(f"weighting must be 'reversed' or 'uniform', not {weighting!r}")
    total = sum(c)
    if total == 0:
        raise ValueError("no tier has an update yet: the cross-tier weights are undefined")
    return [c[len(c) - 1 - m] / total for m in range(len(c))]


@dataclass(frozen=True)
class TierMsg(DeviceMsg):
    """A device's download, job or upload in round ``round`` of tier ``tier``."""

    tier: int
    round: int


@dataclass(frozen=True)
class TierRetry(Payload):
    """Try to begin tier ``tier``'s next round again (all its devices were offline)."""

    tier: int


@dataclass
class Tier:
    """One tier's state: its devices, update count ``T_m``, model and the round in flight."""

    members: list[int]
    count: int = 0
    model: Any = None                  # the tier model (None: not reported yet — the initial model)
    round: int = -1
    barrier: Barrier | None = None
    start_model: Any = None
    start_version: int = 0
    models: dict[int, Any] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        """Whether a round is in flight."""
        return self.barrier is not None and not self.barrier.closed


@PROTOCOLS.register
class FedATConfig(ProtocolConfig):
    """``protocol: {name: fedat, tiers: 3, tiering: quantile, fraction: 0.1, weighting: reversed, lam: 0}``."""

    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud within a tier", synchronous=True),
        AggregationPoint("straggler.cloud", "tier→cloud", synchronous=False, participants="tiers",
                         note="tiers report to the cloud asynchronously: a fast tier never waits for a slow one"))

    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink")  # base helpers
    name: Literal["fedat"] = "fedat"
    tiers: int = Field(default=3, ge=1, description="M: number of tiers by response time, 1..devices.count [D]")
    tiering: Literal["quantile", "kmeans"] = Field(
        default="quantile", description="equal-size tiers by profiled response time, or 1-D k-means on its log [D]")
    fraction: float = Field(default=0.1, gt=0.0, le=1.0,
                            description="fraction of a tier's devices sampled per tier round (at least 1) [D]")
    sampling: SamplingKind = sampling_field("max(⌈fraction·|tier|⌉, 1) of the tier's online devices, uniformly "
                                            "without replacement", "online device of the tier")
    empty_cohort: EmptyCohort = empty_cohort_field("skip", "the tier round passes with no update, T_m unchanged, "
                                                           "and the tier's next round begins at once")
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    weighting: Literal["reversed", "uniform"] = Field(
        default="reversed", description="cross-tier weights: tier m gets T_{M+1-m}/T (paper) or 1/M (ablation)")
    lam: float = Field(default=0.0, ge=0.0, description="λ of the local constraint term (λ/2)‖w − w_global‖² [K/D]")
    compression: Literal["none"] = Field(
        default="none", description="the paper's polyline compression is a transfer channel, not this key: "
                                    "channels.device_uplink: {name: polyline, exact_bytes: true}")
    recluster: RECLUSTER.union() = Field(  # type: ignore[valid-type]
        default=NeverRecluster(),
        description="when the tiers are formed again from the response times now (never, periodic, adaptive, "
                    "on_event); decided when a tier round closes")

    def check(self, scenario: Scenario) -> list[Problem]:
        """M within 1..N; devices talk to the cloud directly, so no edge servers."""
        problems = []
        n = scenario.devices.count
        if self.tiers > n:
            problems.append(Problem("protocol.tiers", f"more tiers than devices; allowed: 1..{n}", self.tiers))
        if scenario.topology.edge_servers:
            problems.append(Problem("topology.edge_servers",
                                    "fedat's devices talk to the cloud directly; allowed: 0",
                                    scenario.topology.edge_servers))
        if self.recluster.grouping is not None:
            problems.append(Problem("protocol.recluster.grouping", "fedat's groups are its tiers, formed by its "
                                    "tiering from response times; allowed: null", self.recluster.grouping))
        per_tier = max(math.ceil(self.fraction * n / max(min(self.tiers, n), 1) - 1e-9), 1)
        return problems + coin_problems(self, scenario, per_tier)

    def create(self, env: Env) -> FedAT:
        """A FedAT run."""
        return FedAT(self, env)


class FedAT(Protocol):
    """Tiers of similar response time run FedAvg rounds side by side; the cloud mixes the tier models."""

    def __init__(self, cfg: FedATConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        world = env.world
        self.spec = replace(env.spec, prox=cfg.lam) if cfg.lam > 0 else env.spec
        n = world.num_devices
        # profiled response time of one job (no contention, no slowdown): what the tiering module measures
        self.response_s = np.array([world.download_s(i) + world.compute_s(i, self.spec) + world.upload_s(i)
                                    for i in range(n)], dtype=np.float64)
        labels = capacity_classes(self.response_s, cfg.tiers, cfg.tiering)
        self.tiers = [Tier(members=[int(d) for d in np.flatnonzero(labels == m)]) for m in range(cfg.tiers)]
        self.tier_of = labels.astype(np.int64)
        self.version = 0            # global model updates so far
        self.seq = 0                # barrier ids, unique across tiers (the deadline event names one)
        self.initial: Any = None
        env.tier("cloud").track_staleness()
        self.regroup = Regrouping(cfg.recluster, env, list(range(cfg.tiers)), fallback="fedat_tiers",
                                  own=self._retier, server=("cloud", 0), label="tier")
        self.held: set[int] = set()  # tiers whose online members were all still in another tier's round

    def _retier(self) -> np.ndarray:
        """The tiers again, from each device's response time now (slowdowns, links as they are)."""
        env = self.env
        world = env.world
        self.response_s = np.array([world.download_s(i) for i in range(world.num_devices)], dtype=np.float64) + \
            np.asarray(env.live.current_compute_s(self.spec), dtype=np.float64) + \
            np.asarray(env.live.current_upload_s(), dtype=np.float64)
        return capacity_classes(self.response_s, self.cfg.tiers, self.cfg.tiering).astype(np.int64)

    def clusters_record(self) -> ClustersRecord:
        """The tiers (fastest first) and their devices' profiled response times."""
        return ClustersRecord(0.0, "initial", "fedat_tiers", [list(t.members) for t in self.tiers],
                              ["cloud"] * len(self.tiers), head={"tiering": self.cfg.tiering},
                              tail={"response_s": [[float(self.response_s[d]) for d in t.members]
                                                   for t in self.tiers]})

    def start(self) -> None:
        """Every tier begins its first round at t = 0 (fastest tier first)."""
        self.initial = self.env.global_model
        for m in range(len(self.tiers)):
            self._begin_round(m)

    def per_round(self, tier: int) -> int:
        """Devices a round of ``tier`` wants: ``max(⌈fraction·|tier|⌉, 1)``."""
        size = len(self.tiers[tier].members)
        return min(size, max(math.ceil(self.cfg.fraction * size - 1e-9), 1))

    def _begin_round(self, m: int) -> None:
        env, t = self.env, self.tiers[m]
        pool = env.live.available(t.members)
        if pool and self.regroup.generation:  # after a re-tiering: a device still in its old tier's round waits
            busy = self._busy_elsewhere(m)
            pool = [d for d in pool if d not in busy]
            if not pool:  # every online member is finishing elsewhere: that round's close begins this one
                t.barrier = None
                self.held.add(m)
                return
        if not pool:  # the whole tier is offline: try again when one of it is back
            when = env.live.next_up(t.members)
            if math.isfinite(when):
                env.at(when, "tier_retry", TierRetry(m), Priority.CONTROL)
            t.barrier = None
            return
        policy = env.straggler
        t.round += 1
        if self.cfg.sampling == "bernoulli":  # each online member's own coin (check: the policy selects no extra)
            selected = coin_cohort(env, ("fedat.select", m, t.round), np.asarray(pool, dtype=np.int64),
                                   self.cfg.fraction, self.cfg.empty_cohort)
            if not selected:  # nobody's coin came up (empty_cohort: skip): the tier's next round begins at once
                env.telemetry.record(RoundEmpty({"tier": m, "round": t.round, "sampling": "bernoulli"}))
                t.barrier = None
                env.at(env.now, "tier_retry", TierRetry(m), Priority.CONTROL)
                return
            wanted = len(selected)
        else:
            wanted = min(self.per_round(m), len(pool))
            k = min(policy.select_count(wanted), len(pool))
            rng = env.rng("fedat.select", m, t.round)
            selected = sorted(int(i) for i in rng.choice(np.asarray(pool, dtype=np.int64), size=k, replace=False))
        t.models = {}
        t.start_model, t.start_version = env.global_model, self.version
        self.seq += 1
        t.barrier = Barrier(self, policy, ("cloud", 0), self.seq, selected, wanted,
                            functools.partial(self._close, m), info={"tier": m, "tier_round": t.round})
        for device in selected:
            self.send_model(device, "device_cloud", TierMsg(device, m, t.round))

    def _busy_elsewhere(self, m: int) -> set[int]:
        """Devices another tier's open round still waits for (moved here by a re-tiering, their old round
        in flight): a device runs one job at a time."""
        busy: set[int] = set()
        for x, t in enumerate(self.tiers):
            if x != m and t.open and t.barrier is not None:
                busy |= t.barrier.waiting
        return busy

    def _current(self, msg: TierMsg) -> Tier | None:
        t = self.tiers[msg.tier]
        return t if t.open and t.round == msg.round else None

    def on_tier_retry(self, event: Event) -> None:
        """A device of an idle tier (all were offline) may be back."""
        t = self.tiers[event.payload.tier]
        if not self.env.stopping and not t.open:
            self._begin_round(event.payload.tier)

    def on_train_start(self, event: Event) -> None:
        """The device has the global model: train (fewer steps under a partial-work deadline)."""
        t = self._current(event.payload)
        if t is None:
            return
        assert t.barrier is not None
        spec = planned_spec(self, event.payload.device, t.barrier, self.spec)
        if spec is not None:
            self.start_job(event, t.start_model, spec)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and upload it to the cloud."""
        self.collect_and_upload(event, "device_cloud")

    def on_upload_done(self, event: Event) -> None:
        """A device model reached the cloud: keep it for its tier's average; the barrier decides the close."""
        device = event.payload.device
        job = self.jobs.pop(device, None)
        t = self._current(event.payload)
        if t is None or job is None:
            return
        assert t.barrier is not None
        t.models[device] = job.params
        t.barrier.arrive(device)

    def on_device_lost(self, event: Event) -> None:
        """A selected device dropped out: its tier's round no longer waits for it (the tier of the round it was in:
        after a re-tiering that may be its old one)."""
        origin = event.payload.origin
        m = origin.tier if isinstance(origin, TierMsg) else int(self.tier_of[event.payload.device])
        t = self.tiers[m]
        if t.open:
            assert t.barrier is not None
            t.barrier.drop(event.payload.device)

    def on_round_deadline(self, event: Event) -> None:
        """The straggler deadline of one tier's round."""
        for t in self.tiers:
            if t.open and t.barrier is not None and t.barrier.round == event.payload.round:
                t.barrier.on_deadline()
                return

    def tier_weights(self) -> list[float]:
        """The cross-tier weights now (see :func:`cross_tier_weights`)."""
        return cross_tier_weights([t.count for t in self.tiers], self.cfg.weighting)

    def _close(self, m: int, arrived: list[int]) -> None:
        """Tier ``m``'s round closed: its model is the sample-weighted average; the global model is re-mixed."""
        env, t = self.env, self.tiers[m]
        if not arrived:
            env.telemetry.record(RoundEmpty({"tier": m, "round": t.round}))
        else:
            samples = env.world.samples
            assert t.barrier is not None
            weights_n = [t.barrier.weight(d, float(samples[d])) for d in arrived]  # partial work may weigh less
            t.model = env.tier("edge", m).average([t.models[d] for d in arrived], weights_n)
            t.models = {}
            t.count += 1
            weights = self.tier_weights()
            env.tier("edge", m).aggregated(arrived, {"tier": m, "participants": list(arrived)},
                                           {"tier": m, "round": t.round, "ids": list(arrived),
                                            "tier_weights": weights, "tier_updates": [x.count for x in self.tiers]},
                                           lane=("cloud", 0))
            terms = [(w, x.model if x.model is not None else self.initial, None)
                     for w, x in zip(weights, self.tiers) if w > 0]
            cloud = env.tier("cloud")
            env.set_global(cloud.combine(terms))
            tau = self.version - t.start_version
            self.version += 1
            cloud.applied([m], [weights[m]], [tau], self.version, 1, source="edge")
            assert t.barrier is not None
            self.regroup.round_closed(m, env.now - t.barrier.started)
            self.regroup.applied(m)
        if not env.stopping:
            if self.regroup.due():
                self._regroup()
            self._begin_round(m)
            for x in sorted(self.held - {m}):  # tiers that waited for devices finishing a round can begin now
                self.held.discard(x)
                self._begin_round(x)

    def _regroup(self) -> None:
        """Form the tiers again; a moved device's round in flight finishes in its old tier or is withdrawn; a tier
        that was idle (it had no device) and has some now begins a round."""
        old = self.tier_of.copy()
        new = self.regroup.plan(old)
        moves = moved_devices(old, new)
        withdrawn = []
        if self.regroup.cfg.migration.in_flight == "abort":
            for d, (src, _) in moves.items():
                t = self.tiers[src]
                if t.open and t.barrier is not None and d in t.barrier.waiting:
                    self.abandon(d)  # before the migration transfer, which abandoning would cancel
                    withdrawn.append((d, t))
        self.regroup.migrate(old, new)
        self.tier_of = new
        for m, t in enumerate(self.tiers):
            t.members = [int(d) for d in np.flatnonzero(new == m)]
        for d, t in withdrawn:
            if t.barrier is not None:
                t.barrier.drop(d)  # may close that tier's round (and begin its next)
