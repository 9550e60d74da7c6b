"""FedCH's config model (``protocol: {name: fedch, ...}``) and its load-time cross-checks.

Every [B]/[D] detail of docs/explanation/algorithms.md §2 is a key here with the default given there; the protocol
itself is :class:`hierfl.methods.fedch.protocol.FedCH`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from hierfl.config.base import ConfigModel, ReadWith
from hierfl.config.errors import Problem
from hierfl.methods.fedch.policies import FedCHStaleness
from hierfl.policies.recluster import RECLUSTER, AdaptiveRecluster, NeverRecluster
from hierfl.policies.staleness import STALENESS
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, ProtocolConfig
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_problems, empty_cohort_field, sampling_field
from hierfl.methods.fedch.protocol import FedCH

if TYPE_CHECKING:  # the environment is only named in a signature: the config (scenario layer) never imports it
    from hierfl.env import Env
    from hierfl.scenario.schema import Scenario

__all__ = ["FedCHConfig", "KStarConfig"]


class KStarConfig(ConfigModel):
    """Constants of the §2.4 objective ``L(K)`` (emulator defaults [D]; time is the single resource)."""

    mu: PositiveFloat = Field(default=0.01, description="μ, strong-convexity constant [D]")
    q: PositiveFloat = Field(default=1.0, description="Q1 + Q2, gradient variance + second-moment bounds [D]")
    f0_gap: PositiveFloat | Literal["auto"] = Field(
        default="auto", description="F(w0) − F*; auto = the initial model's test loss [D]")
    budget_s: PositiveFloat | Literal["auto"] = Field(
        default="auto", description="time budget R in seconds; auto = stop.virtual_time_s [D]")


@PROTOCOLS.register
class FedCHConfig(ProtocolConfig):
    """``protocol: {name: fedch, K: auto, H: null, lr: null, a: 5, b: 1, recluster: {name: never}}``."""

    # a cluster round is a synchronous barrier: `straggler:` policies apply to it
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cluster leader", synchronous=True),
        AggregationPoint("straggler.cloud", "cluster→cloud", synchronous=False, participants="cluster leaders",
                         note="the cloud applies each cluster model as it arrives (staleness-weighted)"))
    rule_tiers: ClassVar[tuple[str, ...]] = ("edge",)  # its cluster leaders
    aggregation_style: ClassVar[str] = "models"
    # edge_fail / cloud_fail: with edge-server leaders (the events' own checks refuse a scenario without edge servers)
    supports_infra_faults: ClassVar[bool] = True
    own_train_specs: ClassVar[bool] = True  # (jobs of its own steps or epochs: see ProtocolConfig)
    name: Literal["fedch"] = "fedch"
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    grouping: Literal["fedch"] = Field(default="fedch", description="FedCH's own cluster construction")
    construction: Literal["hungarian", "balanced_kmeans"] = Field(
        default="hungarian", description="journal Hungarian construction [B] or the conference balanced k-means [V]")
    K: int | Literal["auto"] = Field(default="auto", description="clusters, 1..N; auto = K* of §2.4")
    distance: Literal["abs_diff", "sum"] = Field(default="abs_diff", description="d(i, LN_k) of §2.3 [D]/[B]")
    max_iter: PositiveInt = Field(default=20, description="leader-update iterations at most [D]")
    H: PositiveInt | None = Field(
        default=None, description="local SGD steps per cluster round; null = training.steps if set, else 10 [V]")
    lr: PositiveFloat | None = Field(
        default=None, description="local learning rate η_l; null = training.lr (default 0.01 [V])")
    a: float = Field(default=5.0, ge=0.0, description="staleness tolerated at full weight [V]")
    b: float = Field(default=1.0, ge=0.0, le=100.0, description="staleness decay exponent [V]")
    staleness: STALENESS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="σ(τ) of the cloud's α_τ = α·σ(τ); null = fedch(a, b) from the keys a and b "
                                  "(§2.1); any staleness function of the library is accepted")
    alpha_init: Literal["one_minus", "fraction"] = Field(
        default="one_minus", description="α = 1 − (K−1)/N [V: conference], or the (K−1)/N reading")
    recluster: RECLUSTER.union() = Field(default=NeverRecluster(), description="when the cloud rebuilds the clusters: never, periodic, adaptive, on_event")  # type: ignore[valid-type]
    recompute_k: bool = Field(default=False, description="recompute K* at every re-clustering [D]")
    leader_trains: bool = Field(default=True, description="a device leader trains as a member too (with edge "
                                                          "servers as leaders there is none: false is refused) [D]")
    fraction: float = Field(
        default=1.0, gt=0.0, le=1.0,
        description="members a cluster round wants: max(⌊fraction·n_k⌋, 1) of its online members (1 = all [V])")
    sampling: SamplingKind = sampling_field("max(⌊fraction·n_k⌋, 1) of the cluster's online members, uniformly "
                                            "without replacement", "online member of a cluster")
    empty_cohort: EmptyCohort = empty_cohort_field("skip", "the cluster round passes with no update and the "
                                                           "cluster's next round begins at once")
    sync_timeout: PositiveFloat | None = Field(
        default=None, description="close a cluster round this long after it starts with what arrived [D]")
    on_leader_lost: Literal["wait", "recluster"] = Field(
        default="wait", description="a device leader found offline: its cluster waits for it [V: §2.5], "
                                    "or the cloud re-clusters at once (reason leader_lost) [D]")
    kstar: KStarConfig = KStarConfig()

    @field_validator("K", mode="before")
    @classmethod
    def _k(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("must be 'auto' or an integer number of clusters in 1..devices.count")
        return value

    def local_steps(self, training_steps: int | None) -> int:
        """H: ``protocol.H``, else ``training.steps`` (None when epochs are set), else 10 (§2.2)."""
        return self.H if self.H is not None else training_steps or 10

    def local_lr(self, training_lr: float) -> float:
        """η_l: ``protocol.lr``, else ``training.lr``."""
        return self.lr if self.lr is not None else training_lr

    def sigma(self, tau: int) -> float:
        """The staleness factor σ(τ) of the cloud's mixing weight α_τ = α·σ(τ)."""
        return (self.staleness or FedCHStaleness(a=self.a, b=self.b))(tau)

    def check(self, scenario: Scenario) -> list[Problem]:
        """K within 1..N (= E with edge leaders), K: auto needs devices and a budget, K̃ ≤ K."""
        problems: list[Problem] = []
        if self.staleness is not None and (self.non_default("a") or self.non_default("b")):
            problems.append(Problem("protocol.staleness", "set either a and b (fedch(a, b)) or staleness, not both"))
        n, e = scenario.devices.count, scenario.topology.edge_servers
        if self.K == "auto":
            if n < 3:
                problems.append(Problem("protocol.K", f"K: auto searches K in [1, ⌊(N+1)/2⌋] and needs at least "
                                        f"3 devices (got {n}); allowed here: an integer K in 1..{n}", self.K))
            elif not e and self.kstar.budget_s == "auto" and scenario.stop.virtual_time_s is None:
                problems.append(Problem("protocol.kstar.budget_s", "K: auto needs a time budget: set "
                                        "stop.virtual_time_s or protocol.kstar.budget_s (seconds > 0)"))
            lr = self.local_lr(scenario.training.lr)
            if not e and lr * self.kstar.mu >= 1:
                problems.append(Problem("protocol.kstar.mu", f"the §2.4 bound needs lr·mu < 1; allowed: "
                                        f"0 < mu < {1 / lr:g}", self.kstar.mu))
        elif self.K > n:
            problems.append(Problem("protocol.K", f"more clusters than devices; allowed: 1..{n} or auto", self.K))
        k = e if e else (self.K if isinstance(self.K, int) else None)
        if e:
            if isinstance(self.K, int) and self.K != e:
                problems.append(Problem("protocol.K", f"with edge servers the leaders are the {e} edge servers; "
                                        f"allowed: {e} or auto", self.K))
            if not self.leader_trains:
                problems.append(Problem("protocol.leader_trains", "with edge servers as leaders no device leads a "
                                        "cluster, so it would be ignored; allowed: true", self.leader_trains,
                                        refused=True))
            if self.construction != "hungarian":
                problems.append(Problem("protocol.construction", "with edge servers as fixed leaders the "
                                        "construction is a balanced assignment; allowed: hungarian",
                                        self.construction))
        for key in self.recluster.own_keys_set():
            problems.append(Problem(f"protocol.recluster.{key}", "FedCH re-clusters with its own construction (§2.3) "
                                    "and its own migration: every round in flight is withdrawn and every cluster "
                                    "restarts from the global model; leave it out",
                                    getattr(self.recluster, key)))
        if k is not None and k <= n:
            if isinstance(self.recluster, AdaptiveRecluster) and self.recluster.k_tilde > k:
                problems.append(Problem("protocol.recluster.k_tilde", f"more than the K = {k} clusters; "
                                        f"allowed: 1..{k}", self.recluster.k_tilde))
            if self.alpha_init == "fraction" and k == 1:
                problems.append(Problem("protocol.alpha_init", "fraction gives α = (K−1)/N = 0 with K = 1, so the "
                                        "cloud would never learn; allowed: one_minus, or K >= 2", self.alpha_init))
        per_cluster = max(math.floor(self.fraction * n / max(k or 1, 1) + 1e-9), 1)
        return problems + coin_problems(self, scenario, per_cluster)

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """About ``⌊N/K⌋`` members per cluster leader (unknown with ``K: auto``)."""
        k = self.K
        return {"cloud": None, "edge": max(1, devices // k) if isinstance(k, int) and k > 0 else None}

    def create(self, env: Env) -> FedCH:
        """A FedCH run."""
        return FedCH(self, env)
