"""FedCH cluster construction: measure the world now, choose K, build balanced clusters (docs/explanation/algorithms.md §2.3–2.4).

Z. Wang et al., "Accelerating Federated Learning with Cluster Construction and Hierarchical
Aggregation", IEEE TMC 22(7), 2023. The math is in :mod:`hierfl.methods.fedch.math`; a
:class:`ClusterBuilder` is the protocol's glue around it: it reads what devices would report now
(compute and link times), picks the leaders and members, and forms the ``clusters.jsonl`` record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.config.errors import ConfigError, Problem
from hierfl.methods.fedch import math as fc
from hierfl.policies.recluster import AdaptiveRecluster
from hierfl.core.work import TrainSpec
from hierfl.env import ClustersRecord, Env
from hierfl.methods.fedch.protocol_state import Cluster, FedCHState

if TYPE_CHECKING:
    from hierfl.methods.fedch.config import FedCHConfig

__all__ = ["ClusterBuilder"]


class ClusterBuilder:
    """Builds FedCH's clusters from the world as it is now and chooses K (stateless between calls)."""

    def __init__(self, cfg: FedCHConfig, env: Env, spec: TrainSpec) -> None:
        self.cfg = cfg
        self.env = env
        self.spec = spec  # FedCH's local job (H steps): what the compute times are measured for
        self.n = env.world.num_devices
        self.edge_mode = env.world.num_edges > 0

    # -- the world as it is now ---------------------------------------------------------------
    def measure(self) -> dict[str, np.ndarray]:
        """Compute and communication times of the world now (what devices report at (re-)clustering):
        slowdown windows through ``current_compute_s``, link events through the world's links."""
        env, world = self.env, self.env.world
        compute = env.live.current_compute_s(self.spec)
        up = env.live.current_upload_s()
        out = {"compute": compute, "cloud": up}
        if self.edge_mode:
            # device i → edge e: its current upload time, re-based from its topology edge's latency to e's
            own = world.edge_latency_ms[np.arange(self.n), world.edge_of]
            out["edge"] = up[:, None] + (world.edge_latency_ms - own[:, None]) / 1000.0
        else:
            out["d2d"] = np.array([[0.0 if i == j else world.d2d_s(i, j) for j in range(self.n)]
                                   for i in range(self.n)])
        return out

    def choose_k(self) -> tuple[int, dict[str, Any]]:
        """K and how it was chosen: the edge servers, ``protocol.K``, or K* of §2.4 (``K: auto``)."""
        cfg, env = self.cfg, self.env
        if self.edge_mode:
            return env.world.num_edges, {"rule": "edge_servers", "K": env.world.num_edges}
        if cfg.K != "auto":
            return int(cfg.K), {"rule": "fixed", "K": int(cfg.K)}
        m = self.measure()
        ks = cfg.kstar
        budget = float(ks.budget_s if ks.budget_s != "auto" else env.time_budget_s or 0.0)
        f0 = float(ks.f0_gap) if ks.f0_gap != "auto" else env.tier("cloud").evaluate_loss(env.global_model)
        params = {"budget_s": budget, "compute_s": float(np.median(m["compute"])),
                  "comm_s": float(np.median(m["cloud"])), "lr": self.spec.lr, "mu": ks.mu, "q": ks.q,
                  "f0_gap": f0, "local_steps": self.spec.steps, "rule": cfg.alpha_init}
        k, values = fc.choose_k(self.n, **params)  # type: ignore[arg-type]
        inputs = {("alpha_init" if key == "rule" else key): v for key, v in params.items()}
        return k, {"rule": "auto", "K": k, "objective": {str(key): v for key, v in values.items()}, **inputs}

    def initial_state(self) -> FedCHState:
        """FedCH's state before the first construction: K, α and the re-clustering policy chosen.

        Raises :class:`~hierfl.config.errors.ConfigError` when the K chosen makes α zero or is
        smaller than the adaptive policy's K̃ (known only now with ``K: auto``).
        """
        cfg = self.cfg
        k, k_choice = self.choose_k()
        alpha = fc.alpha_base(k, self.n, cfg.alpha_init)
        if alpha <= 0:
            raise ConfigError([Problem("protocol.alpha_init", f"fraction gives α = (K−1)/N = 0 with K = {k}; "
                                       "allowed: one_minus, or K >= 2", cfg.alpha_init)])
        if isinstance(cfg.recluster, AdaptiveRecluster) and cfg.recluster.k_tilde > k:
            raise ConfigError([Problem("protocol.recluster.k_tilde", f"more than the K = {k} clusters "
                                       f"chosen; allowed: 1..{k}", cfg.recluster.k_tilde)])
        return FedCHState(n=self.n, edge_mode=self.edge_mode, k=k, k_choice=k_choice, alpha=alpha,
                          policy=cfg.recluster.make(k, self.n), cluster_of=np.full(self.n, -1, dtype=np.int64))

    # -- construction ---------------------------------------------------------------------------
    def eligible_leaders(self, k: int) -> tuple[np.ndarray | None, list[int]]:
        """Devices that may lead: those online now, when at least K are (else all); and the offline ones."""
        env = self.env
        if not env.live.churn:
            return None, []
        online = env.live.available()
        offline = sorted(set(range(self.n)) - set(online))
        if not offline or len(online) < k:
            return None, offline
        mask = np.zeros(self.n, dtype=bool)
        mask[online] = True
        return mask, offline

    def build(self, state: FedCHState, reason: str, trigger: dict[str, Any]) -> ClustersRecord:
        """Build ``state``'s clusters from the world as it is now; returns their ``clusters.jsonl`` record.

        Every construction covers all N devices; with churn only the devices online now can lead
        (an offline member sits out rounds until it is back) [D]. With ``recompute_k`` a
        re-clustering chooses K (and so α and the policy) again first.
        """
        cfg, env = self.cfg, self.env
        if reason != "initial" and cfg.recompute_k and not self.edge_mode and cfg.K == "auto":
            state.k, state.k_choice = self.choose_k()
            state.alpha = fc.alpha_base(state.k, self.n, cfg.alpha_init)
            state.policy = cfg.recluster.make(state.k, self.n)
        m = self.measure()
        eligible, offline = self.eligible_leaders(state.k)
        if self.edge_mode:
            res = fc.assign_to_edges(fc.edge_distance(m["compute"], m["edge"]))
        elif cfg.construction == "hungarian":
            seeds = fc.initial_leaders(m["compute"], m["cloud"], state.k, eligible)
            res = fc.construct_hungarian(fc.leader_distance(m["compute"], m["d2d"], cfg.distance), seeds,
                                         cfg.max_iter, eligible)
        else:
            seeds = fc.initial_leaders(m["compute"], m["cloud"], state.k, eligible)
            features = np.column_stack([m["compute"], m["cloud"], env.world.samples.astype(np.float64)])
            res = fc.construct_balanced_kmeans(features, seeds, m["compute"] + m["cloud"], cfg.max_iter, eligible)
        state.cluster_of = res.cluster_of.astype(np.int64)
        # measured upload times: to the cloud (device leaders' uplink), or to the edge each device got
        upload = m["edge"][np.arange(self.n), state.cluster_of] if self.edge_mode else m["cloud"]
        if self.edge_mode and reason == "initial":
            env.telemetry.devices(state.cluster_of.copy())  # devices.csv shows FedCH's device → edge map
        members = res.members()
        state.clusters = []
        for cid, (leader, ids) in enumerate(zip(res.leaders, members)):
            trains = [d for d in ids if self.edge_mode or cfg.leader_trains or d != leader or len(ids) == 1]
            state.clusters.append(Cluster(cid, int(leader), trains))
        state.constructions += 1
        leaders: list[Any] = [f"edge {e}" for e in res.leaders] if self.edge_mode else list(res.leaders)
        head = {"generation": state.generation,
                "construction": "balanced_assignment" if self.edge_mode else cfg.construction,
                "distance": cfg.distance, "K": state.k, "alpha": state.alpha,
                "leader_kind": "edge" if self.edge_mode else "device"}
        tail: dict[str, Any] = {"cost": res.cost.tolist(), "slot_of": res.slot_of.tolist(),
                                "total_cost": res.total_cost, "iterations": res.iterations,
                                "iteration_costs": res.costs, "compute_s": m["compute"].tolist(),
                                "upload_s": upload.tolist()}
        if offline:
            tail["offline"] = offline
        if reason == "initial" or cfg.recompute_k:
            tail["k_choice"] = state.k_choice
        if trigger:
            tail["trigger"] = trigger
        return ClustersRecord(env.now, reason, "fedch", members, leaders, head, tail)
