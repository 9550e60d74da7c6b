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
  sends its model back; the leader waits under the scenario's ``straggler:`` policy (a
  :class:`~hierfl.protocols.straggler.Barrier` per round; ``wait_all`` = the paper's "all
  ``n_k`` models") and FedCH's own ``sync_timeout`` [D], averages what arrived by sample count and
  uploads the cluster model to the cloud;
* the cloud applies each cluster model when it arrives (FIFO, ties → lower cluster id):
  ``τ = t − t_k``, ``α_τ = α`` if ``τ ≤ a`` else ``α·τ^(−b)``, ``w ← (1 − α_τ)w + α_τ w_k``,
  ``t += 1``, and sends ``(w, t)`` back to that cluster's leader, which starts its next round;
* re-clustering (DCFL, :mod:`hierfl.core.recluster`): ``never``, ``periodic``, ``adaptive``; at
  re-clustering time the devices' current speeds and links are measured, the old clusters' open
  rounds are withdrawn (devices stop training) and their later uploads discarded [D], and every
  new cluster starts from the current ``w`` with ``t_k = t`` [D];
* churn: a member that drops out is no longer waited for; a device leader found offline stalls
  its cluster until it is back (§2.5: "a dead leader cannot raise s_k") or, with
  ``on_leader_lost: recluster``, makes the cloud re-cluster at once (reason ``leader_lost``).

Device-leader clusters talk over device-to-device links (``World.d2d_s``) and the leader over its
own access link to the cloud; edge-leader clusters use the device ↔ edge and edge ↔ cloud links.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.config.errors import ConfigError, Problem
from hierfl.core import fedch_clusters as fc
from hierfl.core.dynamics import MarkovTimeline
from hierfl.core.engine import Event, Priority
from hierfl.core.recluster import AdaptiveRecluster
from hierfl.core.work import TrainSpec, transfer_time_s
from hierfl.protocols.base import Protocol
from hierfl.protocols.fedch_config import FedCHConfig, KStarConfig
from hierfl.protocols.straggler import Barrier, planned_spec

if TYPE_CHECKING:
    from hierfl.emulator import Context

__all__ = ["FedCHConfig", "FedCH", "KStarConfig"]


@dataclass
class _Cluster:
    """One cluster of the current construction and its round in progress."""

    cid: int
    leader: int                  # a device id, or an edge id with edge leaders
    members: list[int]           # the devices that train in its rounds
    model: Any = None            # the global model the leader last received (round start)
    version: int = 0             # t_k: the global version of that model
    round: int = 0
    round_start: float = 0.0
    barrier: Barrier | None = None
    models: dict[int, Any] = field(default_factory=dict)       # arrived member models (arrival order)
    transfers: dict[int, int] = field(default_factory=dict)    # member → its transfer of this round in flight
    events: dict[int, Event] = field(default_factory=dict)     # member → its pending start / job-end event
    timed_out: bool = False
    flag: bool = False           # a straggler flag of an empty round, riding on the next upload
    download: int | None = None  # the cloud → leader transfer in flight
    waiting: Event | None = None  # a pending cluster_retry / leader_back
    leader_down: bool = False

    @property
    def open(self) -> bool:
        """Whether a round is in progress."""
        return self.barrier is not None and not self.barrier.closed


