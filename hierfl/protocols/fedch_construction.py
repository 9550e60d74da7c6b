"""FedCH cluster construction: measure the world now, choose K, build balanced clusters (ALGORITHMS.md §2.3–2.4).

Z. Wang et al., "Accelerating Federated Learning with Cluster Construction and Hierarchical
Aggregation", IEEE TMC 22(7), 2023. The math is in :mod:`hierfl.core.fedch_clusters`; this module
is the protocol's glue around it (:class:`FedCHConstruction`, mixed into
:class:`~hierfl.protocols.fedch.FedCH`) and the per-cluster state :class:`_Cluster` / :class:`_Upload`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierfl.core import fedch_clusters as fc
from hierfl.core.dynamics import MarkovTimeline
from hierfl.core.engine import Event
from hierfl.core.recluster import ReclusterPolicy
from hierfl.core.work import TrainSpec
from hierfl.protocols.base import Protocol
from hierfl.protocols.fedch_config import FedCHConfig
from hierfl.protocols.straggler import Barrier

__all__ = ["FedCHConstruction"]


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


class FedCHConstruction(Protocol):
    """Cluster construction of FedCH (the state it builds is set up by ``FedCH.__init__``)."""

    cfg: FedCHConfig
    n: int
    edge_mode: bool
    spec: TrainSpec
    version: int
    generation: int
    constructions: int
    cluster_of: np.ndarray
    k: int
    k_choice: dict[str, Any]
    alpha: float
    policy: ReclusterPolicy
    clusters: list[_Cluster]

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
                  "comm_s": float(np.median(m["cloud"])), "lr": self.spec.lr, "mu": ks.mu, "q": ks.q,
                  "f0_gap": f0, "local_steps": self.spec.steps, "rule": cfg.alpha_init}
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
