"""FedCH's state in one typed object: the global version, the current construction and its clusters,
and the models in flight between members, leaders and the cloud.

:class:`FedCHState` is created by the protocol and handed explicitly to its collaborators (the
cluster builder and the re-clustering/churn object); no other object holds FedCH state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierfl.kernel.engine import Event
from hierfl.core.recluster import ReclusterPolicy
from hierfl.protocols.straggler import Barrier

__all__ = ["Cluster", "ClusterModel", "FedCHState"]


@dataclass
class Cluster:
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
    leader_down: bool = False    # a device leader offline, or an edge-server leader down (edge_fail)
    local: Any = None            # the cluster model it formed last (what it continues from while the cloud is away)

    @property
    def open(self) -> bool:
        """Whether a round is in progress."""
        return self.barrier is not None and not self.barrier.closed


@dataclass
class ClusterModel:
    """A cluster model on its way to (or waiting at) the cloud."""

    cid: int
    model: Any
    version: int                 # t_k: the global version its round started from
    flag: bool                   # the straggler flag s_k it carries
    gen: int


@dataclass
class FedCHState:
    """Everything FedCH knows during a run (model handles included).

    ``k``, ``k_choice``, ``alpha`` and ``policy`` are chosen before the first construction and
    again at a re-clustering with ``recompute_k``; the clusters and ``cluster_of`` are rebuilt
    by every construction.
    """

    n: int                       # devices
    edge_mode: bool              # leaders are the edge servers (else devices)
    k: int                       # clusters
    k_choice: dict[str, Any]     # how K was chosen (the clusters record's k_choice)
    alpha: float                 # α of the cloud's mixing weight α_τ = α·σ(τ)
    policy: ReclusterPolicy      # when the cloud re-clusters
    version: int = 0             # t: applied global aggregations
    generation: int = 0          # constructions so far − 1; in-flight work carries it
    constructions: int = 0
    # FedCH's own device → cluster map; the world's (topology's) edge_of is never changed
    cluster_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    clusters: list[Cluster] = field(default_factory=list)
    sent: dict[int, tuple[Any, int]] = field(default_factory=dict)               # cid → (model, version) going down
    member_models: dict[tuple[int, int, int, int], Any] = field(default_factory=dict)  # (gen, cid, round, device)
    cluster_models: dict[tuple[int, int, int], ClusterModel] = field(default_factory=dict)  # (gen, cid, round)
    arrived: list[ClusterModel] = field(default_factory=list)                    # at the cloud this instant
    world_seen: Any = None       # recluster: on_event: the world at the last construction (a WorldSnapshot)

    def leader_lane(self, c: Cluster) -> tuple[str, int]:
        """The trace lane and transfer endpoint of ``c``'s leader."""
        return ("edge", c.leader) if self.edge_mode else ("device", c.leader)

    def device_leads(self, c: Cluster, device: int) -> bool:
        """Whether ``device`` is ``c``'s device leader (its own model does not travel)."""
        return not self.edge_mode and device == c.leader

    def summary(self) -> dict[str, Any]:
        """Global version, construction count and each cluster's round (model handles excluded)."""
        return {"version": self.version, "generation": self.generation, "K": self.k,
                "clusters": [{"cluster": c.cid, "leader": c.leader, "round": c.round, "open": c.open,
                              "version": c.version, "leader_down": c.leader_down} for c in self.clusters]}
