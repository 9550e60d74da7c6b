"""FedCH's protocol object: synchronous cluster rounds under a straggler policy, an asynchronous cloud.

Z. Wang et al., IEEE TMC 22(7):3805–3822, 2023, docs/explanation/algorithms.md §2.5 (see :mod:`hierfl.methods.fedch`).
One cluster round, as this module runs it::

    cloud --LeaderDownload--> leader            on_leader_download_done → begin_round
    leader --MemberMsg(member_down)--> member   on_train_start (H local steps)
    member --MemberMsg(member_up)--> leader     on_train_done → on_member_upload_done
    barrier closes (policy, sync_timeout)       _close_cluster_round: average by samples
    leader --ClusterUpload--> cloud             on_cluster_upload_done → on_cloud_apply

:class:`FedCH` holds its state in one :class:`~hierfl.methods.fedch.protocol_state.FedCHState` and uses two
collaborators: a :class:`~hierfl.methods.fedch.protocol_construction.ClusterBuilder` (construction, K) and a
:class:`~hierfl.methods.fedch.protocol_churn.Reclustering` (re-clustering, lost and returning leaders).
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.kernel.engine import Event, Priority
from hierfl.core.work import TrainSpec, transfer_time_s
from hierfl.env import ClustersRecord, Env, RoundEmpty, Timer
from hierfl.faults.protocol import CLOUD
from hierfl.protocols.base import Protocol
from hierfl.protocols.cohort import coin_cohort
from hierfl.methods.fedch.protocol_churn import Reclustering
from hierfl.methods.fedch.protocol_construction import ClusterBuilder
from hierfl.methods.fedch.protocol_messages import ClusterRetry, ClusterTimeout, ClusterUpload, LeaderDownload, MemberMsg
from hierfl.methods.fedch.protocol_outages import EdgeFaults
from hierfl.methods.fedch.protocol_state import Cluster, ClusterModel
from hierfl.protocols.regroup import world_snapshot
from hierfl.protocols.straggler import Barrier, planned_spec

if TYPE_CHECKING:
    from hierfl.methods.fedch.config import FedCHConfig

__all__ = ["FedCH"]


class FedCH(Protocol):
    """Synchronous clusters, staleness-weighted asynchronous cloud, re-clustering policies."""

    def __init__(self, cfg: FedCHConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        base = env.spec
        # the job of a cluster round: H local steps at η_l (§2.2)
        self.spec = TrainSpec(epochs=None, steps=cfg.local_steps(base.steps), batch_size=base.batch_size, train=base.train,
                              lr=cfg.local_lr(base.lr), momentum=base.momentum, weight_decay=base.weight_decay,
                              optimizer=base.optimizer, nesterov=base.nesterov, betas=base.betas, eps=base.eps,
                              clip_norm=base.clip_norm)
        self.builder = ClusterBuilder(cfg, env, self.spec)
        self.st = self.builder.initial_state()  # FedCH's state (``state()`` is its summary)
        self._initial = self.builder.build(self.st, "initial", {})
        self.churn = Reclustering(cfg, env, self.st, self.builder, self)
        self.faults = EdgeFaults(env, self.st, self)  # edge_fail / cloud_fail (edge-server leaders)
        if self.st.policy.watches_world:  # recluster: on_event (only it pays for the O(N) snapshots)
            self.st.world_seen = world_snapshot(env)

    def clusters_record(self) -> ClustersRecord:
        """The initial construction (``clusters.jsonl`` line 1)."""
        return self._initial

    def start(self) -> None:
        """Every leader downloads the initial model at t = 0."""
        for c in self.st.clusters:
            self.send_to_leader(c)

    # -- the cloud → leader leg ------------------------------------------------------------------
    def send_to_leader(self, c: Cluster) -> None:
        """The cloud sends the current ``(w, t)`` to ``c``'s leader; its next round starts on arrival."""
        env, st = self.env, self.st
        if st.edge_mode and not env.live.server_up(st.leader_lane(c)):  # a new construction while its server is down
            c.leader_down = True
            return
        if not env.live.server_up(CLOUD):  # the cloud is away: the cluster goes on from its own model
            self.faults.go_local(c)
            return
        st.sent[c.cid] = (env.global_model, st.version)
        c.download = env.send(("cloud", 0), st.leader_lane(c), "leader_download_done",
                              LeaderDownload(c.cid, st.generation), "download", Priority.ARRIVAL, cluster=c.cid)

    def on_leader_download_done(self, event: Event) -> None:
        """The leader has ``(w, t)``: its cluster starts a round."""
        msg: LeaderDownload = event.payload
        st = self.st
        if msg.gen != st.generation:
            return  # sent to a leader of clusters that no longer exist
        c = st.clusters[msg.cluster]
        c.download = None
        c.model, c.version = st.sent.pop(c.cid)
        if not self.env.stopping:
            self.begin_round(c)

    # -- inside a cluster: synchronous, under the straggler policy --------------------------------
    def begin_round(self, c: Cluster) -> None:
        """Select the online members the round wants (``sampling: bernoulli``: each on its own coin,
        :mod:`hierfl.protocols.cohort`; an empty draw passes the round at once) and open its barrier."""
        env, cfg, st = self.env, self.cfg, self.st
        c.waiting = None
        pool = env.live.available(c.members)
        if not pool:  # every member is offline: start when the first one is back
            when = env.live.next_up(c.members)
            if math.isfinite(when):
                c.waiting = env.at(when, "cluster_retry", ClusterRetry(c.cid, st.generation), Priority.CONTROL)
            return
        policy = env.straggler
        c.round += 1
        if cfg.sampling == "bernoulli":  # each online member's own coin (check: the policy selects no extra)
            selected = coin_cohort(env, ("fedch.select", st.generation, c.cid, c.round),
                                   np.asarray(pool, dtype=np.int64), cfg.fraction, cfg.empty_cohort)
            if not selected:  # nobody's coin came up (empty_cohort: skip): the cluster's next round begins at once
                env.telemetry.record(RoundEmpty({"cluster": c.cid, "round": c.round, "sampling": "bernoulli"}))
                c.waiting = env.at(env.now, "cluster_retry", ClusterRetry(c.cid, st.generation), Priority.CONTROL)
                return
            m = len(selected)
        else:
            m = min(max(math.floor(cfg.fraction * len(c.members) + 1e-9), 1), len(pool))
            k = min(policy.select_count(m), len(pool))
            selected = self._sample(c, pool, k)
        c.round_start = env.now
        c.models, c.transfers, c.events = {}, {}, {}
        c.timed_out = False
        lane = st.leader_lane(c)
        c.barrier = Barrier(self, policy, lane, c.round, selected, m, functools.partial(self._close_cluster_round, c),
                            abandon=functools.partial(self._withdraw, c),
                            info={"cluster": c.cid, "generation": st.generation})
        for device in selected:
            if st.device_leads(c, device):
                c.events[device] = env.schedule(0.0, "train_start", MemberMsg(device, c.cid, st.generation, c.round,
                                                                              "self"), Priority.START)
                continue
            args = {} if st.edge_mode else {"peer": c.leader}
            c.transfers[device] = env.send(lane, ("device", device), "train_start",
                                           MemberMsg(device, c.cid, st.generation, c.round, "member_down"),
                                           "download", Priority.START, cluster=c.cid, **args)
        if cfg.sync_timeout is not None:
            env.schedule(cfg.sync_timeout, "cluster_timeout", ClusterTimeout(c.cid, st.generation, c.round),
                         Priority.CONTROL)

    def on_cluster_retry(self, event: Event) -> None:
        """A member of an idle cluster (all offline) is back."""
        msg: ClusterRetry = event.payload
        st = self.st
        if msg.gen != st.generation or self.env.stopping:
            return
        c = st.clusters[msg.cluster]
        c.waiting = None
        if not c.open and not c.leader_down:
            self.begin_round(c)

    def _sample(self, c: Cluster, pool: list[int], k: int) -> list[int]:
        """``k`` of the online members ``pool``, uniformly without replacement (all when k ≥ |pool|)."""
        if k >= len(pool):
            return list(pool)
        rng = self.env.rng("fedch.select", self.st.generation, c.cid, c.round)
        return sorted(int(i) for i in rng.choice(np.asarray(pool, dtype=np.int64), size=k, replace=False))

    def _current(self, msg: MemberMsg | ClusterTimeout) -> Cluster | None:
        """The cluster a message belongs to, or None when it is left over from an older round."""
        st = self.st
        if msg.gen != st.generation:
            return None
        c = st.clusters[msg.cluster]
        return c if c.open and c.round == msg.round else None

    def _upload_s(self, c: Cluster, device: int) -> float:
        """Uncontended time of ``device``'s model to its leader (what partial work plans with)."""
        world = self.env.world
        if self.st.edge_mode:
            lat = float(world.latency_ms[device]) + float(world.edge_latency_ms[device, c.leader])
            return transfer_time_s(world.model_bytes, float(world.uplink_mbps[device]), lat)
        return 0.0 if device == c.leader else world.d2d_s(device, c.leader)

    def on_train_start(self, event: Event) -> None:
        """The member has its leader's model: H local steps (fewer under a partial-work deadline)."""
        msg: MemberMsg = event.payload
        c = self._current(msg)
        if c is None:
            return
        assert c.barrier is not None
        device = msg.device
        c.transfers.pop(device, None)
        c.events.pop(device, None)
        partial = c.barrier.policy.partial_work
        spec = planned_spec(self, device, c.barrier, self.spec, self._upload_s(c, device) if partial else None)
        if spec is not None:
            c.events[device] = self.start_job(event, c.model, spec)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and send it to the leader (a device leader's own model does not travel)."""
        msg: MemberMsg = event.payload
        c = self._current(msg)
        if c is None:
            return  # withdrawn: its round or its clusters are gone
        env, st = self.env, self.st
        device = msg.device
        c.events.pop(device, None)
        job = self.jobs[device]
        env.finish_training(job)
        if st.device_leads(c, device):
            self.jobs.pop(device)
            self._record_arrival(c, device, job.params)
            return
        # the job stays in self.jobs until its model arrives: cut on the way, its compute is wasted
        st.member_models[(st.generation, c.cid, c.round, device)] = job.params
        c.transfers[device] = env.send(("device", device), st.leader_lane(c), "member_upload_done",
                                       replace(msg, leg="member_up"), "upload", Priority.ARRIVAL, cluster=c.cid,
                                       **({} if st.edge_mode else {"peer": c.leader}))

    def on_member_upload_done(self, event: Event) -> None:
        """A member's model reached its leader."""
        msg: MemberMsg = event.payload
        handle = self.st.member_models.pop((msg.gen, msg.cluster, msg.round, msg.device), None)
        c = self._current(msg)
        if c is not None:
            c.transfers.pop(msg.device, None)
            self.jobs.pop(msg.device, None)
            self._record_arrival(c, msg.device, handle)

    def _record_arrival(self, c: Cluster, device: int, handle: Any) -> None:
        """One member model arrived at the leader; the barrier decides whether the round closes."""
        assert c.barrier is not None
        c.models[device] = handle
        c.barrier.arrive(device)
        if c.timed_out and c.open:  # sync_timeout passed with nobody in: this first arrival closes it
            c.barrier.info["closed_by"] = "sync_timeout"
            c.barrier.close()

    def on_round_deadline(self, event: Event) -> None:
        """A straggler-policy deadline of a cluster round."""
        server, rnd = tuple(event.payload.server), event.payload.round
        for c in self.st.clusters:
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

    def withdraw(self, c: Cluster, device: int) -> float:
        """Take back everything ``device`` has in flight in ``c``'s round (its compute counted as wasted)."""
        return self._withdraw(c, device)

    def _withdraw(self, c: Cluster, device: int) -> float:
        """Take back everything ``device`` has in flight in ``c``'s round; returns (and counts) wasted compute."""
        env, st = self.env, self.st
        wasted = self.wasted_work(device)
        self.jobs.pop(device, None)
        fid = c.transfers.pop(device, None)
        if fid is not None:
            env.cancel_transfer(fid)
        ev = c.events.pop(device, None)
        if ev is not None:
            env.cancel(ev)
        st.member_models.pop((st.generation, c.cid, c.round, device), None)
        env.telemetry.count("wasted_compute_s", wasted)
        return wasted

    def _close_cluster_round(self, c: Cluster, arrived: list[int]) -> None:
        """The barrier closed: average what arrived by sample count, flag a straggler round, upload."""
        env, st, tel = self.env, self.st, self.env.telemetry
        round_s = env.now - c.round_start  # the round as the policy closed it (adaptive re-clustering reads it)
        flag = st.policy.round_closed(c.cid, round_s)
        lane = st.leader_lane(c)
        if not arrived:  # nobody in time (deadline) or every member lost: the leader starts over
            c.flag = c.flag or flag
            tel.record(RoundEmpty({"cluster": c.cid, "round": c.round, "round_s": round_s, "straggler": flag}))
            if not env.stopping:
                self.begin_round(c)
            return
        flag, c.flag = flag or c.flag, False
        samples = env.world.samples
        assert c.barrier is not None
        # partial work may weigh less (straggler.partial_weight)
        members, weights = [c.models[d] for d in arrived], [c.barrier.weight(d, float(samples[d])) for d in arrived]
        leader = env.tier("edge", c.cid)
        model = leader.average(members, weights, base=c.model)  # or the aggregation.edge rule
        c.models = {}
        c.local = model
        assert c.barrier is not None
        missing = len(c.barrier.selected) - len(arrived)
        # the cluster model was formed here, so the leader only accounts for it
        leader.aggregated(arrived,
                          {"cluster": c.cid, "participants": list(arrived), "round_s": round_s, "straggler": flag},
                          {"cluster": c.cid, "leader": c.leader, "ids": list(arrived), "round_s": round_s,
                           "straggler": flag, "missing": missing}, lane=lane)
        if not env.live.server_up(CLOUD):  # the cloud is away: keep aggregating from this model (flag rides along)
            c.model, c.flag = model, flag
            if not env.stopping:
                self.begin_round(c)
            return
        st.cluster_models[(st.generation, c.cid, c.round)] = ClusterModel(c.cid, model, c.version, flag, st.generation)
        env.send(lane, ("cloud", 0), "cluster_upload_done", ClusterUpload(c.cid, st.generation, c.round),
                 "upload", Priority.ARRIVAL, cluster=c.cid)

    # -- the cloud: asynchronous ----------------------------------------------------------------
    def on_cluster_upload_done(self, event: Event) -> None:
        """A cluster model reached the cloud; it is applied at this instant, after every arrival of the instant."""
        msg: ClusterUpload = event.payload
        st = self.st
        up = st.cluster_models.pop((msg.gen, msg.cluster, msg.round))
        if msg.gen != st.generation:
            # uploaded by a cluster of an older construction: discarded (docs/explanation/algorithms.md §2.5 [D])
            self.env.tier("cloud").drop(up.cid, st.version - up.version)
            return
        if not st.arrived:
            self.env.schedule(0.0, "cloud_apply", Timer(), Priority.AGGREGATE)
        st.arrived.append(up)

    def on_cloud_apply(self, event: Event) -> None:
        """Apply this instant's arrivals one by one, lower cluster id first; re-cluster when the policy says so."""
        env, st = self.env, self.st
        batch = sorted(st.arrived, key=lambda u: u.cid)
        st.arrived = []
        for i, up in enumerate(batch):
            tau = st.version - up.version
            a_tau = st.alpha * self.cfg.sigma(tau)  # α·fedch(a, b)(τ) unless `staleness:` names another σ
            cloud = env.tier("cloud")
            env.set_global(cloud.combine([(1.0 - a_tau, env.global_model, None), (a_tau, up.model, None)]))
            st.version += 1
            cloud.applied([up.cid], [a_tau], [tau], st.version, len(batch) - i, source="edge")
            fire = st.policy.aggregation_applied(up.cid, up.flag)
            if not fire and st.policy.watches_world:  # on_event: a decision point after each applied update
                fire = st.policy.world_changed(st.world_seen.changes(world_snapshot(env)))
            if env.stopping:
                return
            if fire:
                for late in batch[i + 1:]:  # same instant, but after the re-clustering decision
                    env.tier("cloud").drop(late.cid, st.version - late.version)
                self.faults.reclustered()
                self.churn.recluster(st.policy.reason, st.policy.state())
                return
            c = st.clusters[up.cid]
            if not c.leader_down:  # a lost leader gets (w, t) when it is back (on_leader_back)
                self.send_to_leader(c)

    # -- churn: handled by the re-clustering object ---------------------------------------------
    def on_device_lost(self, event: Event) -> None:
        """A device dropped out while busy (see :meth:`Reclustering.device_lost`)."""
        self.churn.device_lost(event.payload)

    def on_leader_back(self, event: Event) -> None:
        """A lost device leader may be online again (see :meth:`Reclustering.leader_back`)."""
        self.churn.leader_back(event.payload)

    # -- edge-server and cloud faults: handled by the faults object --------------------------------
    def on_edge_down(self, event: Event) -> None:
        """An edge-server leader failed (see :class:`EdgeFaults`)."""
        self.faults.edge_down(event.payload)

    def on_edge_up(self, event: Event) -> None:
        """A failed edge-server leader is back (see :class:`EdgeFaults`)."""
        self.faults.edge_up(event.payload.server[1])

    def on_cloud_down(self, event: Event) -> None:
        """The cloud is unreachable (see :class:`EdgeFaults`)."""
        self.faults.cloud_down(event.payload)

    def on_cloud_up(self, event: Event) -> None:
        """The cloud is back (see :class:`EdgeFaults`)."""
        self.faults.cloud_up()