@dataclass
class _Upload:
    """A cluster model on its way to (or waiting at) the cloud."""

    cid: int
    model: Any
    version: int
    flag: bool
    gen: int


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
        self.version = 0                  # t: applied global aggregations
        self.generation = 0               # constructions so far − 1; in-flight work carries it
        self.constructions = 0
        # FedCH's own device → cluster map; the world's (topology's) edge_of is never changed
        self.cluster_of = np.full(self.n, -1, dtype=np.int64)
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
    def _measure(self) -> dict[str, np.ndarray]:
        """Compute and communication times of the world now (what devices report at (re-)clustering):
        slowdown windows through ``current_compute_s``, link events through the world's links."""
        ctx, world = self.ctx, self.ctx.world
        compute = ctx.current_compute_s(self.spec)
        up = ctx.current_upload_s()
        out = {"compute": compute, "cloud": up}
        if self.edge_mode:
            # device i → edge e: its current upload time, re-based from its topology edge's latency to e's
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
    def _eligible_leaders(self) -> tuple[np.ndarray | None, list[int]]:
        """Devices that may lead: those online now, when at least K are (else all); and the offline ones."""
        ctx = self.ctx
        if ctx.dyn.availability.trivial:
            return None, []
        online = ctx.available()
        offline = sorted(set(range(self.n)) - set(online))
        if not offline or len(online) < self.k:
            return None, offline
        mask = np.zeros(self.n, dtype=bool)
        mask[online] = True
        return mask, offline

    def _construct(self, reason: str, trigger: dict[str, Any]) -> dict[str, Any]:
        """Build clusters from the world as it is now; returns (and, after the first, writes) the record.

        Every construction covers all N devices; with churn only the devices online now can lead
        (an offline member sits out rounds until it is back) [D].
        """
        cfg, ctx = self.cfg, self.ctx
        if reason != "initial" and cfg.recompute_k and not self.edge_mode and cfg.K == "auto":
            self.k, self.k_choice = self._choose_k()
            self.alpha = fc.alpha_base(self.k, self.n, cfg.alpha_init)
            self.policy = cfg.recluster.make(self.k, self.n)
        m = self._measure()
        eligible, offline = self._eligible_leaders()
        if self.edge_mode:
            res = fc.assign_to_edges(fc.edge_distance(m["compute"], m["edge"]))
        elif cfg.construction == "hungarian":
            seeds = fc.initial_leaders(m["compute"], m["cloud"], self.k, eligible)
            res = fc.construct_hungarian(fc.leader_distance(m["compute"], m["d2d"], cfg.distance), seeds,
                                         cfg.max_iter, eligible)
        else:
            seeds = fc.initial_leaders(m["compute"], m["cloud"], self.k, eligible)
            features = np.column_stack([m["compute"], m["cloud"], ctx.world.samples.astype(np.float64)])
            res = fc.construct_balanced_kmeans(features, seeds, m["compute"] + m["cloud"], cfg.max_iter, eligible)
        self.cluster_of = res.cluster_of.astype(np.int64)
        # measured upload times: to the cloud (device leaders' uplink), or to the edge each device got
        upload = m["edge"][np.arange(self.n), self.cluster_of] if self.edge_mode else m["cloud"]
        if self.edge_mode and reason == "initial":
            self._write_devices()
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
                  "cost": res.cost.tolist(), "slot_of": res.slot_of.tolist(), "total_cost": res.total_cost,
                  "iterations": res.iterations, "iteration_costs": res.costs, "compute_s": m["compute"].tolist(),
                  "upload_s": upload.tolist()}
        if offline:
            record["offline"] = offline
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
                                 "version": self.version, **{k: v for k, v in trigger.items()
                                                             if k in ("wasted_compute_s", "cluster", "leader")}})
        return record

    def _write_devices(self) -> None:
        """devices.csv shows FedCH's device → edge assignment (on a copy: the Built world is shared)."""
        ctx = self.ctx
        avail = ctx.dyn.availability.base
        names = ["always" if b is None else "markov" if isinstance(b, MarkovTimeline) else "trace" for b in avail]
        world = dataclasses.replace(ctx.world, edge_of=self.cluster_of.copy())
        ctx.recorder.write_devices(world, names, [len(w) for w in ctx.dyn.windows])

    def clusters_record(self) -> dict[str, Any]:
        """The initial construction (``clusters.jsonl`` line 1)."""
        return self._initial

    # -- lanes and links -------------------------------------------------------------------------
    def _leader_lane(self, c: _Cluster) -> tuple[str, int]:
        return ("edge", c.leader) if self.edge_mode else ("device", c.leader)

    def _upload_s(self, c: _Cluster, device: int) -> float:
        """Uncontended time of ``device``'s model to its leader (what partial work plans with)."""
        world = self.ctx.world
        if self.edge_mode:
            lat = float(world.latency_ms[device]) + float(world.edge_latency_ms[device, c.leader])
            return transfer_time_s(world.model_bytes, float(world.uplink_mbps[device]), lat)
        return 0.0 if device == c.leader else world.d2d_s(device, c.leader)

    def start(self) -> None:
        """Every leader downloads the initial model at t = 0."""
        for c in self.clusters:
            self._send_to_leader(c)

    def _send_to_leader(self, c: _Cluster) -> None:
        ctx = self.ctx
        self._sent[c.cid] = (ctx.global_model, self.version)
        c.download = ctx.send(("cloud", 0), self._leader_lane(c), "leader_download_done",
                              {"cluster": c.cid, "gen": self.generation, "leg": "leader_down"}, "download",
                              Priority.ARRIVAL, cluster=c.cid)

    def on_leader_download_done(self, event: Event) -> None:
        """The leader has ``(w, t)``: its cluster starts a round."""
        p = event.payload
        if p["gen"] != self.generation:
            return  # sent to a leader of clusters that no longer exist
        c = self.clusters[p["cluster"]]
        c.download = None
        c.model, c.version = self._sent.pop(c.cid)
        if not self.ctx.stopping:
            self._begin_round(c)

    # -- inside a cluster: synchronous, under the straggler policy --------------------------------
    def _begin_round(self, c: _Cluster) -> None:
        """Select the online members the round wants and open its barrier."""
        ctx, cfg = self.ctx, self.cfg
        c.waiting = None
        pool = ctx.available(c.members)
        if not pool:  # every member is offline: start when the first one is back
            when = ctx.next_up(c.members)
            if math.isfinite(when):
                c.waiting = ctx.queue.push(when, "cluster_retry", {"cluster": c.cid, "gen": self.generation},
                                           Priority.CONTROL)
            return
        policy = ctx.scenario.straggler
        m = min(max(math.floor(cfg.fraction * len(c.members) + 1e-9), 1), len(pool))
        k = min(policy.select_count(m), len(pool))
        c.round += 1
        selected = self._sample(c, pool, k)
        c.round_start = ctx.now
        c.models, c.transfers, c.events = {}, {}, {}
        c.timed_out = False
        lane = self._leader_lane(c)
        c.barrier = Barrier(self, policy, lane, c.round, selected, m, functools.partial(self._close_cluster_round, c),
                            abandon=functools.partial(self._withdraw, c),
                            info={"cluster": c.cid, "generation": self.generation})
        for device in selected:
            payload = {"device": device, "cluster": c.cid, "gen": self.generation, "round": c.round}
            if not self.edge_mode and device == c.leader:
                c.events[device] = ctx.schedule(0.0, "train_start", {**payload, "leg": "self"}, Priority.START)
                continue
            args = {} if self.edge_mode else {"peer": c.leader}
            c.transfers[device] = ctx.send(lane, ("device", device), "train_start", {**payload, "leg": "member_down"},
                                           "download", Priority.START, cluster=c.cid, **args)
        if cfg.sync_timeout is not None:
            ctx.schedule(cfg.sync_timeout, "cluster_timeout", {"cluster": c.cid, "gen": self.generation,
                                                               "round": c.round}, Priority.CONTROL)

    def _sample(self, c: _Cluster, pool: list[int], k: int) -> list[int]:
        """``k`` of the online members ``pool``, uniformly without replacement (all when k ≥ |pool|)."""
        if k >= len(pool):
            return list(pool)
        rng = self.ctx.rng("fedch.select", self.generation, c.cid, c.round)
        return sorted(int(i) for i in rng.choice(np.asarray(pool, dtype=np.int64), size=k, replace=False))

    def _current(self, p: dict[str, Any]) -> _Cluster | None:
        """The cluster an event belongs to, or None when the event is left over from an older round."""
        if p.get("gen") != self.generation:
            return None
        c = self.clusters[p["cluster"]]
        return c if c.open and c.round == p["round"] else None

    def on_train_start(self, event: Event) -> None:
        """The member has its leader's model: H local steps (fewer under a partial-work deadline)."""
        c = self._current(event.payload)
        if c is None:
            return
        assert c.barrier is not None
        device = event.payload["device"]
        c.transfers.pop(device, None)
        c.events.pop(device, None)
        partial = bool(getattr(c.barrier.policy, "partial", False))
        spec = planned_spec(self, device, c.barrier, self.spec, self._upload_s(c, device) if partial else None)
        if spec is not None:
            c.events[device] = self.start_job(event, c.model, spec)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and send it to the leader (a device leader's own model does not travel)."""
        p = event.payload
        c = self._current(p)
        if c is None:
            return  # withdrawn: its round or its clusters are gone
        ctx = self.ctx
        device = p["device"]
        c.events.pop(device, None)
        job = self.jobs[device]
        ctx.finish_training(job)
        if not self.edge_mode and device == c.leader:
            self.jobs.pop(device)
            self._record_arrival(c, device, job.params)
            return
        # the job stays in self.jobs until its model arrives: cut on the way, its compute is wasted
        self._uploads[(self.generation, c.cid, c.round, device)] = job.params
        c.transfers[device] = ctx.send(("device", device), self._leader_lane(c), "member_upload_done",
                                       {**p, "leg": "member_up"}, "upload", Priority.ARRIVAL, cluster=c.cid,
                                       **({} if self.edge_mode else {"peer": c.leader}))

    def on_member_upload_done(self, event: Event) -> None:
        """A member's model reached its leader."""
        p = event.payload
        handle = self._uploads.pop((p["gen"], p["cluster"], p["round"], p["device"]), None)
        c = self._current(p)
        if c is not None:
            c.transfers.pop(p["device"], None)
            self.jobs.pop(p["device"], None)
            self._record_arrival(c, p["device"], handle)

    def _record_arrival(self, c: _Cluster, device: int, handle: Any) -> None:
        """One member model arrived at the leader; the barrier decides whether the round closes."""
        assert c.barrier is not None
        c.models[device] = handle
        c.barrier.arrive(device)
        if c.timed_out and c.open:  # sync_timeout passed with nobody in: this first arrival closes it
            c.barrier.info["closed_by"] = "sync_timeout"
            c.barrier.close()

    def on_round_deadline(self, event: Event) -> None:
        """A straggler-policy deadline of a cluster round."""
        server, rnd = tuple(event.payload["server"]), event.payload["round"]
        for c in self.clusters:
            if c.open and c.barrier is not None and tuple(c.barrier.server) == server and c.round == rnd:
                c.barrier.on_deadline()
                return

    def on_cluster_timeout(self, event: Event) -> None:
        """``sync_timeout`` is over: close with what arrived (or with the next arrival, if none did)."""
        c = self._current(event.payload)
        if c is None:
            return
        c.timed_out = True
        if c.models:
            assert c.barrier is not None
            c.barrier.info["closed_by"] = "sync_timeout"
            c.barrier.close()

    def _withdraw(self, c: _Cluster, device: int) -> float:
        """Take back everything ``device`` has in flight in ``c``'s round; returns (and counts) wasted compute."""
        ctx = self.ctx
        wasted = self.wasted_work(device)
        self.jobs.pop(device, None)
        fid = c.transfers.pop(device, None)
        if fid is not None:
            ctx.cancel_transfer(fid)
        ev = c.events.pop(device, None)
        if ev is not None:
            ctx.queue.cancel(ev)
        self._uploads.pop((self.generation, c.cid, c.round, device), None)
        ctx.counters["wasted_compute_s"] += wasted
        return wasted

    def _close_cluster_round(self, c: _Cluster, arrived: list[int]) -> None:
        """The barrier closed: average what arrived by sample count, flag a straggler round, upload."""
        ctx, world = self.ctx, self.ctx.world
        round_s = ctx.now - c.round_start  # the round as the policy closed it (adaptive re-clustering reads it)
        flag = self.policy.round_closed(c.cid, round_s)
        lane = self._leader_lane(c)
        if not arrived:  # nobody in time (deadline) or every member lost: the leader starts over
            c.flag = c.flag or flag
            ctx.recorder.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "round_empty", "cluster": c.cid,
                                 "round": c.round, "round_s": round_s, "straggler": flag})
            if not ctx.stopping:
                self._begin_round(c)
            return
        flag, c.flag = flag or c.flag, False
        model = ctx.average([c.models[d] for d in arrived], [float(world.samples[d]) for d in arrived])
        c.models = {}
        ctx.counters["edge_aggregations"] += 1
        ctx.counters["device_updates"] += len(arrived)
        assert c.barrier is not None
        missing = len(c.barrier.selected) - len(arrived)
        ctx.recorder.instant(lane, "aggregate", ctx.now, cluster=c.cid, participants=list(arrived), round_s=round_s,
                             straggler=flag)
        ctx.recorder.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "edge_aggregate", "edge": c.cid,
                             "cluster": c.cid, "leader": c.leader, "participants": len(arrived), "ids": list(arrived),
                             "round_s": round_s, "straggler": flag, "missing": missing})
        self._cluster_up[(self.generation, c.cid, c.round)] = _Upload(c.cid, model, c.version, flag, self.generation)
        ctx.send(lane, ("cloud", 0), "cluster_upload_done",
                 {"cluster": c.cid, "gen": self.generation, "round": c.round, "leg": "cluster_up"},
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
                self._recluster(self.policy.reason, self.policy.state())
                return
            c = self.clusters[up.cid]
            if not c.leader_down:  # a lost leader gets (w, t) when it is back (on_leader_back)
                self._send_to_leader(c)

    # -- re-clustering ----------------------------------------------------------------------------
    def _teardown(self) -> float:
        """CLU (§2.5): every open round is withdrawn (devices stop training, leaders stop aggregating),
        pending downloads and timers are cancelled; returns the compute wasted."""
        ctx = self.ctx
        wasted = 0.0
        for c in self.clusters:
            if c.open:
                assert c.barrier is not None
                wasted += c.barrier.abort(stragglers=False)
            if c.download is not None:
                ctx.cancel_transfer(c.download)
                c.download = None
            if c.waiting is not None:
                ctx.queue.cancel(c.waiting)
                c.waiting = None
        for up in self._pending:  # arrived this instant, not applied before the CLU
            ctx.drop_update("cloud", 0, up.cid, self.version - up.version)
        self._pending = []
        self._sent.clear()
        return wasted

    def _recluster(self, reason: str, trigger: dict[str, Any]) -> None:
        """Stop every cluster, measure the world now, build new clusters, restart them from ``w``."""
        wasted = self._teardown()
        trigger = {"after_aggregation": self.version, **trigger, "wasted_compute_s": wasted}
        self.generation += 1
        self._construct(reason, trigger)
        self.policy.reset()
        for c in self.clusters:
            self._send_to_leader(c)

    # -- churn ------------------------------------------------------------------------------------
    def on_device_lost(self, event: Event) -> None:
        """A device dropped out while busy. The emulator has withdrawn everything it had in flight
        (whichever activity was lost), so this is applied to its cluster of now: a member is no longer
        waited for; a device leader found offline stalls its cluster until it is back, or triggers a
        re-clustering (``on_leader_lost``); a leader whose own task failed restarts its round."""
        p = event.payload
        device = int(p["device"])
        if p.get("leg") == "cluster_up":
            self._cluster_up.pop((int(p["gen"]), int(p["cluster"]), int(p["round"])), None)
        c = self.clusters[int(self.cluster_of[device])]
        c.transfers.pop(device, None)
        c.events.pop(device, None)
        self._uploads.pop((self.generation, c.cid, c.round, device), None)
        if not self.edge_mode and device == c.leader:
            if not c.leader_down:
                self._leader_lost(c, p)
        elif c.open:
            assert c.barrier is not None
            c.barrier.drop(device)

    def _leader_lost(self, c: _Cluster, p: dict[str, Any]) -> None:
        """``c``'s device leader dropped out: its round (if any) is withdrawn; see :meth:`on_device_lost`."""
        ctx = self.ctx
        leader = c.leader
        was_open = c.open
        wasted = 0.0
        if was_open:
            assert c.barrier is not None
            wasted = c.barrier.abort(stragglers=False)
        # whatever of the cluster was on the way through the leader is gone with it
        if c.download is not None:
            ctx.cancel_transfer(c.download)
            c.download = None
        self._sent.pop(c.cid, None)
        self._cluster_up.pop((self.generation, c.cid, c.round), None)
        if c.waiting is not None:
            ctx.queue.cancel(c.waiting)
            c.waiting = None
        online = ctx.is_up(leader)
        ctx.recorder.instant(("device", leader), "leader_lost", ctx.now, cluster=c.cid, stage=p.get("stage"),
                             reason=p.get("reason"))
        ctx.recorder.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "leader_lost", "cluster": c.cid,
                             "leader": leader, "stage": p.get("stage"), "reason": p.get("reason"),
                             "online": online, "generation": self.generation, "wasted_compute_s": wasted})
        if ctx.stopping:
            return
        if online:
            # its own task failed (dropout), taking its cluster transfers with it: it starts over at once,
            # the round from the model it holds, or (between rounds) with a fresh download
            if was_open:
                self._begin_round(c)
            else:
                self._send_to_leader(c)
            return
        c.leader_down = True
        if self.cfg.on_leader_lost == "recluster" and len(ctx.available()) >= self.k:
            self._recluster("leader_lost", {"cluster": c.cid, "leader": leader})
            return
        self._await_leader(c)

    def _await_leader(self, c: _Cluster) -> None:
        when = self.ctx.next_up([c.leader])
        if math.isfinite(when):
            c.waiting = self.ctx.queue.push(when, "leader_back", {"cluster": c.cid, "gen": self.generation},
                                            Priority.CONTROL)

    def on_leader_back(self, event: Event) -> None:
        """A lost device leader is online again: the cloud sends it the current model."""
        p = event.payload
        if p["gen"] != self.generation or self.ctx.stopping:
            return
        c = self.clusters[p["cluster"]]
        c.waiting = None
        if not c.leader_down:
            return
        if not self.ctx.is_up(c.leader):
            self._await_leader(c)
            return
        c.leader_down = False
        self._send_to_leader(c)

    def on_cluster_retry(self, event: Event) -> None:
        """A member of an idle cluster (all offline) is back."""
        p = event.payload
        if p["gen"] != self.generation or self.ctx.stopping:
            return
        c = self.clusters[p["cluster"]]
        c.waiting = None
        if not c.open and not c.leader_down:
            self._begin_round(c)

    def state(self) -> dict[str, Any]:
        """Global version, construction count and each cluster's round."""
        return {"version": self.version, "generation": self.generation, "K": self.k,
                "clusters": [{"cluster": c.cid, "leader": c.leader, "round": c.round, "open": c.open,
                              "version": c.version, "leader_down": c.leader_down} for c in self.clusters]}
