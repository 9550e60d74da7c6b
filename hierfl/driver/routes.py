"""Routes through the emulated network: which links a transfer crosses, its latency, what it counts.

A route is found from the world (the device's access links, its edge server's ingress and egress,
the cloud's, the edge ↔ cloud links, a topology's device-to-device rule). The common transfer, a
model between a device and its edge server, takes the device's cached :class:`Route` for that
direction: formed on its first transfer and kept while the device stays with that edge and its
latency does not change. The cache also keeps the finite-capacity links that
:meth:`~hierfl.kernel.network.FlowNetwork.add` found for the route, valid while the network's
``capacity_changes`` is what it was then (no capacity lookups per transfer).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np

from hierfl.core.jobs import Endpoint
from hierfl.core.world import World
from hierfl.kernel.network import FlowNetwork

__all__ = ["Route", "Routes"]

# what each kind of transfer adds its bytes to, and whether it is a message to or from the cloud
_COUNTED: dict[str, tuple[tuple[str, ...], bool]] = {
    "device_edge": (("bytes_device_tier",), False),
    "device_cloud": (("bytes_device_tier", "bytes_cloud"), True),
    "edge_cloud": (("bytes_edge_tier", "bytes_cloud"), True),
    "device_device": (("bytes_d2d",), False),
}


class Route:
    """One way through the network: its kind, links, one-way latency and the ends it concerns.

    ``counted``: the byte counters a transfer over it adds to; ``cloud_message``: it counts as a
    message of the cloud. ``finite``/``known``: the links of finite capacity the network found
    for it, and the network's ``capacity_changes`` then (-1: not known yet).
    """

    __slots__ = ("kind", "links", "latency_s", "devices", "servers", "counted", "cloud_message", "edge",
                 "finite", "known")

    def __init__(self, kind: str, links: tuple[Hashable, ...], latency_s: float, devices: tuple[int, ...],
                 servers: tuple[Endpoint, ...], edge: int = -1) -> None:
        self.kind = kind
        self.links = links
        self.latency_s = latency_s
        self.devices = devices
        self.servers = servers      # its edge-server / cloud ends (a server's failure cuts it)
        self.counted, self.cloud_message = _COUNTED[kind]
        self.edge = edge            # the edge server of a device ↔ edge route (its cache key)
        self.finite: tuple[Hashable, ...] | None = None
        self.known = -1

    def __repr__(self) -> str:
        return f"Route({self.kind!r}, links={self.links!r}, latency_s={self.latency_s!r})"


class Routes:
    """The routes of one run's world, and each device's cached routes to and from its edge server."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.net: FlowNetwork | None = None  # the run's flow network (a device-to-device rule adds links to it)
        n = world.num_devices
        # the device ↔ edge links' keys, made once: every route and flow over them shares these tuples
        self._up_key = [("up", d) for d in range(n)]
        self._down_key = [("down", d) for d in range(n)]
        self._in_key = [("edge_in", e) for e in range(len(world.edge_links))]
        self._out_key = [("edge_out", e) for e in range(len(world.edge_links))]
        self._up: list[Route | None] = [None] * n     # per device: its route to its edge server
        self._down: list[Route | None] = [None] * n   # and from it

    def capacities(self) -> dict[Hashable, float]:
        """Every link's capacity in Mbps at the start of the run (``inf``: never shared)."""
        w = self.world
        cap: dict[Hashable, float] = {("cloud_in",): w.cloud_ingress_mbps, ("cloud_out",): w.cloud_egress_mbps}
        cap.update(zip(self._up_key, np.asarray(w.uplink_mbps, dtype=np.float64).tolist()))
        cap.update(zip(self._down_key, np.asarray(w.downlink_mbps, dtype=np.float64).tolist()))
        assert w.edge_ingress_mbps is not None and w.edge_egress_mbps is not None
        for e, link in enumerate(w.edge_links):
            cap[("edge_up", e)] = link.uplink_mbps
            cap[("edge_down", e)] = link.downlink_mbps
            cap[self._in_key[e]] = float(w.edge_ingress_mbps[e])
            cap[self._out_key[e]] = float(w.edge_egress_mbps[e])
        return cap

    def access(self, device: int, edge: int, up: bool) -> Route:
        """``device`` → ``edge`` (``up``) or back: the device's cached route for that direction."""
        cache = self._up if up else self._down
        route = cache[device]
        if route is None or route.edge != edge:
            links = ((self._up_key[device], self._in_key[edge]) if up else
                     (self._out_key[edge], self._down_key[device]))
            w = self.world
            # ndarray.item: the same Python float as float(array[i]), without the numpy scalar
            lat = w.edge_latency_ms
            extra = lat.item(device, edge) if lat.shape[1] > edge else 0.0
            route = cache[device] = Route("device_edge", links, (w.latency_ms.item(device) + extra) / 1000.0,
                                          (device,), (("edge", edge),), edge)
        return route

    def forget(self, device: int) -> None:
        """``device``'s latency changed: its cached routes are formed again on their next use."""
        self._up[device] = self._down[device] = None

    def between(self, src: Endpoint, dst: Endpoint) -> Route:
        """The route ``src → dst`` between any two ends (device ↔ edge ones: :meth:`access`)."""
        w = self.world
        (a, i), (b, j) = src, dst
        if a == "device" and b == "edge":
            return self.access(int(i), int(j), True)
        if a == "edge" and b == "device":
            return self.access(int(j), int(i), False)
        if a == "device" and b == "device":
            # both access links are crossed (docs/explanation/algorithms.md §1.2); a topology's d2d rule
            # sets the latency and may cap the hop's bandwidth: a private link per (src, dst) pair,
            # shared only by concurrent hops between the same two devices
            # A device graph's link with a bandwidth of its own is a dedicated link instead of the access links.
            own = w.device_graph.link(i, j) if w.device_graph is not None else None
            if own is not None and math.isfinite(own[0]):
                assert self.net is not None, "Routes.net first"
                self.net.capacity.setdefault(("d2d", i, j), own[0])
                return Route("device_device", (("d2d", i, j),), w.d2d_latency_ms(i, j) / 1000.0, (i, j), ())
            links: list[Any] = [("up", i), ("down", j)]
            cap = w.d2d_link.bandwidth_mbps if w.d2d_link is not None else math.inf
            if math.isfinite(cap):
                assert self.net is not None, "Routes.net first"
                self.net.capacity.setdefault(("d2d", i, j), cap)
                links.append(("d2d", i, j))
            return Route("device_device", tuple(links), w.d2d_latency_ms(i, j) / 1000.0, (i, j), ())
        if {a, b} == {"device", "cloud"}:
            d = i if a == "device" else j
            server = dst if a == "device" else src
            pair = (("up", d), ("cloud_in",)) if a == "device" else (("cloud_out",), ("down", d))
            return Route("device_cloud", pair, w.link_latency_ms(d) / 1000.0, (d,), (server,))
        if {a, b} == {"edge", "cloud"}:
            e = i if a == "edge" else j
            pair = (("edge_up", e), ("cloud_in",)) if a == "edge" else (("cloud_out",), ("edge_down", e))
            return Route("edge_cloud", pair, w.edge_links[e].latency_ms / 1000.0, (), (src, dst))
        raise ValueError(f"no route {src} → {dst}")
