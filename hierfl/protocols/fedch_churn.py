"""FedCH re-clustering and churn: tear down and rebuild the clusters; lost and returning leaders.

Z. Wang et al., IEEE TMC 22(7), 2023 (DCFL re-clustering, ALGORITHMS.md §2.5): at re-clustering
time every open round is withdrawn and the clusters are rebuilt from the world as it is now; a
device leader found offline stalls its cluster until it is back or, with
``on_leader_lost: recluster``, makes the cloud re-cluster at once. :class:`FedCHChurn` is mixed
into :class:`~hierfl.protocols.fedch.FedCH`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hierfl.core.engine import Event, Priority
from hierfl.protocols.fedch_construction import FedCHConstruction, _Cluster, _Upload

__all__ = ["FedCHChurn"]


class FedCHChurn(FedCHConstruction):
    """Re-clustering and leader loss of FedCH (rounds and the cloud are in ``FedCH``)."""

    _sent: dict[int, tuple[Any, int]]
    _uploads: dict[tuple[int, int, int, int], Any]
    _cluster_up: dict[tuple[int, int, int], _Upload]
    _pending: list[_Upload]

    if TYPE_CHECKING:
        def _send_to_leader(self, c: _Cluster) -> None: ...

        def _begin_round(self, c: _Cluster) -> None: ...

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
