"""A topology, whatever its origin (YAML file, GraphML file, generator), as plain frozen data.

:class:`TopologySpec` holds the edge servers, their composed links to the cloud, the shared
capacities and the rule that attaches devices to edge servers. It does not know the number of
devices: :mod:`hierfl.topology.realize` turns a spec plus ``N`` and the seed into the arrays of
the :class:`~hierfl.core.world.World`.

Routing (:func:`route`): each edge server reaches the cloud over the lowest-latency path of the
link graph (Dijkstra); the path is one end-to-end link with the summed latency and the
bottleneck bandwidth per direction (:func:`hierfl.core.topomath.compose_path`). ``up`` is the
direction toward the cloud on every link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hierfl.core.topomath import compose_path
from hierfl.core.world import D2DLink, EdgeLink

__all__ = ["EdgeServer", "LinkSpec", "RegionRule", "TopologySpec", "SpecIssue", "route", "ATTACH_MODES"]

ATTACH_MODES = ("explicit", "region", "nearest", "round_robin")
INF = math.inf


class SpecIssue(ValueError):
    """Something wrong in a topology description, at ``loc`` (a key path into the file's mapping)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class EdgeServer:
    """One edge server: name, optional position (km) and region, shared device-side capacities."""

    name: str
    xy: tuple[float, float] | None = None
    region: str | None = None
    ingress_mbps: float = INF   # shared by device → edge uploads (contention model)
    egress_mbps: float = INF    # shared by edge → device downloads


@dataclass(frozen=True)
class LinkSpec:
    """A link between two named nodes; ``up_mbps`` is the bandwidth toward the cloud."""

    a: str
    b: str
    up_mbps: float
    down_mbps: float
    latency_ms: float


@dataclass(frozen=True)
class RegionRule:
    """Devices of one region: a share of all devices (``weight``) or explicit ``devices``."""

    name: str
    edges: tuple[int, ...]                 # edge ids in this region, in file order
    weight: float | None = None
    devices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TopologySpec:
    """Everything a topology says, independent of the number of devices."""

    origin: str                                   # file path, or "generator <name>"
    edges: tuple[EdgeServer, ...]
    edge_links: tuple[EdgeLink, ...]              # composed edge ↔ cloud link per edge server
    paths: tuple[tuple[str, ...], ...]            # node names from each edge server to the cloud
    cloud_name: str = "cloud"
    cloud_xy: tuple[float, float] | None = None
    cloud_ingress_mbps: float = INF
    cloud_egress_mbps: float = INF
    attach: str = "round_robin"                   # one of ATTACH_MODES
    explicit: tuple[tuple[int, int], ...] = ()    # (device, edge) pairs
    regions: tuple[RegionRule, ...] = ()
    placement: tuple[float, float, float] | None = None       # (side_km, origin_x, origin_y)
    placement_stream: str = "topology.placement"
    device_xy: tuple[tuple[int, float, float], ...] = ()      # fixed (device, x, y) positions
    pair_latency_ms: tuple[tuple[int, int, float], ...] = ()  # (device, edge, ms) set by the file
    latency_base_ms: float = 0.0
    latency_ms_per_km: float = 0.01
    d2d: D2DLink | None = None
    lines: tuple[tuple[str, int], ...] = field(default=())    # where things are in the file

    @property
    def num_edges(self) -> int:
        """E."""
        return len(self.edges)

    def line(self, key: str) -> int | None:
        """The file line of ``key`` (e.g. ``"devices.explicit"``), when known."""
        return dict(self.lines).get(key)


def route(cloud: str, edges: list[EdgeServer], routers: list[str], links: list[LinkSpec],
          edge_locs: list[tuple[str | int, ...]]) -> tuple[list[EdgeLink], list[tuple[str, ...]]]:
    """Composed edge ↔ cloud link and path of every edge server.

    Raises :class:`SpecIssue` (at the edge server's ``edge_locs`` entry) for an edge server with
    no path to the cloud.
    """
    # imported here: networkx costs every process that loads the scenario schema about 0.2 CPU s
    # and 16 MB, and only a topology with routers and links needs it
    import networkx as nx  # noqa: PLC0415

    graph = nx.Graph()
    graph.add_node(cloud)
    graph.add_nodes_from(e.name for e in edges)
    graph.add_nodes_from(routers)
    for link in links:
        graph.add_edge(link.a, link.b, latency_ms=link.latency_ms, link=link)
    out_links: list[EdgeLink] = []
    out_paths: list[tuple[str, ...]] = []
    for edge, loc in zip(edges, edge_locs):
        try:
            path = nx.dijkstra_path(graph, edge.name, cloud, weight="latency_ms")
        except nx.NetworkXNoPath:
            raise SpecIssue(loc, f"edge server {edge.name!r} has no path to the cloud {cloud!r} "
                                 "(the topology is disconnected); add a link") from None
        hops = [(graph.edges[u, v]["link"].up_mbps, graph.edges[u, v]["link"].down_mbps,
                 graph.edges[u, v]["link"].latency_ms) for u, v in zip(path, path[1:])]
        up, down, latency = compose_path(hops)
        out_links.append(EdgeLink(up, down, latency))
        out_paths.append(tuple(path))
    return out_links, out_paths
