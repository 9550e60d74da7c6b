"""``build``: a validated :class:`Scenario` → dataset, partition, world, dynamics and initial model.

Every random draw comes from its own named stream of the scenario seed, so what a scenario
describes is the same on every machine and with any executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hierfl.build.dynamics import availability_labels, build_dynamics
from hierfl.build.world import build_world
from hierfl.config.errors import ConfigError, Problem
from hierfl.core.dynamics import Dynamics
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, model_bytes
from hierfl.core.world import World
from hierfl.data import DataError, Dataset
from hierfl.learn.local import forward_flops, init_params
from hierfl.scenario.schema import Scenario

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
    availability_labels: list[str] = field(default_factory=list)
    """Per device, what ``devices.csv`` says about its availability (``always``, ``markov``, ``trace``, …)."""

    def __post_init__(self) -> None:
        if self.dynamics is None:
            self.dynamics = Dynamics.static(self.world.num_devices)
        if not self.availability_labels:
            self.availability_labels = availability_labels(self.scenario, self.dynamics)

    @property
    def num_params(self) -> int:
        """Model parameter count."""
        return int(self.init_params.size)


def train_spec(scenario: Scenario) -> TrainSpec:
    """The local-training job described by ``training:``."""
    t = scenario.training
    return TrainSpec(epochs=t.local_epochs, steps=t.steps, batch_size=t.batch_size, lr=t.lr,
                     momentum=t.momentum, weight_decay=t.weight_decay, **t.trainer.spec_fields())


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
        world = build_world(scenario, samples, lambda: forward_flops(scenario.model, shape, classes))
        params = init_params(scenario.model, shape, classes, stream_seed(seed, "model.init"))
        # one message's size: SCAFFOLD sends model and control together (payload_factor 2), both ways
        world.model_bytes = model_bytes(params.size) * scenario.training.trainer.payload_factor
        dynamics = build_dynamics(scenario, world)
    except ConfigError as exc:  # topology or trace problems found while building: name the scenario file
        raise ConfigError(exc.problems, source) from None
    return Built(scenario, dataset, [np.asarray(p, dtype=np.int64) for p in parts], world,
                 train_spec(scenario), params, dynamics, availability_labels(scenario, dynamics))
