"""FedBuff's staleness function as a ``staleness:`` plug-in (``{name: fedbuff}``), docs/explanation/algorithms.md §1.4, §5.4."""

from __future__ import annotations

from typing import Literal

from hierfl.methods.fedbuff.math import fedbuff
from hierfl.policies.staleness import STALENESS, StalenessConfig

__all__ = ["FedBuffStaleness"]


@STALENESS.register
class FedBuffStaleness(StalenessConfig):
    """``{name: fedbuff}``: σ(τ) = 1/√(1+τ)."""

    name: Literal["fedbuff"] = "fedbuff"

    def __call__(self, tau: int) -> float:
        """1/√(1+τ)."""
        return fedbuff(tau)
