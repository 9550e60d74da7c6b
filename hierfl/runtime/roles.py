"""Role logic as plain classes: device hosts, leaders and the cloud.

Actors are thin: :mod:`hierfl.runtime.ray_executor` applies ``ray.remote`` to these classes in
one place, and :class:`~hierfl.runtime.executor.LocalExecutor` calls them directly. Parameters
are one contiguous float32 vector per model; aggregation is vector arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.aggregate import weighted_average
from hierfl.core.work import TrainSpec
from hierfl.learn.local import LocalTrainer

__all__ = ["DeviceHost", "LeaderHost", "Cloud", "ModelSpec"]

ModelSpec = tuple[Any, tuple[int, ...], int, int]
"""(model config, input shape, number of classes, torch threads)."""


class DeviceHost:
    """Hosts many virtual devices: their sample indices and the local training loop."""

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray], model: ModelSpec) -> None:
        model_cfg, input_shape, num_classes, threads = model
        self.x = x_train
        self.y = y_train
        self.parts = parts
        self.trainer = LocalTrainer(model_cfg, tuple(input_shape), num_classes, torch_threads=threads)

    def train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """One local job of ``device`` starting from ``params``; seeded by ``seed`` only."""
        idx = self.parts[device]
        return self.trainer.train(params, self.x[idx], self.y[idx], spec, seed)

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True


class LeaderHost:
    """Hosts the models of one or more leaders (edge servers) and aggregates their groups."""

    def __init__(self) -> None:
        self.models: dict[int, np.ndarray] = {}
        self.versions: dict[int, int] = {}

    def aggregate(self, leader: int, weights: list[float], *vectors: np.ndarray) -> np.ndarray:
        """Sample-weighted average of the group's updates; becomes the leader's model."""
        model = weighted_average(vectors, weights)
        self.models[leader] = model
        self.versions[leader] = self.versions.get(leader, 0) + 1
        return model

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True


class Cloud:
    """The global model, its aggregation and its evaluation on the held-out test set."""

    def __init__(self, init_params: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, model: ModelSpec) -> None:
        model_cfg, input_shape, num_classes, threads = model
        self.model = np.asarray(init_params, dtype=np.float32)
        self.version = 0
        self.x_test = x_test
        self.y_test = y_test
        self.trainer = LocalTrainer(model_cfg, tuple(input_shape), num_classes, torch_threads=threads)

    def aggregate(self, weights: list[float], *vectors: np.ndarray) -> np.ndarray:
        """Weighted average of the arriving models; becomes the global model."""
        self.model = weighted_average(vectors, weights)
        self.version += 1
        return self.model

    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        """(accuracy, loss) of ``params`` on the test set."""
        return self.trainer.evaluate(params, self.x_test, self.y_test)

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True
