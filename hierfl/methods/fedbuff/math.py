"""FedBuff's staleness function (pure): Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated
Learning with Buffered Asynchronous Aggregation", AISTATS 2022 (arXiv 2106.06639; FLSim), docs/explanation/algorithms.md
§1.4 and §5.4."""

from __future__ import annotations

import math

from hierfl.core.staleness import check_tau, clamp

__all__ = ["fedbuff"]


def fedbuff(tau: int) -> float:
    """σ(τ) = 1 / √(1 + τ) (polynomial with a = 0.5)."""
    return clamp(1.0 / math.sqrt(1.0 + check_tau(tau)))
