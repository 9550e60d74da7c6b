"""The grouping step: the device → edge server map, from the drawn devices and the ``topology.grouping`` plug-in."""

from __future__ import annotations

import numpy as np

from hierfl.scenario.schema import TopologyConfig
from hierfl.topology.grouping import GroupingInputs

__all__ = ["assign_edges"]


def assign_edges(topo: TopologyConfig, inputs: GroupingInputs) -> np.ndarray:
    """Each device's edge server (shape (N,), int64): -1 for every device without edge servers, else
    the grouping plug-in's assignment."""
    if inputs.num_edges == 0:
        return np.full(inputs.num_devices, -1, dtype=np.int64)
    return topo.grouper.assign(inputs)
