"""Grouping plug-ins (``topology.grouping``): which edge server each device is assigned to.

* ``round_robin`` — device ``i`` → edge ``i mod E`` (the default without a topology);
* ``random`` — a seeded random assignment with balanced sizes (stream ``topology.grouping``);
* ``nearest`` — the edge with the lowest device ↔ edge latency;
* ``kmeans`` — k-means on (log compute time per epoch, log time to upload 1 MB), one group per
  edge: groups of similar devices (docs/explanation/algorithms.md §4.3's clustering option);
* ``topology`` — as the topology file or generator says (the default with one).

Each is a config registered in :data:`GROUPINGS` with one hook, :meth:`GroupingConfig.assign`,
from the drawn devices (:class:`GroupingInputs`) to an edge id per device. The math is in
:mod:`hierfl.core.grouping`. A method package may register its own grouping here (the balanced
Hungarian assignment of Wang et al. 2021, docs/explanation/algorithms.md §2.3, is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core import grouping
from hierfl.core.rng import stream
from hierfl.topology.realize import attach
from hierfl.topology.spec import TopologySpec

__all__ = ["GROUPINGS", "GroupingConfig", "GroupingInputs", "FROM_TOPOLOGY", "RoundRobinGrouping",
           "RandomGrouping", "NearestGrouping", "KMeansGrouping", "TopologyGrouping"]

GROUPINGS: Registry = Registry("grouping")

FROM_TOPOLOGY = "topology"
"""The grouping a topology file or generator implies when ``topology.grouping`` is not set."""


@dataclass(frozen=True)
class GroupingInputs:
    """What a grouping may look at: the drawn devices, the edge servers and the seed."""

    samples: np.ndarray            # (N,) samples per device
    speed_sps: np.ndarray          # (N,) training throughput
    uplink_mbps: np.ndarray        # (N,) access uplink
    latency_ms: np.ndarray         # (N,) one-way access latency
    edge_latency_ms: np.ndarray    # (N, E) extra latency per (device, edge) pair
    spec: TopologySpec | None      # the topology file's or generator's, if any
    seed: int

    @property
    def num_devices(self) -> int:
        """N."""
        return int(self.samples.size)

    @property
    def num_edges(self) -> int:
        """E."""
        return int(self.edge_latency_ms.shape[1])

    def rng(self) -> np.random.Generator:
        """The grouping's own stream, ``(seed, "topology.grouping")``."""
        return stream(self.seed, "topology.grouping")


class GroupingConfig(ConfigModel):
    """Base of the grouping plug-ins."""

    needs_topology: ClassVar[bool] = False
    """Needs ``topology.file`` or ``topology.generator``."""

    arbitrary_ids: ClassVar[bool] = False
    """Its group ids are arbitrary (which edge server hosts which group is no part of the grouping): a
    re-grouping may renumber them to move as few devices as possible."""

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """Edge id of every device, shape (N,) int64, each in ``0..E-1`` (E >= 1)."""
        raise NotImplementedError


@GROUPINGS.register
class RoundRobinGrouping(GroupingConfig):
    """Device ``i`` → edge ``i mod E``."""

    name: Literal["round_robin"] = "round_robin"

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """``i mod E``."""
        return grouping.round_robin(inputs.num_devices, inputs.num_edges)


@GROUPINGS.register
class RandomGrouping(GroupingConfig):
    """A seeded random assignment with balanced sizes."""

    name: Literal["random"] = "random"
    arbitrary_ids: ClassVar[bool] = True

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """A permutation of ``i mod E``."""
        return grouping.random_balanced(inputs.num_devices, inputs.num_edges, inputs.rng())


@GROUPINGS.register
class NearestGrouping(GroupingConfig):
    """Each device → the edge with the lowest latency (ties → lower edge id)."""

    name: Literal["nearest"] = "nearest"

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """``argmin`` over the device's edge latencies."""
        return grouping.nearest(inputs.edge_latency_ms)


@GROUPINGS.register
class KMeansGrouping(GroupingConfig):
    """Groups of similar devices: k-means on (log compute time per epoch, log time to upload 1 MB)."""

    name: Literal["kmeans"] = "kmeans"
    arbitrary_ids: ClassVar[bool] = True

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """One k-means cluster per edge (group 0 = the fastest)."""
        compute = inputs.samples / inputs.speed_sps
        link = inputs.latency_ms / 1000.0 + 8.0 / inputs.uplink_mbps
        features = np.column_stack([np.log(compute), np.log(link)])
        return grouping.kmeans(features, inputs.num_edges, inputs.rng())


@GROUPINGS.register
class TopologyGrouping(GroupingConfig):
    """As the topology file or generator says (its attachment rule)."""

    needs_topology: ClassVar[bool] = True

    name: Literal["topology"] = "topology"

    def assign(self, inputs: GroupingInputs) -> np.ndarray:
        """The spec's attachment rule (explicit, region, nearest, round robin)."""
        if inputs.spec is None:
            raise ValueError("grouping: topology needs topology.file or topology.generator")
        return attach(inputs.spec, inputs.num_devices, inputs.edge_latency_ms)
