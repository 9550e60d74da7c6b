"""FedCH: balanced clusters by capacity, synchronous inside a cluster, asynchronous at the cloud.

Z. Wang, H. Xu, J. Liu, Y. Xu, H. Huang, Y. Zhao, "Accelerating Federated Learning with Cluster
Construction and Hierarchical Aggregation", IEEE TMC 22(7):3805–3822, 2023 (DOI
10.1109/TMC.2022.3147792); conference precursor INFOCOM 2021 (CFL/DCFL). ALGORITHMS.md §2:

* construction (§2.3, :mod:`hierfl.core.fedch_clusters`): K balanced clusters by a Hungarian
  device-by-slot assignment with leader (medoid) updates; leaders are devices, or the edge
  servers when the topology has them (then a balanced device → edge assignment);
  ``K: auto`` = K* of §2.4;
* a cluster round (§2.5): the leader holds the global model ``w`` it last received (version
  ``t_k``), sends it to its members, each member (the leader too [D]) runs ``H`` local steps and
  sends its model back; when all have arrived the leader averages them by sample count and
  uploads the cluster model to the cloud;
* the cloud applies each cluster model when it arrives (FIFO, ties → lower cluster id):
  ``τ = t − t_k``, ``α_τ = α`` if ``τ ≤ a`` else ``α·τ^(−b)``, ``w ← (1 − α_τ)w + α_τ w_k``,
  ``t += 1``, and sends ``(w, t)`` back to that cluster's leader, which starts its next round;
* re-clustering (DCFL, :mod:`hierfl.core.recluster`): ``never``, ``periodic``, ``adaptive``; at
  re-clustering time the devices' current speeds and links are measured, in-flight work of the
  old clusters is discarded [D], and every new cluster starts from the current ``w`` with
  ``t_k = t`` [D].

Device-leader clusters talk over device-to-device links (``World.d2d_s``) and the leader over its
own access link to the cloud; edge-leader clusters use the device ↔ edge and edge ↔ cloud links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import ConfigError, Problem
from hierfl.core import fedch_clusters as fc
from hierfl.core.engine import Event, Priority
from hierfl.core.recluster import RECLUSTER, AdaptiveRecluster, NeverRecluster
from hierfl.core.work import TrainSpec
from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig

if TYPE_CHECKING:
    from hierfl.config.schema import Scenario
    from hierfl.emulator import Context

__all__ = ["FedCHConfig", "FedCH", "KStarConfig", "SlowdownConfig"]


class KStarConfig(ConfigModel):
    """Constants of the §2.4 objective ``L(K)`` (emulator defaults [D]; time is the single resource)."""

    mu: PositiveFloat = Field(default=0.01, description="μ, strong-convexity constant [D]")
    q: PositiveFloat = Field(default=1.0, description="Q1 + Q2, gradient variance + second-moment bounds [D]")
    f0_gap: PositiveFloat | Literal["auto"] = Field(
        default="auto", description="F(w0) − F*; auto = the initial model's test loss [D]")
    budget_s: PositiveFloat | Literal["auto"] = Field(
        default="auto", description="time budget R in seconds; auto = stop.virtual_time_s [D]")


class SlowdownConfig(ConfigModel):
    """One injected slowdown: ``devices`` compute ``factor``× slower from ``at_s`` for ``for_s`` seconds."""

    at_s: float = Field(ge=0.0, description="virtual time the slowdown starts")
    devices: list[NonNegativeInt] = Field(min_length=1, description="device ids")
    factor: PositiveFloat = Field(description="compute-time multiplier (> 1 is slower)")
    for_s: PositiveFloat | None = Field(default=None, description="duration; null = until the end")


@PROTOCOLS.register
class FedCHConfig(ProtocolConfig):
    """``protocol: {name: fedch, K: auto, H: 10, lr: 0.01, a: 5, b: 1, recluster: {name: never}}``."""

    supports_churn: ClassVar[bool] = False  # device leaders and cluster barriers do not model dropouts yet
    name: Literal["fedch"] = "fedch"
    grouping: Literal["fedch"] = Field(default="fedch", description="FedCH's own cluster construction")
    construction: Literal["hungarian", "balanced_kmeans"] = Field(
        default="hungarian", description="journal Hungarian construction [B] or the conference balanced k-means [V]")
    K: int | Literal["auto"] = Field(default="auto", description="clusters, 1..N; auto = K* of §2.4")
    distance: Literal["abs_diff", "sum"] = Field(default="abs_diff", description="d(i, LN_k) of §2.3 [D]/[B]")
    max_iter: PositiveInt = Field(default=20, description="leader-update iterations at most [D]")
    H: PositiveInt = Field(default=10, description="local SGD steps per cluster round [V]")
    lr: PositiveFloat = Field(default=0.01, description="local learning rate η_l [V]")
    a: float = Field(default=5.0, ge=0.0, description="staleness tolerated at full weight [V]")
    b: float = Field(default=1.0, ge=0.0, le=100.0, description="staleness decay exponent [V]")
    alpha_init: Literal["one_minus", "fraction"] = Field(
        default="one_minus", description="α = 1 − (K−1)/N [V: conference], or the (K−1)/N reading")
    recluster: RECLUSTER.union() = NeverRecluster()  # type: ignore[valid-type]
    recompute_k: bool = Field(default=False, description="recompute K* at every re-clustering [D]")
    leader_trains: bool = Field(default=True, description="a device leader trains as a member too [D]")
    sync_timeout: PositiveFloat | None = Field(
        default=None, description="close a cluster round this long after it starts with what arrived [D]")
    kstar: KStarConfig = KStarConfig()
    slowdowns: list[SlowdownConfig] = Field(
        default_factory=list, description="injected compute slowdowns (stop-gap until scenario events exist)")

    @field_validator("K", mode="before")
    @classmethod
    def _k(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("must be 'auto' or an integer number of clusters in 1..devices.count")
        return value

    def check(self, scenario: Scenario) -> list[Problem]:
        """K within 1..N (= E with edge leaders), K: auto needs devices and a budget, K̃ ≤ K, slowdowns in range."""
        problems: list[Problem] = []
        n, e = scenario.devices.count, scenario.topology.edge_servers
        if self.K == "auto":
            if n < 3:
                problems.append(Problem("protocol.K", f"K: auto searches K in [1, ⌊(N+1)/2⌋] and needs at least "
                                        f"3 devices (got {n}); allowed here: an integer K in 1..{n}", self.K))
            elif not e and self.kstar.budget_s == "auto" and scenario.stop.virtual_time_s is None:
                problems.append(Problem("protocol.kstar.budget_s", "K: auto needs a time budget: set "
                                        "stop.virtual_time_s or protocol.kstar.budget_s (seconds > 0)"))
            if not e and self.lr * self.kstar.mu >= 1:
                problems.append(Problem("protocol.kstar.mu", f"the §2.4 bound needs lr·mu < 1; allowed: "
                                        f"0 < mu < {1 / self.lr:g}", self.kstar.mu))
        elif self.K > n:
            problems.append(Problem("protocol.K", f"more clusters than devices; allowed: 1..{n} or auto", self.K))
        k = e if e else (self.K if isinstance(self.K, int) else None)
        if e:
            if isinstance(self.K, int) and self.K != e:
                problems.append(Problem("protocol.K", f"with edge servers the leaders are the {e} edge servers; "
                                        f"allowed: {e} or auto", self.K))
            if self.construction != "hungarian":
                problems.append(Problem("protocol.construction", "with edge servers as fixed leaders the "
                                        "construction is a balanced assignment; allowed: hungarian",
                                        self.construction))
        if k is not None and k <= n:
            if isinstance(self.recluster, AdaptiveRecluster) and self.recluster.k_tilde > k:
                problems.append(Problem("protocol.recluster.k_tilde", f"more than the K = {k} clusters; "
                                        f"allowed: 1..{k}", self.recluster.k_tilde))
            if self.alpha_init == "fraction" and k == 1:
                problems.append(Problem("protocol.alpha_init", "fraction gives α = (K−1)/N = 0 with K = 1, so the "
                                        "cloud would never learn; allowed: one_minus, or K >= 2", self.alpha_init))
        stop_s = scenario.stop.virtual_time_s
        for i, s in enumerate(self.slowdowns):
            bad = [d for d in s.devices if d >= n]
            if bad:
                problems.append(Problem(f"protocol.slowdowns.{i}.devices", f"device ids are 0..{n - 1}", bad))
            if stop_s is not None and s.at_s >= stop_s:
                problems.append(Problem(f"protocol.slowdowns.{i}.at_s", f"after the end of the run; allowed: "
                                        f"0 <= at_s < stop.virtual_time_s = {stop_s:g}", s.at_s))
        return problems

    def create(self, ctx: Context) -> FedCH:
        """A FedCH run."""
        return FedCH(self, ctx)


@dataclass
class _Cluster:
    """One cluster of the current construction and its round in progress."""

    cid: int
    leader: int                  # a device id, or an edge id with edge leaders
    members: list[int]           # the devices that train in a round
    model: Any = None            # the global model the leader last received (round start)
    version: int = 0             # t_k: the global version of that model
    round: int = 0
    round_start: float = 0.0
    selected: list[int] = field(default_factory=list)
    arrived: list[tuple[int, Any]] = field(default_factory=list)
    open: bool = False
    timed_out: bool = False


@dataclass
class _Upload:
    """A cluster model on its way to (or waiting at) the cloud."""

    cid: int
    model: Any
    version: int
    flag: bool


class FedCH(Protocol):
    """Synchronous clusters, staleness-weighted asynchronous cloud, re-clustering policies."""

    def __init__(self, cfg: FedCHConfig, ctx: Context) -> None:
        super().__init__(ctx)
        self.cfg = cfg
        world = ctx.world
        self.n = world.num_devices
        self.edge_mode = world.num_edges > 0
        base = ctx.spec
        self.spec = TrainSpec(epochs=None, steps=cfg.H, batch_size=base.batch_size, lr=cfg.lr,
                              momentum=base.momentum, weight_decay=base.weight_decay)
        self._install_slowdowns()
        self.version = 0                  # t: applied global aggregations
        self.generation = 0               # constructions so far − 1; in-flight work carries it
        self.constructions = 0
        self._sent: dict[int, tuple[Any, int]] = {}                   # cid → (model, version) on its way down
        self._uploads: dict[tuple[int, int, int, int], Any] = {}      # (gen, cid, round, device) → member model
        self._cluster_up: dict[tuple[int, int, int], _Upload] = {}    # (gen, cid, round) → cluster model
        self._pending: list[_Upload] = []                             # arrived at the cloud this instant
        self.k, self.k_choice = self._choose_k()
        self.alpha = fc.alpha_base(self.k, self.n, cfg.alpha_init)
        if self.alpha <= 0:
            raise ConfigError([Problem("protocol.alpha_init", f"fraction gives α = (K−1)/N = 0 with K = {self.k}; "
                                       "allowed: one_minus, or K >= 2", cfg.alpha_init)])
        if isinstance(cfg.recluster, AdaptiveRecluster) and cfg.recluster.k_tilde > self.k:
            raise ConfigError([Problem("protocol.recluster.k_tilde", f"more than the K = {self.k} clusters "
                                       f"chosen; allowed: 1..{self.k}", cfg.recluster.k_tilde)])
        self.policy = cfg.recluster.make(self.k, self.n)
        self.clusters: list[_Cluster] = []
        self._initial = self._construct("initial", {})

    # -- the world as it is now ---------------------------------------------------------------
    def _install_slowdowns(self) -> None:
        """Injected slowdowns scale the world's compute times while they last (``protocol.slowdowns``)."""
        if not self.cfg.slowdowns:
            return
        ctx, world = self.ctx, self.ctx.world
        base = world.compute_s
        windows = [(s.at_s, s.at_s + (s.for_s if s.for_s is not None else float("inf")), set(s.devices), s.factor)
                   for s in self.cfg.slowdowns]

        def compute_s(device: int, spec: TrainSpec) -> float:
            factor = 1.0
            for start, end, devices, f in windows:
                if device in devices and start <= ctx.now < end:
                    factor *= f
            return base(device, spec) * factor

        world.compute_s = compute_s  # type: ignore[method-assign]
        for i, (start, end, devices, f) in enumerate(windows):
            for d in sorted(devices):  # instants, not spans: a span would hide the device's training spans
                ctx.recorder.instant(("device", d), "slowdown", start, factor=f, event=i,
                                     until=end if np.isfinite(end) else None)
                if np.isfinite(end):
                    ctx.recorder.instant(("device", d), "slowdown_end", end, event=i)

    def _measure(self) -> dict[str, np.ndarray]:
        """Compute and communication times of the world now (what devices report at (re-)clustering)."""
        ctx, world = self.ctx, self.ctx.world
        compute = ctx.current_compute_s(self.spec)
        up = ctx.current_upload_s()
        out = {"compute": compute, "cloud": up}
        if self.edge_mode:
            # device i → edge e: its current upload time, re-based from its present edge's latency to e's
            own = world.edge_latency_ms[np.arange(self.n), world.edge_of]
            out["edge"] = up[:, None] + (world.edge_latency_ms - own[:, None]) / 1000.0
        else:
            out["d2d"] = np.array([[0.0 if i == j else world.d2d_s(i, j) for j in range(self.n)]
                                   for i in range(self.n)])
        return out

    def _choose_k(self) -> tuple[int, dict[str, Any]]:
        cfg, world = self.cfg, self.ctx.world
        if self.edge_mode:
            return world.num_edges, {"rule": "edge_servers", "K": world.num_edges}
        if cfg.K != "auto":
            return int(cfg.K), {"rule": "fixed", "K": int(cfg.K)}
        m = self._measure()
        ks = cfg.kstar
        budget = float(ks.budget_s if ks.budget_s != "auto" else self.ctx.scenario.stop.virtual_time_s or 0.0)
        f0 = float(ks.f0_gap) if ks.f0_gap != "auto" else float(self.ctx.executor.evaluate(self.ctx.global_model)[1])
        params = {"budget_s": budget, "compute_s": float(np.median(m["compute"])),
                  "comm_s": float(np.median(m["cloud"])), "lr": cfg.lr, "mu": ks.mu, "q": ks.q,
                  "f0_gap": f0, "local_steps": cfg.H, "rule": cfg.alpha_init}
        k, values = fc.choose_k(self.n, **params)  # type: ignore[arg-type]
        inputs = {("alpha_init" if key == "rule" else key): v for key, v in params.items()}
        return k, {"rule": "auto", "K": k, "objective": {str(key): v for key, v in values.items()}, **inputs}

    # -- construction ---------------------------------------------------------------------------
    def _construct(self, reason: str, trigger: dict[str, Any]) -> dict[str, Any]:
        """Build clusters from the world as it is now; returns (and, after the first, writes) the record."""
        cfg, ctx = self.cfg, self.ctx
        if reason != "initial" and cfg.recompute_k and not self.edge_mode and cfg.K == "auto":
            self.k, self.k_choice = self._choose_k()
            self.alpha = fc.alpha_base(self.k, self.n, cfg.alpha_init)
            self.policy = cfg.recluster.make(self.k, self.n)
        m = self._measure()
        if self.edge_mode:
            res = fc.assign_to_edges(fc.edge_distance(m["compute"], m["edge"]))
            ctx.world.edge_of = res.cluster_of.astype(np.int64)  # the devices re-associate with their edges
            if reason == "initial":
                ctx.recorder.write_devices(ctx.world)  # devices.csv shows FedCH's assignment, not the topology's
        elif cfg.construction == "hungarian":
            seeds = fc.initial_leaders(m["compute"], m["cloud"], self.k)
            res = fc.construct_hungarian(fc.leader_distance(m["compute"], m["d2d"], cfg.distance), seeds, cfg.max_iter)
        else:
            seeds = fc.initial_leaders(m["compute"], m["cloud"], self.k)
            features = np.column_stack([m["compute"], m["cloud"], ctx.world.samples.astype(np.float64)])
            res = fc.construct_balanced_kmeans(features, seeds, m["compute"] + m["cloud"], cfg.max_iter)
        members = res.members()
        self.clusters = []
        for cid, (leader, ids) in enumerate(zip(res.leaders, members)):
            trains = [d for d in ids if self.edge_mode or cfg.leader_trains or d != leader or len(ids) == 1]
            self.clusters.append(_Cluster(cid, int(leader), trains))
        self.constructions += 1
        leaders: list[Any] = [f"edge {e}" for e in res.leaders] if self.edge_mode else list(res.leaders)
        record = {"t": ctx.now, "reason": reason, "grouping": "fedch", "generation": self.generation,
                  "construction": "balanced_assignment" if self.edge_mode else cfg.construction,
                  "distance": cfg.distance, "K": self.k, "alpha": self.alpha,
                  "leader_kind": "edge" if self.edge_mode else "device", "members": members, "leaders": leaders,
                  "cost": res.cost.tolist(), "slot_of": res.slot_of.tolist(), "total_cost": res.total_cost, "iterations": res.iterations,
                  "iteration_costs": res.costs, "compute_s": m["compute"].tolist(), "upload_s": m["cloud"].tolist()}
        if reason == "initial" or cfg.recompute_k:
            record["k_choice"] = self.k_choice
        if trigger:
            record["trigger"] = trigger
        if reason != "initial":
            ctx.recorder.clusters(record)
            ctx.recorder.instant(("cloud", 0), "recluster", ctx.now, reason=reason, generation=self.generation,
                                 total_cost=res.total_cost, leaders=leaders, **trigger)
            ctx.recorder.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "recluster", "reason": reason,
                                 "generation": self.generation, "K": self.k, "total_cost": res.total_cost,
                                 "version": self.version})
        return record

    def clusters_record(self) -> dict[str, Any]:
        """The initial construction (``clusters.jsonl`` line 1)."""
        return self._initial

    # -- lanes and links -------------------------------------------------------------------------
    def _leader_lane(self, c: _Cluster) -> tuple[str, int]:
        return ("edge", c.leader) if self.edge_mode else ("device", c.leader)

    def start(self) -> None:
        """Every leader downloads the initial model at t = 0."""
        for c in self.clusters:
            self._send_to_leader(c)

    def _send_to_leader(self, c: _Cluster) -> None:
        ctx = self.ctx
        self._sent[c.cid] = (ctx.global_model, self.version)
        ctx.send(("cloud", 0), self._leader_lane(c), "leader_download_done", {"cluster": c.cid, "gen": self.generation},
                 "download", Priority.ARRIVAL, cluster=c.cid)

    def on_leader_download_done(self, event: Event) -> None:
        """The leader has ``(w, t)``: its cluster starts a round."""
        p = event.payload
        if p["gen"] != self.generation:
            return  # sent to a leader of clusters that no longer exist
        c = self.clusters[p["cluster"]]
        c.model, c.version = self._sent.pop(c.cid)
        if not self.ctx.stopping:
            self._begin_round(c)

    # -- inside a cluster: synchronous ----------------------------------------------------------
    def _begin_round(self, c: _Cluster) -> None:
        ctx = self.ctx
        c.round += 1
        c.round_start = ctx.now
        c.arrived = []
        c.open, c.timed_out = True, False
        c.selected = list(c.members)  # wait_all selects every member (straggler policies plug in here)
        for device in c.selected:
            payload = {"device": device, "cluster": c.cid, "gen": self.generation, "round": c.round}
            if not self.edge_mode and device == c.leader:
                ctx.schedule(0.0, "train_start", payload, Priority.START)
                continue
            if self.edge_mode:
                ctx.send(("edge", c.leader), ("device", device), "train_start", payload, "download", Priority.START,
                         cluster=c.cid)
            else:
                ctx.send(("device", c.leader), ("device", device), "train_start", payload, "download", Priority.START,
                         cluster=c.cid, peer=c.leader)
        if self.cfg.sync_timeout is not None:
            ctx.schedule(self.cfg.sync_timeout, "cluster_timeout",
                         {"cluster": c.cid, "gen": self.generation, "round": c.round}, Priority.CONTROL)

    def _current(self, p: dict[str, Any]) -> _Cluster | None:
        """The cluster an event belongs to, or None when the event is left over from an older round."""
        if p["gen"] != self.generation:
            return None
        c = self.clusters[p["cluster"]]
        return c if c.open and c.round == p["round"] else None

    def on_train_start(self, event: Event) -> None:
        """The member has its leader's model: H local steps."""
        c = self._current(event.payload)
        if c is not None:
            self.start_job(event, c.model, self.spec)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and send it to the leader (a device leader's own model does not travel)."""
        p = event.payload
        c = self._current(p)
        if c is None:
            return  # abandoned: its round or its clusters are gone
        ctx = self.ctx
        device = p["device"]
        job = self.jobs.pop(device)
        ctx.finish_training(job)
        if not self.edge_mode and device == c.leader:
            self._record_arrival(c, device, job.params)
            return
        self._uploads[(self.generation, c.cid, c.round, device)] = job.params
        ctx.send(("device", device), self._leader_lane(c), "member_upload_done", p, "upload", Priority.ARRIVAL,
                 cluster=c.cid, **({} if self.edge_mode else {"peer": c.leader}))

    def on_member_upload_done(self, event: Event) -> None:
        """A member's model reached its leader."""
        p = event.payload
        handle = self._uploads.pop((p["gen"], p["cluster"], p["round"], p["device"]))
        c = self._current(p)
        if c is not None:
            self._record_arrival(c, p["device"], handle)

    def _record_arrival(self, c: _Cluster, device: int, handle: Any) -> None:
        """One member model arrived at the leader; close the round when the barrier is met."""
        c.arrived.append((device, handle))
        if self._round_complete(c):
            self._close_cluster_round(c)

    def _round_complete(self, c: _Cluster) -> bool:
        """wait_all: every selected member arrived (after a timeout: at least one)."""
        return len(c.arrived) >= len(c.selected) or (c.timed_out and len(c.arrived) > 0)

    def on_cluster_timeout(self, event: Event) -> None:
        """``sync_timeout`` is over: close with what arrived (or with the next arrival, if none did)."""
        c = self._current(event.payload)
        if c is None:
            return
        c.timed_out = True
        if c.arrived:
            self._close_cluster_round(c)

    def _close_cluster_round(self, c: _Cluster) -> None:
        """Average what arrived by sample count, flag a straggler round, upload to the cloud."""
        ctx, world = self.ctx, self.ctx.world
        c.open = False
        ids = [d for d, _ in c.arrived]
        model = ctx.average([h for _, h in c.arrived], [float(world.samples[d]) for d in ids])
        round_s = ctx.now - c.round_start
        flag = self.policy.round_closed(c.cid, round_s)
        ctx.counters["edge_aggregations"] += 1
        ctx.counters["device_updates"] += len(ids)
        lane = self._leader_lane(c)
        ctx.recorder.instant(lane, "aggregate", ctx.now, cluster=c.cid, participants=ids, round_s=round_s,
                             straggler=flag)
        ctx.recorder.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "edge_aggregate", "edge": c.cid,
                             "cluster": c.cid, "leader": c.leader, "participants": len(ids), "ids": ids,
                             "round_s": round_s, "straggler": flag, "missing": len(c.selected) - len(ids)})
        self._cluster_up[(self.generation, c.cid, c.round)] = _Upload(c.cid, model, c.version, flag)
        ctx.send(lane, ("cloud", 0), "cluster_upload_done", {"cluster": c.cid, "gen": self.generation, "round": c.round},
                 "upload", Priority.ARRIVAL, cluster=c.cid)

    # -- the cloud: asynchronous ----------------------------------------------------------------
    def on_cluster_upload_done(self, event: Event) -> None:
        """A cluster model reached the cloud; it is applied at this instant, after every arrival of the instant."""
        p = event.payload
        up = self._cluster_up.pop((p["gen"], p["cluster"], p["round"]))
        if p["gen"] != self.generation:
            # uploaded by a cluster of an older construction: discarded (ALGORITHMS.md §2.5 [D])
            self.ctx.drop_update("cloud", 0, up.cid, self.version - up.version)
            return
        if not self._pending:
            self.ctx.schedule(0.0, "cloud_apply", {}, Priority.AGGREGATE)
        self._pending.append(up)

    def on_cloud_apply(self, event: Event) -> None:
        """Apply this instant's arrivals one by one, lower cluster id first; re-cluster when the policy says so."""
        ctx = self.ctx
        batch = sorted(self._pending, key=lambda u: u.cid)
        self._pending = []
        for i, up in enumerate(batch):
            tau = self.version - up.version
            a_tau = fc.staleness_alpha(tau, self.alpha, self.cfg.a, self.cfg.b)
            ctx.set_global(ctx.combine("cloud", [(1.0 - a_tau, ctx.global_model, None), (a_tau, up.model, None)]))
            self.version += 1
            ctx.record_async_aggregation("cloud", 0, [up.cid], [a_tau], [tau], self.version,
                                         queue_len=len(batch) - i, source="edge")
            fire = self.policy.aggregation_applied(up.cid, up.flag)
            if ctx.stopping:
                return
            if fire:
                for late in batch[i + 1:]:  # same instant, but after the re-clustering decision
                    ctx.drop_update("cloud", 0, late.cid, self.version - late.version)
                self._recluster()
                return
            self._send_to_leader(self.clusters[up.cid])

    def _recluster(self) -> None:
        """Stop every cluster, measure the world now, build new clusters, restart them from ``w``."""
        trigger = {"after_aggregation": self.version, **self.policy.state()}
        reason = self.policy.reason
        self.generation += 1
        self._sent.clear()
        self._construct(reason, trigger)
        self.policy.reset()
        for c in self.clusters:
            self._send_to_leader(c)

    def state(self) -> dict[str, Any]:
        """Global version, construction count and each cluster's round."""
        return {"version": self.version, "generation": self.generation, "K": self.k,
                "clusters": [{"cluster": c.cid, "leader": c.leader, "round": c.round, "open": c.open,
                              "version": c.version} for c in self.clusters]}
