"""FedCH (edge-server leaders) under edge-server and cloud faults (``edge_fail`` / ``cloud_fail``).

Semantics (the edge_fail and cloud_fail event kinds in docs/reference), all [D]:

* an edge server fails: its cluster's round is withdrawn (the member models that reached it and
  those on their way are lost, the jobs training for it are withdrawn and their compute counted
  as wasted), its model on its way to the cloud and the global model on its way to it are lost;
  the cluster stalls until the server is back. Its members re-attach to the cluster of the
  nearest live edge server (``reattach``: they train in that cluster's next rounds) or wait;
* it comes back: its members of the construction return (a member still training in the foster
  cluster's round is withdrawn there), and the cloud sends it ``(w, t)`` to start a round;
* the cloud fails: cluster models and global models on the way are lost; every cluster keeps
  running rounds from its latest cluster model (its ``t_k`` unchanged, so its next upload is
  weighted by the staleness it has gathered); the first round a cluster closes once the cloud
  is back is uploaded as usual, and a cluster with no model yet gets ``(w, t)`` then;
* a re-clustering (adaptive / periodic policy) builds over every edge server; a cluster whose
  server is down at that time waits for it with its members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierfl.env import Env
from hierfl.faults.protocol import CLOUD, count_lost, reattach_plan, record_loss, record_moves
from hierfl.methods.fedch.protocol_state import Cluster, FedCHState

if TYPE_CHECKING:
    from hierfl.env.events import ServerDown
    from hierfl.methods.fedch.protocol import FedCH

__all__ = ["EdgeFaults"]


class EdgeFaults:
    """Edge-server and cloud outages of a FedCH run with edge-server leaders."""

    def __init__(self, env: Env, state: FedCHState, proto: FedCH) -> None:
        self.env = env
        self.state = state
        self.proto = proto
        self.home: dict[int, tuple[int, list[int]]] = {}  # cid → (generation, members) of a failed edge's cluster
        self.cloud_wait: set[int] = set()                  # clusters waiting for (w, t) until the cloud is back

    def cluster_of_edge(self, edge: int) -> Cluster | None:
        """The current cluster led by ``edge``."""
        return next((c for c in self.state.clusters if c.leader == edge), None)

    def edge_down(self, down: ServerDown) -> None:
        """See the module docstring."""
        env, st = self.env, self.state
        edge = down.server[1]
        c = self.cluster_of_edge(edge)
        updates = count_lost(down.lost, ("member_upload_done", "cluster_upload_done"))
        for kind, msg in down.lost:
            if kind == "cluster_upload_done":
                st.cluster_models.pop((msg.gen, msg.cluster, msg.round), None)
        if c is None:
            record_loss(env, ("edge", edge), updates, 0.0, on_edge_fail=down.on_edge_fail)
            return
        wasted = 0.0
        if c.open:
            assert c.barrier is not None
            updates += len(c.models)
            wasted = c.barrier.abort(stragglers=False)  # withdraws every member still on its way
            c.models = {}
        c.download = None
        st.sent.pop(c.cid, None)
        if c.waiting is not None:
            env.cancel(c.waiting)
            c.waiting = None
        c.leader_down = True
        self.cloud_wait.discard(c.cid)
        record_loss(env, ("edge", edge), updates, wasted, cluster=c.cid, round=c.round,
                    on_edge_fail=down.on_edge_fail)
        if down.on_edge_fail != "reattach" or not c.members:
            return
        live = {x.leader: x for x in st.clusters if not x.leader_down}
        plan = reattach_plan(env, c.members, sorted(live))
        if not plan:
            return
        self.home[c.cid] = (st.generation, list(c.members))
        for dst, ds in plan.items():
            foster = live[dst]
            foster.members = sorted(foster.members + ds)
            st.cluster_of[np.asarray(ds, dtype=np.int64)] = foster.cid
        c.members = []
        record_moves(env, edge, plan, "edge_fail")

    def edge_up(self, edge: int) -> None:
        """See the module docstring."""
        env, st = self.env, self.state
        c = self.cluster_of_edge(edge)
        if c is None or not c.leader_down:
            return
        c.leader_down = False
        gen, members = self.home.pop(c.cid, (st.generation, []))
        if gen == st.generation and members:
            plan: dict[int, list[int]] = {}
            for d in members:
                plan.setdefault(int(st.cluster_of[d]), []).append(int(d))
            for src_cid, ds in sorted(plan.items()):
                foster = st.clusters[src_cid]
                foster.members = [d for d in foster.members if d not in set(ds)]
                for d in ds:
                    if foster.open and foster.barrier is not None and d in foster.barrier.waiting:
                        self.proto.withdraw(foster, d)
                        foster.barrier.drop(d)
                record_moves(env, foster.leader, {edge: ds}, "edge_back")
            c.members = sorted(members)
            st.cluster_of[np.asarray(members, dtype=np.int64)] = c.cid
        if env.stopping:
            return
        self.proto.send_to_leader(c)

    def cloud_down(self, down: ServerDown) -> None:
        """See the module docstring."""
        env, st = self.env, self.state
        updates = count_lost(down.lost, ("cluster_upload_done",))
        idle: list[Cluster] = []
        for kind, msg in down.lost:
            if msg.gen != st.generation:
                continue
            c = st.clusters[msg.cluster]
            if kind == "cluster_upload_done":
                st.cluster_models.pop((msg.gen, msg.cluster, msg.round), None)
                idle.append(c)
            elif kind == "leader_download_done":
                c.download = None
                st.sent.pop(c.cid, None)
                idle.append(c)
        record_loss(env, CLOUD, updates, 0.0, version=st.version)
        for c in sorted(idle, key=lambda c: c.cid):
            self.go_local(c)

    def go_local(self, c: Cluster) -> None:
        """The cloud is away: ``c`` runs its next round from its latest cluster model (or waits for ``(w, t)``
        when it has none yet)."""
        if c.leader_down or c.open or self.env.stopping:
            return
        if c.local is None:
            self.cloud_wait.add(c.cid)
            return
        c.model = c.local
        self.proto.begin_round(c)

    def cloud_up(self) -> None:
        """The cloud is back: clusters that had no model get ``(w, t)`` now."""
        if self.env.stopping:
            return
        st = self.state
        for cid in sorted(self.cloud_wait):
            c = st.clusters[cid]
            if not c.leader_down and not c.open:
                self.proto.send_to_leader(c)
        self.cloud_wait.clear()

    def reclustered(self) -> None:
        """A new construction: the previous clusters' reattachments and waits are void."""
        self.home.clear()
        self.cloud_wait.clear()
