"""Builders: a validated :class:`Scenario` → dataset, partition, device profiles, topology, initial model.

Every random draw comes from its own named stream of the scenario seed, so the world a
scenario describes is the same on every machine and with any executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hierfl.config.errors import ConfigError, Problem
from hierfl.config.schema import Scenario
from hierfl.core import grouping
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, model_bytes
from hierfl.core.world import EdgeLink, World
from hierfl.data import DataError, Dataset
from hierfl.config.dynamics import shipped_tiers
from hierfl.core.dynamics import Dynamics
from hierfl.dynamics_build import build_dynamics
from hierfl.learn.local import forward_flops, init_params
from hierfl.topology import TopologyError, attach, layout, world_fields

__all__ = ["Built", "build", "train_spec"]


@dataclass
class Built:
    """Everything a run needs before the first event."""

    scenario: Scenario
    dataset: Dataset
    parts: list[np.ndarray]
    world: World
    spec: TrainSpec
    init_params: np.ndarray
    dynamics: Dynamics | None = None

    def __post_init__(self) -> None:
        if self.dynamics is None:
            self.dynamics = Dynamics.static(self.world.num_devices)

    @property
    def num_params(self) -> int:
        """Model parameter count."""
        return int(self.init_params.size)


def train_spec(scenario: Scenario) -> TrainSpec:
    """The local-training job described by ``training:``."""
    t = scenario.training
    return TrainSpec(epochs=t.local_epochs, steps=t.steps, batch_size=t.batch_size, lr=t.lr,
                     momentum=t.momentum, weight_decay=t.weight_decay, **t.trainer.spec_fields())


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


def _draw_devices(scenario: Scenario, samples: np.ndarray, flops: Callable[[], int]) -> dict[str, np.ndarray]:
    """Per-device profile arrays (``devices:``): speed, links and access latency, seeded.

    With ``devices.tiers`` each device gets a tier (shuffled by the ``devices.tiers`` stream) and its
    figures: speed = GFLOP/s × 1e9 / (3 × F_fwd) samples/s (training ≈ 3 × forward, as FedScale),
    times a per-device lognormal factor of σ = ``compute_sigma`` (median 1); latency = RTT / 2.
    """
    seed, dev = scenario.seed, scenario.devices
    n = dev.count
    if dev.tiers is None:
        draws = {field: getattr(dev, field).sample(stream(seed, "devices." + field), n).astype(np.float64)
                 for field in ("speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms")}
        draws["tier"] = np.array(["custom"] * n, dtype=object)
        if dev.capacity_trace is not None:  # a FedScale / CSV trace replaces the drawn speed and bandwidths
            draws.update(dev.capacity_trace.device_profiles(n, seed))
        return draws
    specs = {**shipped_tiers(), **dev.custom_tiers}
    counts = tier_counts(dev.tiers, n)
    labels = np.array([name for name, c in counts.items() for _ in range(c)], dtype=object)
    labels = labels[stream(seed, "devices.tiers").permutation(n)]
    per_sample = 3.0 * float(flops())
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


def _topology(scenario: Scenario, samples: np.ndarray, draws: dict[str, np.ndarray]) -> Topology:
    """Edge servers and the device → edge assignment (``topology:``, its file or generator)."""
    seed, topo = scenario.seed, scenario.topology
    n = scenario.devices.count
    spec = topo.topology_spec(n, seed)
    e = spec.num_edges if spec is not None else topo.edge_servers
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
    if e == 0:
        edge_of = np.full(n, -1, dtype=np.int64)
    elif topo.grouping == "topology" and spec is not None:
        edge_of = attach(spec, n, edge_latency)
    elif topo.grouping == "round_robin":
        edge_of = grouping.round_robin(n, e)
    elif topo.grouping == "random":
        edge_of = grouping.random_balanced(n, e, stream(seed, "topology.grouping"))
    elif topo.grouping == "kmeans":
        # groups of similar devices (AHFL §4.3's clustering option): compute and link times
        compute = samples / draws["speed_sps"]
        link = draws["latency_ms"] / 1000.0 + 8.0 / draws["uplink_mbps"]
        features = np.column_stack([np.log(compute), np.log(link)])
        edge_of = grouping.kmeans(features, e, stream(seed, "topology.grouping"))
    elif topo.grouping == "fedch":
        # FedCH §2.3 with the edge servers as fixed leaders: balanced sizes, Hungarian assignment on
        # each device's arrival time at the edge (compute time per epoch + time to upload 1 MB there)
        from hierfl.core.fedch_clusters import assign_to_edges, edge_distance

        compute = samples / draws["speed_sps"]
        link = (draws["latency_ms"][:, None] + edge_latency) / 1000.0 + (8.0 / draws["uplink_mbps"])[:, None]
        edge_of = assign_to_edges(edge_distance(compute, link)).cluster_of.astype(np.int64)
    else:
        edge_of = grouping.nearest(edge_latency)
    ec = topo.edge_cloud
    links = list(spec.edge_links) if spec is not None else \
        [EdgeLink(ec.uplink_mbps, ec.downlink_mbps, ec.latency_ms) for _ in range(e)]
    return Topology(edge_of, edge_latency.astype(np.float64), links, extra)


def _world(scenario: Scenario, samples: np.ndarray, flops: Callable[[], int]) -> World:
    draws = _draw_devices(scenario, samples, flops)
    topo = _topology(scenario, samples, draws)
    return World(
        samples=samples.astype(np.int64),
        edge_of=topo.edge_of,
        edge_latency_ms=topo.edge_latency_ms,
        edge_links=topo.edge_links,
        model_bytes=0,
        **draws,  # type: ignore[arg-type]
        **topo.extra,  # type: ignore[arg-type]
    )


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


def build(scenario: Scenario, source: str | None = None) -> Built:
    """Generate the data, split it, draw the profiles, assign edges and initialise the model.

    Raises :class:`ConfigError` (with the key path) when the scenario is valid on its own
    but cannot be built, e.g. a partition that cannot give every device a sample.
    """
    seed, n = scenario.seed, scenario.devices.count
    try:
        dataset = scenario.data.dataset.build(n, stream(seed, "data.dataset"))
        parts = scenario.data.partition.split(dataset, n, stream(seed, "data.partition"))
    except DataError as exc:
        raise ConfigError([Problem("data." + exc.key, exc.message)], source) from None
    reason = scenario.model.check_dataset(tuple(dataset.input_shape), dataset.vocab_size)
    if reason is not None:
        raise ConfigError([Problem("model", reason)], source)
    samples = np.array([len(p) for p in parts], dtype=np.int64)
    shape, classes = tuple(dataset.input_shape), dataset.num_classes
    try:
        world = _world(scenario, samples, lambda: forward_flops(scenario.model, shape, classes))
    except ConfigError as exc:  # topology or trace problems found while building: name the scenario file
        raise ConfigError(exc.problems, source) from None
    params = init_params(scenario.model, shape, classes, stream_seed(seed, "model.init"))
    # one message's size: SCAFFOLD sends model and control together (payload_factor 2), both ways
    _network_capacities(scenario, world)
    world.model_bytes = model_bytes(params.size) * scenario.training.trainer.payload_factor
    dynamics = build_dynamics(scenario, world, source)
    return Built(scenario, dataset, [np.asarray(p, dtype=np.int64) for p in parts], world,
                 train_spec(scenario), params, dynamics)
