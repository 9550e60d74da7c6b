"""The world a scenario describes: devices (profiles, tiers, traces), edge servers (topology) and their links.

Every random draw comes from its own named stream of the scenario seed, so the world is the
same on every machine and with any executor. The topology file and the capacity trace are
parsed here (once per file: the load-time checks share the parse).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hierfl.assemble.grouping import assign_edges
from hierfl.config.errors import ConfigError, Problem
from hierfl.core.rng import stream
from hierfl.core.world import EdgeLink, World
from hierfl.devices import shipped_tiers
from hierfl.scenario.schema import Scenario, TopologyConfig
from hierfl.topology import TopologyError, TopologyFileError, TopologySpec, layout, load_topology_file, world_fields
from hierfl.topology.grouping import GroupingInputs

__all__ = ["build_world", "tier_counts", "topology_spec"]


def tier_counts(proportions: dict[str, float], n: int) -> dict[str, int]:
    """Devices per tier: ``n`` split by proportion with the largest-remainder rule (ties: YAML order)."""
    names = list(proportions)
    total = sum(proportions.values())
    quotas = [proportions[k] / total * n for k in names]
    counts = [int(np.floor(q)) for q in quotas]
    order = sorted(range(len(names)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return dict(zip(names, counts))


def _draw_devices(scenario: Scenario, samples: np.ndarray,
                  flops: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """Per-device profile arrays (``devices:``): speed, links and access latency, seeded.

    With ``devices.tiers`` each device gets a tier (shuffled by the ``devices.tiers`` stream) and its
    figures: speed = GFLOP/s × 1e9 / (3 × F_fwd) samples/s (training ≈ 3 × forward, as FedScale),
    times a per-device lognormal factor of σ = ``compute_sigma`` (median 1); latency = RTT / 2.
    ``F_fwd`` is the forward FLOPs of the device's own model (``flops(tiers)``: per device, from
    its tier's entry of ``models:`` or ``model``).
    """
    seed, dev = scenario.seed, scenario.devices
    n = dev.count
    if dev.tiers is None:
        draws = {field: getattr(dev, field).sample(stream(seed, "devices." + field), n).astype(np.float64)
                 for field in ("speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms")}
        draws["tier"] = np.array(["custom"] * n, dtype=object)
        if dev.capacity_trace is not None:  # a FedScale / CSV trace replaces the drawn speed and bandwidths
            draws.update(dev.capacity_trace.device_profiles(n, seed))  # the trace file, parsed once
        return draws
    specs = {**shipped_tiers(), **dev.custom_tiers}
    counts = tier_counts(dev.tiers, n)
    labels = np.array([name for name, c in counts.items() for _ in range(c)], dtype=object)
    labels = labels[stream(seed, "devices.tiers").permutation(n)]
    per_sample = 3.0 * np.asarray(flops(labels), dtype=np.float64)
    gflops = np.array([specs[t].gflops for t in labels], dtype=np.float64)
    if dev.compute_sigma > 0:
        gflops = gflops * np.exp(dev.compute_sigma * stream(seed, "devices.compute_sigma").standard_normal(n))
    return {
        "speed_sps": gflops * 1e9 / per_sample,
        "uplink_mbps": np.array([specs[t].uplink_mbps for t in labels], dtype=np.float64),
        "downlink_mbps": np.array([specs[t].downlink_mbps for t in labels], dtype=np.float64),
        "latency_ms": np.array([specs[t].rtt_ms / 2.0 for t in labels], dtype=np.float64),
        "tier": labels,
    }


@dataclass
class Topology:
    """What ``topology:`` builds: edge servers, their links and capacities, the device → edge map."""

    edge_of: np.ndarray                 # (N,) int64, -1 when flat
    edge_latency_ms: np.ndarray         # (N, E)
    edge_links: list[EdgeLink]          # (E,)
    extra: dict[str, object]            # further World fields (capacities, positions, names)


def topology_spec(topo: TopologyConfig, n: int, seed: int) -> TopologySpec | None:
    """The topology file's (read once) or the generator's spec; None for plain ``edge_servers``."""
    if topo.generator is not None:
        ec = topo.edge_cloud
        return topo.generator.generate(n, seed, EdgeLink(ec.uplink_mbps, ec.downlink_mbps, ec.latency_ms))
    if topo.file is not None:
        try:
            return load_topology_file(topo.path or topo.file)
        except TopologyFileError as exc:
            raise ConfigError([Problem("topology.file", str(exc), topo.file)]) from None
    return None


def _topology(scenario: Scenario, samples: np.ndarray, draws: dict[str, np.ndarray]) -> Topology:
    """Edge servers and the device → edge assignment (``topology:``, its file or generator)."""
    seed, topo = scenario.seed, scenario.topology
    n = scenario.devices.count
    spec = topology_spec(topo, n, seed)
    e = spec.num_edges if spec is not None else int(topo.edge_servers or 0)
    edge_latency = topo.edge_latency_ms.sample(stream(seed, "topology.edge_latency_ms"), n * e).reshape(n, e)
    extra: dict[str, object] = {}
    if spec is not None:
        key = "topology.file" if topo.file is not None else "topology.generator"
        try:
            placed = layout(spec, n, seed, edge_latency)  # positions, + distance latency
        except TopologyError as exc:
            raise ConfigError([Problem(key, str(exc))]) from None
        edge_latency = placed.edge_latency_ms
        extra = world_fields(spec, placed)
    inputs = GroupingInputs(samples=samples, speed_sps=draws["speed_sps"], uplink_mbps=draws["uplink_mbps"],
                            latency_ms=draws["latency_ms"], edge_latency_ms=edge_latency, spec=spec, seed=seed)
    edge_of = assign_edges(topo, inputs)
    ec = topo.edge_cloud
    links = list(spec.edge_links) if spec is not None else \
        [EdgeLink(ec.uplink_mbps, ec.downlink_mbps, ec.latency_ms) for _ in range(e)]
    return Topology(edge_of, edge_latency.astype(np.float64), links, extra)


def build_world(scenario: Scenario, samples: np.ndarray, flops: Callable[[np.ndarray], np.ndarray]) -> World:
    """Devices (drawn profiles or tiers, or a capacity trace), edge servers and their assignment, capacities.

    ``flops(tiers)`` gives each device's forward FLOPs per sample from the devices' tier labels
    (called only with ``devices.tiers``).
    """
    draws = _draw_devices(scenario, samples, flops)
    topo = _topology(scenario, samples, draws)
    world = World(
        samples=samples.astype(np.int64),
        edge_of=topo.edge_of,
        edge_latency_ms=topo.edge_latency_ms,
        edge_links=topo.edge_links,
        model_bytes=0,
        **draws,  # type: ignore[arg-type]
        **topo.extra,  # type: ignore[arg-type]
    )
    _network_capacities(scenario, world)
    graph = scenario.topology.device_graph
    if graph is not None:  # serverless protocols: who talks to whom
        world.device_graph = graph.build(world.num_devices, scenario.seed)
    return world


def _network_capacities(scenario: Scenario, world: World) -> None:
    """``network.*_mbps``: shared capacities that override the topology's (unlimited without one)."""
    net = scenario.network
    if net.cloud_ingress_mbps is not None:
        world.cloud_ingress_mbps = float(net.cloud_ingress_mbps)
    if net.cloud_egress_mbps is not None:
        world.cloud_egress_mbps = float(net.cloud_egress_mbps)
    if net.edge_ingress_mbps is not None:
        world.edge_ingress_mbps = np.full(world.num_edges, float(net.edge_ingress_mbps))
    if net.edge_egress_mbps is not None:
        world.edge_egress_mbps = np.full(world.num_edges, float(net.edge_egress_mbps))
