"""Builders: a validated :class:`Scenario` → dataset, partition, device profiles, topology, initial model.

Every random draw comes from its own named stream of the scenario seed, so the world a
scenario describes is the same on every machine and with any executor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hierfl.config.errors import ConfigError, Problem
from hierfl.config.schema import Scenario
from hierfl.core import grouping
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, model_bytes
from hierfl.core.world import EdgeLink, World
from hierfl.data import DataError, Dataset
from hierfl.learn.local import init_params

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

    @property
    def num_params(self) -> int:
        """Model parameter count."""
        return int(self.init_params.size)


def train_spec(scenario: Scenario) -> TrainSpec:
    """The local-training job described by ``training:``."""
    t = scenario.training
    return TrainSpec(epochs=t.local_epochs, steps=t.steps, batch_size=t.batch_size, lr=t.lr,
                     momentum=t.momentum, weight_decay=t.weight_decay, **t.trainer.spec_fields())


def _draw_devices(scenario: Scenario, samples: np.ndarray) -> dict[str, np.ndarray]:
    """Per-device profile arrays (``devices:``): speed, links and access latency, seeded."""
    seed, dev = scenario.seed, scenario.devices
    n = dev.count
    return {field: getattr(dev, field).sample(stream(seed, "devices." + field), n).astype(np.float64)
            for field in ("speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms")}


@dataclass
class Topology:
    """What ``topology:`` builds: edge servers, their links and capacities, the device → edge map."""

    edge_of: np.ndarray                 # (N,) int64, -1 when flat
    edge_latency_ms: np.ndarray         # (N, E)
    edge_links: list[EdgeLink]          # (E,)
    extra: dict[str, object]            # further World fields (capacities, positions, names)


def _topology(scenario: Scenario, samples: np.ndarray, draws: dict[str, np.ndarray]) -> Topology:
    """Edge servers and the device → edge assignment (``topology:``)."""
    seed, topo = scenario.seed, scenario.topology
    n = scenario.devices.count
    e = topo.edge_servers
    edge_latency = topo.edge_latency_ms.sample(stream(seed, "topology.edge_latency_ms"), n * e).reshape(n, e)
    if e == 0:
        edge_of = np.full(n, -1, dtype=np.int64)
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
    else:
        edge_of = grouping.nearest(edge_latency)
    link = topo.edge_cloud
    return Topology(edge_of, edge_latency.astype(np.float64),
                    [EdgeLink(link.uplink_mbps, link.downlink_mbps, link.latency_ms) for _ in range(e)], {})


def _world(scenario: Scenario, samples: np.ndarray) -> World:
    draws = _draw_devices(scenario, samples)
    topo = _topology(scenario, samples, draws)
    return World(
        samples=samples.astype(np.int64),
        edge_of=topo.edge_of,
        edge_latency_ms=topo.edge_latency_ms,
        edge_links=topo.edge_links,
        model_bytes=0,
        **draws,
        **topo.extra,  # type: ignore[arg-type]
    )


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
    world = _world(scenario, samples)
    params = init_params(scenario.model, tuple(dataset.input_shape), dataset.num_classes,
                         stream_seed(seed, "model.init"))
    # one message's size: SCAFFOLD sends model and control together (payload_factor 2), both ways
    world.model_bytes = model_bytes(params.size) * scenario.training.trainer.payload_factor
    return Built(scenario, dataset, [np.asarray(p, dtype=np.int64) for p in parts], world,
                 train_spec(scenario), params)
