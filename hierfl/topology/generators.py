"""Topology generators (``topology.generator``): star, two-tier tree, random geometric.

Each is a plug-in config registered by its YAML name; :meth:`generate` returns the same
:class:`TopologySpec` a topology file gives, so the rest of the build does not care where a
topology came from. ``link`` is the scenario's ``topology.edge_cloud`` link.

* ``star`` — the cloud and ``edges`` edge servers, each linked to the cloud directly by the
  ``edge_cloud`` link; devices attach round robin.
* ``tree`` — two tiers: cloud → ``regions`` regional aggregation nodes (``region_link``,
  default ``edge_cloud``) → ``edges_per_region`` edge servers each (``edge_link``). An edge
  server's path to the cloud is the composition of its two hops: latencies add, bandwidth is
  the bottleneck. Devices are split over the regions by ``region_shares`` (equal by default;
  contiguous blocks of device ids, largest remainder) and round robin over a region's edges.
* ``random_geometric`` — edge servers, then devices, placed uniformly in a square of side
  ``area_km`` from the stream ``topology.generator``; the cloud sits at ``cloud_km`` (default
  the centre). Device ↔ edge latency is ``base_ms + ms_per_km · distance`` on top of the drawn
  ``edge_latency_ms``; edge ↔ cloud latency is ``edge_cloud.latency_ms + ms_per_km ·
  distance``; devices attach to the nearest (lowest-latency) edge server.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.rng import stream
from hierfl.core.topomath import compose_path, distance_latency_ms, pairwise_km, uniform_square
from hierfl.core.world import D2DLink, EdgeLink
from hierfl.topology.spec import EdgeServer, RegionRule, TopologySpec

__all__ = ["GENERATORS", "GeneratorConfig", "StarGenerator", "TreeGenerator", "RandomGeometricGenerator",
           "HopLink"]

GENERATORS = Registry("topology generator")


def _inf(value: float | None) -> float:
    return math.inf if value is None else float(value)


class HopLink(ConfigModel):
    """One hop of a generated tree."""

    uplink_mbps: float = Field(default=1000.0, gt=0, description="edge → cloud bandwidth, Mbit/s")
    downlink_mbps: float = Field(default=1000.0, gt=0, description="cloud → edge bandwidth, Mbit/s")
    latency_ms: float = Field(default=5.0, ge=0, allow_inf_nan=False, description="one-way latency of the hop, ms")


class GeneratorConfig(ConfigModel):
    """Keys every generator takes: the shared capacities (null = unlimited)."""

    name: str
    edge_ingress_mbps: float | None = Field(default=None, gt=0, description="each edge server, device uploads")
    edge_egress_mbps: float | None = Field(default=None, gt=0, description="each edge server, device downloads")
    cloud_ingress_mbps: float | None = Field(default=None, gt=0, description="capacity shared by every transfer into the cloud (null = unlimited)")
    cloud_egress_mbps: float | None = Field(default=None, gt=0, description="capacity shared by every transfer out of the cloud (null = unlimited)")

    @property
    def num_edges(self) -> int:
        """How many edge servers the generator makes."""
        raise NotImplementedError

    def generate(self, n: int, seed: int, link: EdgeLink) -> TopologySpec:
        """The spec for ``n`` devices; ``link`` is ``topology.edge_cloud``."""
        raise NotImplementedError

    def _edge(self, name: str, xy: tuple[float, float] | None = None, region: str | None = None) -> EdgeServer:
        return EdgeServer(name, xy, region, _inf(self.edge_ingress_mbps), _inf(self.edge_egress_mbps))

    def _spec(self, **fields: Any) -> TopologySpec:
        return TopologySpec(cloud_ingress_mbps=_inf(self.cloud_ingress_mbps),
                            cloud_egress_mbps=_inf(self.cloud_egress_mbps), **fields)


@GENERATORS.register
class StarGenerator(GeneratorConfig):
    """Cloud + ``edges`` edge servers, each directly linked to the cloud by ``topology.edge_cloud``."""

    name: Literal["star"] = "star"
    edges: PositiveInt = Field(description="number of edge servers")

    @classmethod
    def example(cls) -> StarGenerator:
        """A minimal valid config (conformance tests)."""
        return cls(edges=2)

    @property
    def num_edges(self) -> int:
        """E = ``edges``."""
        return self.edges

    def generate(self, n: int, seed: int, link: EdgeLink) -> TopologySpec:
        """Round-robin attachment, identical links."""
        edges = tuple(self._edge(f"edge{k}") for k in range(self.edges))
        return self._spec(origin="topology.generator (star)", edges=edges, edge_links=(link,) * self.edges,
                          paths=tuple((e.name, "cloud") for e in edges), attach="round_robin")


@GENERATORS.register
class TreeGenerator(GeneratorConfig):
    """Cloud → regional aggregation nodes → edge servers (two tiers)."""

    name: Literal["tree"] = "tree"
    regions: PositiveInt = Field(description="regional aggregation points")
    edges_per_region: PositiveInt = Field(description="edge servers under each region")
    edge_link: HopLink = HopLink()
    region_link: HopLink | None = Field(default=None, description="aggregation → cloud; null = topology.edge_cloud")
    region_shares: list[float] | None = Field(default=None, description="share of devices per region; null = equal")

    @classmethod
    def example(cls) -> TreeGenerator:
        """A minimal valid config (conformance tests)."""
        return cls(regions=2, edges_per_region=1)

    @model_validator(mode="after")
    def _shares(self) -> TreeGenerator:
        if self.region_shares is not None:
            if len(self.region_shares) != self.regions:
                raise ValueError(f"region_shares needs {self.regions} entries (one per region), "
                                 f"got {len(self.region_shares)}")
            if any(not (math.isfinite(s) and s >= 0) for s in self.region_shares) or \
                    abs(sum(self.region_shares) - 1.0) > 1e-6:
                raise ValueError(f"region_shares must be >= 0 and sum to 1, got {self.region_shares}")
        return self

    @property
    def num_edges(self) -> int:
        """E = ``regions · edges_per_region``."""
        return self.regions * self.edges_per_region

    def generate(self, n: int, seed: int, link: EdgeLink) -> TopologySpec:
        """Composed two-hop links; attachment by region."""
        top = self.region_link
        upper = (top.uplink_mbps, top.downlink_mbps, top.latency_ms) if top is not None else \
            (link.uplink_mbps, link.downlink_mbps, link.latency_ms)
        lower = (self.edge_link.uplink_mbps, self.edge_link.downlink_mbps, self.edge_link.latency_ms)
        up, down, latency = compose_path([lower, upper])
        edges: list[EdgeServer] = []
        paths: list[tuple[str, ...]] = []
        rules: list[RegionRule] = []
        shares = self.region_shares or [1.0 / self.regions] * self.regions
        for r in range(self.regions):
            ids = []
            for k in range(self.edges_per_region):
                ids.append(len(edges))
                edges.append(self._edge(f"r{r}e{k}", region=f"region{r}"))
                paths.append((f"r{r}e{k}", f"agg{r}", "cloud"))
            rules.append(RegionRule(f"region{r}", tuple(ids), weight=float(shares[r])))
        return self._spec(origin="topology.generator (tree)", edges=tuple(edges),
                          edge_links=(EdgeLink(up, down, latency),) * len(edges), paths=tuple(paths),
                          attach="region", regions=tuple(rules))


@GENERATORS.register
class RandomGeometricGenerator(GeneratorConfig):
    """Edge servers and devices uniform in a square; latency from distance; nearest attachment."""

    name: Literal["random_geometric"] = "random_geometric"
    edges: PositiveInt = Field(description="number of edge servers")
    area_km: float = Field(default=10.0, gt=0, allow_inf_nan=False, description="side of the square the nodes are placed in, km")
    base_ms: float = Field(default=1.0, ge=0, allow_inf_nan=False, description="device ↔ edge latency at 0 km")
    ms_per_km: float = Field(default=0.01, ge=0, allow_inf_nan=False, description="extra latency per km of distance")
    cloud_km: tuple[float, float] | None = Field(default=None, description="null = the centre of the square")
    d2d_latency_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False,
                                         description="device ↔ device latency at 0 km; null = no d2d rule")
    d2d_bandwidth_mbps: float | None = Field(default=None, gt=0, description="cap of a device-to-device hop, Mbit/s (null = the devices' own links)")

    @classmethod
    def example(cls) -> RandomGeometricGenerator:
        """A minimal valid config (conformance tests)."""
        return cls(edges=2)

    @property
    def num_edges(self) -> int:
        """E = ``edges``."""
        return self.edges

    def generate(self, n: int, seed: int, link: EdgeLink) -> TopologySpec:
        """Draw positions (edge servers first, then devices) from ``topology.generator``."""
        rng = stream(seed, "topology.generator")
        edge_xy = uniform_square(rng, self.edges, self.area_km)
        device_xy = uniform_square(rng, n, self.area_km)
        cloud = np.asarray(self.cloud_km if self.cloud_km is not None else (self.area_km / 2, self.area_km / 2))
        to_cloud = distance_latency_ms(pairwise_km(edge_xy, cloud)[:, 0], link.latency_ms, self.ms_per_km)
        edges = tuple(self._edge(f"edge{k}", (float(x), float(y))) for k, (x, y) in enumerate(edge_xy))
        d2d = None
        if self.d2d_latency_ms is not None or self.d2d_bandwidth_mbps is not None:
            d2d = D2DLink(self.d2d_latency_ms or 0.0, self.ms_per_km, _inf(self.d2d_bandwidth_mbps))
        return self._spec(
            origin="topology.generator (random_geometric)", edges=edges,
            edge_links=tuple(EdgeLink(link.uplink_mbps, link.downlink_mbps, float(t)) for t in to_cloud),
            paths=tuple((e.name, "cloud") for e in edges), cloud_xy=(float(cloud[0]), float(cloud[1])),
            attach="nearest", device_xy=tuple((i, float(x), float(y)) for i, (x, y) in enumerate(device_xy)),
            latency_base_ms=self.base_ms, latency_ms_per_km=self.ms_per_km, d2d=d2d)
