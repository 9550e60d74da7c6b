"""Re-clustering plug-ins of FedCH (``protocol.recluster: {name: …}``): configs that make a policy of
:mod:`hierfl.core.recluster` (Wang et al., INFOCOM 2021 / IEEE TMC 2023; docs/explanation/algorithms.md §2.5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.recluster import AdaptivePolicy, NeverPolicy, PeriodicPolicy, ReclusterPolicy

__all__ = ["RECLUSTER", "ReclusterConfig", "NeverRecluster", "PeriodicRecluster", "AdaptiveRecluster"]

RECLUSTER: Registry = Registry("re-clustering policy")


class ReclusterConfig(ConfigModel):
    """Base of the ``recluster:`` configs."""

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """The policy for ``k`` clusters over ``n`` devices."""
        raise NotImplementedError


@RECLUSTER.register
class NeverRecluster(ReclusterConfig):
    """``{name: never}``: the clusters built at start are kept."""

    name: Literal["never"] = "never"

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """A policy that never fires."""
        return NeverPolicy()


@RECLUSTER.register
class PeriodicRecluster(ReclusterConfig):
    """``{name: periodic, rho: 10}``: every ϱ·K global aggregations (never when K = 1 or K = N)."""

    name: Literal["periodic"] = "periodic"
    rho: PositiveInt = Field(default=10, description="ϱ: period in units of K global aggregations [V]")

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """``T_b = ϱ·K``, or ∞ for K ∈ {1, N}."""
        return PeriodicPolicy(None if k in (1, n) else self.rho * k)


@RECLUSTER.register
class AdaptiveRecluster(ReclusterConfig):
    """``{name: adaptive, gamma: 1.5, k_tilde: 1}``: re-cluster when K̃ clusters flagged a straggler."""

    name: Literal["adaptive"] = "adaptive"
    gamma: float = Field(default=1.5, gt=1.0, description="straggler threshold × running median round time [D]")
    k_tilde: PositiveInt = Field(default=1, description="K̃: flagged clusters that trigger re-clustering, 1..K [V]")

    def make(self, k: int, n: int) -> ReclusterPolicy:
        """Flags against the running median; fires at ``k_tilde`` flagged clusters."""
        return AdaptivePolicy(self.gamma, self.k_tilde)
