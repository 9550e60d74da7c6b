"""Re-clustering plug-ins (``protocol.recluster: {name: …}``), a policy of the grouping that every
hierarchical protocol takes: configs that make a policy of :mod:`hierfl.core.recluster`.

The triggers generalise the dynamic clustering (Wang et al., INFOCOM 2021 / IEEE TMC 2023;
docs/explanation/algorithms.md §2.5): ``never``, ``periodic`` (every ϱ·K group models applied at the
cloud), ``adaptive`` (round time against the group's running median; fire at K̃ flagged groups or
at a share of them) and ``on_event`` (a slowdown, a link change or churn since the last grouping).

Every config also says *how* the new groups are formed (``grouping``: a registered grouping plug-in,
or the protocol's own construction) and how a device moves (``migration``: work in flight, the
model transfer that moving costs). The protocols apply it through
:class:`hierfl.protocols.regroup.Regrouping`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.recluster import (WORLD_CHANGES, AdaptivePolicy, EventPolicy, NeverPolicy, PeriodicPolicy,
                                   ReclusterPolicy, match_labels, share_threshold)
from hierfl.topology.grouping import GROUPINGS, GroupingInputs

if TYPE_CHECKING:
    from hierfl.core.world import World

__all__ = ["RECLUSTER", "ReclusterConfig", "MigrationConfig", "NeverRecluster", "PeriodicRecluster",
           "AdaptiveRecluster", "EventRecluster"]

RECLUSTER: Registry = Registry("re-clustering policy")


@dataclass(frozen=True)
class _RegroupInputs(GroupingInputs):
    """The grouping inputs of a re-grouping: the world as it is now, and the re-grouping's own stream."""

    generator: np.random.Generator

    def rng(self) -> np.random.Generator:
        """The stream the run gave this re-grouping (not the initial grouping's)."""
        return self.generator


class MigrationConfig(ConfigModel):
    """How a device moves to another group when the groups are re-formed (design defaults)."""

    in_flight: Literal["finish", "abort"] = Field(
        default="finish",
        description="work a moving device has in flight: finish = its update still goes to the server it "
                    "started for; abort = withdrawn, its compute counted as wasted [D]")
    transfer: bool = Field(
        default=True,
        description="a moved device downloads its new edge server's model (one model transfer, counted in "
                    "bytes_device_tier and bytes_migration, traced as `migrate`) [D]")
    device_state: Literal["keep", "reset"] = Field(
        default="keep",
        description="the device's persistent local state (what a trainer keeps per device: a control c_i, "
                    "a drift h_i): keep = it moves with the device unchanged [D]; reset = forgotten, the device starts "
                    "again from zeros in its new group as a device joining afresh would (its old server's sums "
                    "keep what it contributed)")


class ReclusterConfig(ConfigModel):
    """Base of the ``recluster:`` configs: when (the subclass), how (``grouping``) and the migration."""

    grouping: GROUPINGS.name_field() | None = Field(  # type: ignore[valid-type]
        default=None,
        description="a registered grouping the new groups are formed with (nearest, kmeans, …); "
                    "null = the protocol's own (topology.grouping, or the clusters it forms itself, "
                    "e.g. by weight similarity) [D]")
    migration: MigrationConfig = Field(default_factory=MigrationConfig,
                                       description="what happens to a device that moves to another group")

    @model_validator(mode="after")
    def _grouping_measures(self) -> ReclusterConfig:
        if self.grouping is not None and GROUPINGS.get(self.grouping).needs_topology:
            raise ValueError(f"grouping: {self.grouping} is the topology's fixed attachment and cannot re-group; "
                             f"allowed: {[n for n in GROUPINGS.names() if not GROUPINGS.get(n).needs_topology]}")
        return self

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """The policy for ``k`` clusters over ``n`` devices."""
        raise NotImplementedError

    def own_keys_set(self) -> list[str]:
        """``grouping`` / ``migration`` where they differ from their defaults (a protocol that forms and moves
        its groups its own way refuses them)."""
        out = ["grouping"] if self.grouping is not None else []
        return out + (["migration"] if self.migration != MigrationConfig() else [])

    def every_rounds(self) -> int | None:
        """A fixed period in synchronous rounds, for a protocol that must know before a round whether it
        re-clusters (e.g. a round that relays every update to the cloud); None: no fixed period."""
        return None

    def regroup(self, world: World, slowdown: np.ndarray, rng: np.random.Generator, fallback: str,
                current: np.ndarray) -> np.ndarray:
        """New group (edge id) of every device, by ``grouping`` (or ``fallback``, the protocol's own) on the
        world as it is now: each device's throughput divided by its ``slowdown`` factor now, the links as
        link events left them. ``rng``: the re-grouping's stream (random and k-means seeding). A grouping
        whose ids are arbitrary is renumbered to keep as many devices as possible on their ``current``
        edge server [D]."""
        name = self.grouping or fallback
        inputs = _RegroupInputs(world.samples, world.speed_sps / np.asarray(slowdown, dtype=np.float64),
                                world.uplink_mbps, world.latency_ms, world.edge_latency_ms, None, 0, rng)
        grouper = GROUPINGS.get(name).model_validate({"name": name})
        labels = np.asarray(grouper.assign(inputs), dtype=np.int64)
        if grouper.arbitrary_ids:
            labels = match_labels(current, labels, inputs.num_edges)
        return labels


