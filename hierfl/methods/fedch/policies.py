"""FedCH's plug-ins of the shared kinds: its staleness function (``staleness: {name: fedch}``) and its grouping
(``topology.grouping: fedch``), docs/explanation/algorithms.md §1.4, §2.3; the math is :mod:`hierfl.methods.fedch.math`."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from hierfl.methods.fedch.math import assign_to_edges, edge_distance, fedch
from hierfl.policies.staleness import STALENESS, StalenessConfig
from hierfl.topology.grouping import GROUPINGS, GroupingConfig, GroupingInputs

__all__ = ["FedCHStaleness", "FedCHGrouping"]


@STALENESS.register
class FedCHStaleness(StalenessConfig):
    """``{name: fedch, a: 5, b: 1}``: full weight up to ``a``, then τ^(−b)."""

    name: Literal["fedch"] = "fedch"
    a: float = Field(default=5.0, ge=0.0, description="staleness tolerated at full weight")
    b: float = Field(default=1.0, ge=0.0, le=100.0, description="decay exponent")

    def __call__(self, tau: int) -> float:
        """1 if τ ≤ a else τ^(−b)."""
        return fedch(tau, self.a, self.b)


@GROUPINGS.register
class FedCHGrouping(GroupingConfig):
    """FedCH §2.3 with the edge servers as fixed leaders: balanced sizes, Hungarian assignment on each
    device's arrival time at the edge (compute time per epoch + time to upload 1 MB there)."""

    name: Literal["fedch"] = "fedch"

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """The balanced assignment minimising the arrival-time distance."""
        compute = inputs.samples / inputs.speed_sps
        link = (inputs.latency_ms[:, None] + inputs.edge_latency_ms) / 1000.0 + (8.0 / inputs.uplink_mbps)[:, None]
        return assign_to_edges(edge_distance(compute, link)).cluster_of.astype(np.int64)
