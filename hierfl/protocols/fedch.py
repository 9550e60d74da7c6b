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

Construction lives in :mod:`hierfl.protocols.fedch_construction`, re-clustering and churn in
:mod:`hierfl.protocols.fedch_churn`; this module has the cluster rounds and the cloud.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.config.errors import ConfigError, Problem
from hierfl.core import fedch_clusters as fc
from hierfl.core.engine import Event, Priority
from hierfl.core.work import TrainSpec, transfer_time_s
from hierfl.policies.recluster import AdaptiveRecluster
from hierfl.protocols.fedch_churn import FedCHChurn
from hierfl.protocols.fedch_config import FedCHConfig, KStarConfig
from hierfl.protocols.fedch_construction import _Cluster, _Upload
from hierfl.protocols.straggler import Barrier, planned_spec

if TYPE_CHECKING:
    from hierfl.emulator import Context

__all__ = ["FedCHConfig", "FedCH", "KStarConfig"]


class FedCH(FedCHChurn):
    """Synchronous clusters, staleness-weighted asynchronous cloud, re-clustering policies."""

    def __init__(self, cfg: FedCHConfig, ctx: Context) -> None:
        super().__init__(ctx)
        self.cfg = cfg
        world = ctx.world
        self.n = world.num_devices
        self.edge_mode = world.num_edges > 0
        base = ctx.spec
        self.spec = TrainSpec(epochs=None, steps=cfg.local_steps(ctx.scenario), batch_size=base.batch_size,
                              lr=cfg.local_lr(ctx.scenario), momentum=base.momentum, weight_decay=base.weight_decay)
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
            a_tau = self.alpha * self.cfg.sigma(tau)  # α·fedch(a, b)(τ) unless `staleness:` names another σ
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

    def state(self) -> dict[str, Any]:
        """Global version, construction count and each cluster's round."""
        return {"version": self.version, "generation": self.generation, "K": self.k,
                "clusters": [{"cluster": c.cid, "leader": c.leader, "round": c.round, "open": c.open,
                              "version": c.version, "leader_down": c.leader_down} for c in self.clusters]}