@RECLUSTER.register
class NeverRecluster(ReclusterConfig):
    """``{name: never}``: the groups built at start are kept."""

    name: Literal["never"] = "never"

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """A policy that never fires."""
        return NeverPolicy()


@RECLUSTER.register
class PeriodicRecluster(ReclusterConfig):
    """``{name: periodic, rho: 10}``: every ϱ·K group models applied at the cloud (never when K = 1 or K = N);
    in a synchronous protocol that is every ϱ cloud rounds."""

    name: Literal["periodic"] = "periodic"
    rho: PositiveInt = Field(default=10, description="ϱ: period in units of K global aggregations [V]")

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """``T_b = ϱ·K``, or ∞ for K ∈ {1, N}."""
        return PeriodicPolicy(None if k in (1, n) else self.rho * k)

    def every_rounds(self) -> int | None:
        """ϱ rounds (a synchronous round applies every group's model once: ϱ·K group models)."""
        return self.rho


@RECLUSTER.register
class AdaptiveRecluster(ReclusterConfig):
    """``{name: adaptive, gamma: 1.5, k_tilde: 1}``: re-cluster when K̃ groups (or a share of them) flagged a
    straggler round, one lasting more than γ × the group's running median."""

    name: Literal["adaptive"] = "adaptive"
    gamma: float = Field(default=1.5, gt=1.0, description="straggler threshold × running median round time [D]")
    k_tilde: PositiveInt = Field(default=1, description="K̃: flagged clusters that trigger re-clustering, 1..K [V]")
    share: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="instead of k_tilde: fire when at least ⌈share·K⌉ groups are flagged (null: use k_tilde) [D]")

    @model_validator(mode="after")
    def _one_threshold(self) -> AdaptiveRecluster:
        # (k_tilde at its default 1 with a share is what a resolved config holds: accepted, share decides)
        if self.share is not None and self.k_tilde != 1:
            raise ValueError("give k_tilde or share, not both")
        return self

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """Flags against the running median; fires at ``k_tilde`` (or ``⌈share·K⌉``) flagged groups."""
        return AdaptivePolicy(self.gamma, self.k_tilde if self.share is None else share_threshold(self.share, k))


@RECLUSTER.register
class EventRecluster(ReclusterConfig):
    """``{name: on_event, watch: [slowdown, link, churn]}``: re-group at the first decision point after the
    world changed in a watched way (a slowdown began or ended, a link changed, a device left or came back)."""

    name: Literal["on_event"] = "on_event"
    watch: list[Literal["slowdown", "link", "churn"]] = Field(
        default_factory=lambda: list(WORLD_CHANGES), min_length=1,
        description="the kinds of world change that trigger a re-grouping: slowdown, link, churn [D]")

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """Fires when a watched kind changed."""
        return EventPolicy(tuple(self.watch))
