"""Role logic as plain classes: device hosts, leaders and the cloud.

Actors are thin: :mod:`hierfl.runtime.ray_executor` applies ``ray.remote`` to these classes in
one place, and :class:`~hierfl.runtime.executor.LocalExecutor` calls them directly. Parameters
are one contiguous float32 vector per model; aggregation is vector arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.aggregate import WeightedSum, linear_combination
from hierfl.core.work import TrainSpec
from hierfl.learn.local import LocalTrainer

__all__ = ["DeviceHost", "LeaderHost", "Cloud", "ModelSpec", "average_rows", "combine_packed"]

ModelSpec = tuple[Any, tuple[int, ...], int, int]
"""(model config, input shape, number of classes, torch threads)."""


def _pick(array: np.ndarray, row: int | None) -> np.ndarray:
    """A whole vector, or one row (zero-copy view) of a batch of results."""
    return array if row is None else array[row]


def average_rows(weights: list[float], index: list[int], rows: list[int | None],
                 *arrays: np.ndarray) -> np.ndarray:
    """Weighted average of model ``k`` = ``arrays[index[k]]`` (row ``rows[k]``), summed in the given order."""
    acc = WeightedSum()
    for k, w in enumerate(weights):
        acc.add(_pick(arrays[index[k]], rows[k]), w)
    return acc.result()

def combine_packed(coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                   minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
    """:func:`~hierfl.core.aggregate.linear_combination` of packed terms: term ``j`` is
    ``coefs[j] · (arrays[plus[j]] − arrays[minus[j]])`` (rows picked; ``minus[j] < 0``: no subtrahend)."""
    terms = [(c, _pick(arrays[p], pr), None if m < 0 else _pick(arrays[m], mr))
             for c, p, pr, m, mr in zip(coefs, plus, plus_rows, minus, minus_rows)]
    return linear_combination(terms)


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

    def train_many(self, devices: list[int], seeds: list[int], spec: TrainSpec, param_index: list[int],
                   param_rows: list[int | None], *param_arrays: np.ndarray) -> tuple[np.ndarray, list[dict[str, float]]]:
        """Several jobs in one call (the Ray executor's batching): results are the rows of one array.

        Job ``k`` starts from ``param_arrays[param_index[k]]`` (or its row ``param_rows[k]``).
        Each job is exactly :meth:`train`, so batching never changes a result.
        """
        out: np.ndarray | None = None
        stats = []
        for k, (device, seed) in enumerate(zip(devices, seeds)):
            vec, st = self.train(device, seed, spec, _pick(param_arrays[param_index[k]], param_rows[k]))
            if out is None:
                out = np.empty((len(devices), vec.size), dtype=np.float32)
            out[k] = vec
            stats.append(st)
        assert out is not None
        return out, stats

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True

    def warmup(self, spec: TrainSpec, params: np.ndarray) -> bool:
        """Run one short throw-away job: the first job of a process pays torch's lazy start-up
        (about a second), which belongs to start-up time, not to the first emulated round."""
        short = TrainSpec(epochs=None, steps=2, batch_size=spec.batch_size, lr=spec.lr,
                          momentum=spec.momentum, weight_decay=spec.weight_decay)
        self.train(0, 0, short, params)
        return True


class LeaderHost:
    """Hosts the models of one or more leaders (edge servers) and aggregates their groups."""

    def __init__(self) -> None:
        self.models: dict[int, np.ndarray] = {}
        self.versions: dict[int, int] = {}
        self._pending: dict[int, WeightedSum] = {}

    def add(self, leader: int, weight: float, vector: np.ndarray) -> None:
        """Fold one arriving update into the leader's running weighted sum."""
        self._pending.setdefault(leader, WeightedSum()).add(vector, weight)

    def add_many(self, leaders: list[int], weights: list[float], index: list[int], rows: list[int | None],
                 *arrays: np.ndarray) -> None:
        """Several :meth:`add` calls in one, in order: update ``k`` is ``arrays[index[k]]`` (row ``rows[k]``)."""
        for k, (leader, w) in enumerate(zip(leaders, weights)):
            self.add(leader, w, _pick(arrays[index[k]], rows[k]))

    def commit(self, leader: int) -> np.ndarray:
        """Finish the aggregation: the weighted average becomes the leader's model."""
        model = self._pending.pop(leader).result()
        self.models[leader] = model
        self.versions[leader] = self.versions.get(leader, 0) + 1
        return model

    def combine(self, coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
        """A leader's asynchronous step (queue aggregation, rebase): see :func:`combine_packed`."""
        return combine_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True


class Cloud:
    """The global model, its aggregation and its evaluation on the held-out test set."""

    def __init__(self, init_params: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, model: ModelSpec) -> None:
        model_cfg, input_shape, num_classes, threads = model
        self.model = np.asarray(init_params, dtype=np.float32)
        self.version = 0
        self._pending: WeightedSum | None = None
        self.x_test = x_test
        self.y_test = y_test
        self.trainer = LocalTrainer(model_cfg, tuple(input_shape), num_classes, torch_threads=threads)

    def add(self, weight: float, vector: np.ndarray) -> None:
        """Fold one arriving model into the running weighted sum."""
        if self._pending is None:
            self._pending = WeightedSum()
        self._pending.add(vector, weight)

    def add_many(self, weights: list[float], index: list[int], rows: list[int | None], *arrays: np.ndarray) -> None:
        """Several :meth:`add` calls in one, in order: update ``k`` is ``arrays[index[k]]`` (row ``rows[k]``)."""
        for k, w in enumerate(weights):
            self.add(w, _pick(arrays[index[k]], rows[k]))

    def add_many_commit(self, weights: list[float], index: list[int], rows: list[int | None],
                        *arrays: np.ndarray) -> np.ndarray:
        """The last fold-ins and the commit in one call (one actor round trip less per round)."""
        self.add_many(weights, index, rows, *arrays)
        return self.commit()

    def commit(self) -> np.ndarray:
        """Finish the aggregation: the weighted average becomes the global model."""
        if self._pending is None:
            raise ValueError("cloud aggregation with no update")
        self.model, self._pending = self._pending.result(), None
        self.version += 1
        return self.model

    def average(self, weights: list[float], index: list[int], rows: list[int | None],
                *arrays: np.ndarray) -> np.ndarray:
        """A weighted average of models for a protocol (e.g. a FedHiSyn device mixing ring arrivals)."""
        return average_rows(weights, index, rows, *arrays)

    def combine(self, coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
        """The cloud's asynchronous step (FedAsync mix, FedBuff buffer step, AHFL queue): see :func:`combine_packed`."""
        return combine_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)

    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        """(accuracy, loss) of ``params`` on the test set."""
        return self.trainer.evaluate(params, self.x_test, self.y_test)

    def warmup(self) -> bool:
        """Evaluate once so torch's lazy start-up is paid at start-up."""
        self.trainer.evaluate(self.model, self.x_test[:2], self.y_test[:2])
        return True

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True
