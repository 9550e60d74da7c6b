"""FedCH re-clustering and churn: tear down and rebuild the clusters; lost and returning leaders.

Z. Wang et al., IEEE TMC 22(7), 2023 (DCFL re-clustering, docs/explanation/algorithms.md §2.5): at re-clustering
time every open round is withdrawn and the clusters are rebuilt from the world as it is now; a
device leader found offline stalls its cluster until it is back or, with
``on_leader_lost: recluster``, makes the cloud re-cluster at once. :class:`Reclustering` works on
the protocol's :class:`~hierfl.methods.fedch.protocol_state.FedCHState`, builds with its
:class:`~hierfl.methods.fedch.protocol_construction.ClusterBuilder` and restarts clusters through the
protocol's :class:`Rounds`.
"""

from __future__ import annotations

import math
import typing
from typing import TYPE_CHECKING, Any

from hierfl.kernel.engine import Priority
from hierfl.env import DeviceLost, Env, LeaderLost, Recluster
from hierfl.methods.fedch.protocol_construction import ClusterBuilder
from hierfl.methods.fedch.protocol_messages import ClusterUpload, LeaderBack
from hierfl.methods.fedch.protocol_state import Cluster, FedCHState
from hierfl.protocols.regroup import world_snapshot

if TYPE_CHECKING:
    from hierfl.methods.fedch.config import FedCHConfig

__all__ = ["Rounds", "Reclustering"]

# trigger fields repeated in the `recluster` metric line
_METRIC_TRIGGER = ("wasted_compute_s", "cluster", "leader")


class Rounds(typing.Protocol):
    """What re-clustering needs from the cluster rounds: (re)start a cluster."""

    def send_to_leader(self, c: Cluster) -> None:
        """The cloud sends the current ``(w, t)`` to ``c``'s leader (its next round starts on arrival)."""

    def begin_round(self, c: Cluster) -> None:
        """``c``'s leader starts a round from the model it holds."""


class Reclustering:
    """Re-clustering (teardown and rebuild) and device/leader churn of FedCH."""

    def __init__(self, cfg: FedCHConfig, env: Env, state: FedCHState, builder: ClusterBuilder,
                 rounds: Rounds) -> None:
        self.cfg = cfg
        self.env = env
        self.state = state
        self.builder = builder
        self.rounds = rounds

    # -- re-clustering ----------------------------------------------------------------------------
    def teardown(self) -> float:
        """CLU (§2.5): every open round is withdrawn (devices stop training, leaders stop aggregating),
        pending downloads and timers are cancelled; returns the compute wasted."""
        env, st = self.env, self.state
        wasted = 0.0
        for c in st.clusters:
            if c.open:
                assert c.barrier is not None
                wasted += c.barrier.abort(stragglers=False)
            if c.download is not None:
                env.cancel_transfer(c.download)
                c.download = None
            if c.waiting is not None:
                env.cancel(c.waiting)
                c.waiting = None
        for up in st.arrived:  # arrived this instant, not applied before the CLU
            env.tier("cloud").drop(up.cid, st.version - up.version)
        st.arrived = []
        st.sent.clear()
        return wasted

    def recluster(self, reason: str, trigger: dict[str, Any]) -> None:
        """Stop every cluster, measure the world now, build new clusters, restart them from ``w``."""
        env, st, tel = self.env, self.state, self.env.telemetry
        wasted = self.teardown()
        trigger = {"after_aggregation": st.version, **trigger, "wasted_compute_s": wasted}
        st.generation += 1
        record = self.builder.build(st, reason, trigger)
        total_cost = record.tail["total_cost"]
        tel.clusters(record)
        tel.instant(("cloud", 0), "recluster", env.now, reason=reason, generation=st.generation,
                    total_cost=total_cost, leaders=record.leaders, **trigger)
        tel.record(Recluster(reason, st.generation, st.k, total_cost, st.version,
                             {k: v for k, v in trigger.items() if k in _METRIC_TRIGGER}))
        st.policy.reset()
        if st.policy.watches_world:  # on_event compares the world with the one this construction measured
            st.world_seen = world_snapshot(env)
        for c in st.clusters:
            self.rounds.send_to_leader(c)

    # -- churn ------------------------------------------------------------------------------------
    def device_lost(self, lost: DeviceLost) -> None:
        """A device dropped out while busy. The driver has withdrawn everything it had in flight
        (whichever activity was lost), so this is applied to its cluster of now: a member is no longer
        waited for; a device leader found offline stalls its cluster until it is back, or triggers a
        re-clustering (``on_leader_lost``); a leader whose own task failed restarts its round."""
        st = self.state
        device = lost.device
        if isinstance(lost.origin, ClusterUpload):  # a device leader's upload to the cloud
            up = lost.origin
            st.cluster_models.pop((up.gen, up.cluster, up.round), None)
        c = st.clusters[int(st.cluster_of[device])]
        c.transfers.pop(device, None)
        c.events.pop(device, None)
        st.member_models.pop((st.generation, c.cid, c.round, device), None)
        if st.device_leads(c, device):
            if not c.leader_down:
                self._leader_lost(c, lost)
        elif c.open:
            assert c.barrier is not None
            c.barrier.drop(device)

    def _leader_lost(self, c: Cluster, lost: DeviceLost) -> None:
        """``c``'s device leader dropped out: its round (if any) is withdrawn; see :meth:`device_lost`."""
        env, st = self.env, self.state
        leader = c.leader
        was_open = c.open
        wasted = 0.0
        if was_open:
            assert c.barrier is not None
            wasted = c.barrier.abort(stragglers=False)
        # whatever of the cluster was on the way through the leader is gone with it
        if c.download is not None:
            env.cancel_transfer(c.download)
            c.download = None
        st.sent.pop(c.cid, None)
        st.cluster_models.pop((st.generation, c.cid, c.round), None)
        if c.waiting is not None:
            env.cancel(c.waiting)
            c.waiting = None
        online = env.live.is_up(leader)
        env.telemetry.instant(("device", leader), "leader_lost", env.now, cluster=c.cid, stage=lost.stage,
                              reason=lost.reason)
        env.telemetry.record(LeaderLost(c.cid, leader, lost.stage, lost.reason, online, st.generation, wasted))
        if env.stopping:
            return
        if online:
            # its own task failed (dropout), taking its cluster transfers with it: it starts over at once,
            # the round from the model it holds, or (between rounds) with a fresh download
            if was_open:
                self.rounds.begin_round(c)
            else:
                self.rounds.send_to_leader(c)
            return
        c.leader_down = True
        if self.cfg.on_leader_lost == "recluster" and len(env.live.available()) >= st.k:
            self.recluster("leader_lost", {"cluster": c.cid, "leader": leader})
            return
        self._await_leader(c)

    def _await_leader(self, c: Cluster) -> None:
        when = self.env.live.next_up([c.leader])
        if math.isfinite(when):
            c.waiting = self.env.at(when, "leader_back", LeaderBack(c.cid, self.state.generation), Priority.CONTROL)

    def leader_back(self, msg: LeaderBack) -> None:
        """A lost device leader may be online again: the cloud sends it the current model."""
        env, st = self.env, self.state
        if msg.gen != st.generation or env.stopping:
            return
        c = st.clusters[msg.cluster]
        c.waiting = None
        if not c.leader_down:
            return
        if not env.live.is_up(c.leader):
            self._await_leader(c)
            return
        c.leader_down = False
        self.rounds.send_to_leader(c)
