"""DisTrans's device jobs on a device host (Yuan et al., "Addressing Heterogeneity in Federated Learning
via Distributional Transformation", ECCV 2022; math in :mod:`hierfl.core.distrans`).

Each device's input-shaped offset ``t_i`` is per-device state of its host (:class:`DeviceState`, name
``offset``): made on the device's first job (or evaluation) from the scenario seed, moved by each job,
checkpointed with the host, counted in the state's memory and forgotten on a reset. The model itself
travels as usual; with ``offset_mode: local`` the offset never leaves the device. With ``mean`` the
vectors the servers send and average are ``[model; offset]``: a job starts from the offset it receives
and returns its trained one behind the model (the device still keeps it, for memory accounting).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.distrans import OffsetSpec, initial_offset
from hierfl.core.work import TrainSpec
from hierfl.runtime.device_state import DeviceState

__all__ = ["DisTransJobs"]


class DisTransJobs:
    """The DisTrans jobs and evaluations of one host's devices (the torch side made on first use)."""

    def __init__(self, model_cfg: Any, input_shape: tuple[int, ...], num_classes: int, threads: int,
                 states: DeviceState) -> None:
        self._model = (model_cfg, tuple(input_shape), int(num_classes), int(threads))
        self.states = states
        self._trainer: Any = None

    @property
    def trainer(self) -> Any:
        """The :class:`~hierfl.learn.distrans.OffsetTrainer` (its own module; built on first use)."""
        if self._trainer is None:
            from hierfl.learn.distrans import OffsetTrainer

            cfg, shape, classes, threads = self._model
            self._trainer = OffsetTrainer(cfg.build(shape, classes), threads)
        return self._trainer

    def offset(self, device: int, spec: OffsetSpec) -> np.ndarray:
        """``device``'s offset (its initial one before its first job)."""
        vecs = self.states.vectors.get(int(device), {})
        if "offset" in vecs:
            return vecs["offset"]
        return initial_offset(int(np.prod(self._model[1])), spec.init_seed, device)

    def extra(self, spec: TrainSpec) -> int:
        """Values a job's result carries behind the model: the offset's size with ``offset_mode: mean``."""
        return int(np.prod(self._model[1])) if spec.offset is not None and spec.offset.shared else 0

    def _start(self, device: int, spec: OffsetSpec, params: np.ndarray) -> np.ndarray:
        """The offset a job or an evaluation uses: the shared one received behind the model (``mean``), or
        the device's own."""
        if spec.shared:
            return np.asarray(params)[self.trainer.num_params:]
        return self.offset(device, spec)

    def train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray, x: np.ndarray, y: np.ndarray,
              rows: np.ndarray, out: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        """One job: the new model, followed by the new offset with ``offset_mode: mean`` (the device's offset
        moves and stays here)."""
        assert spec.offset is not None
        new, offset, stats = self.trainer.train(params, self._start(device, spec.offset, params), x, y, rows, spec,
                                                seed)
        self.states.put(device, offset=offset)
        if spec.offset.shared:
            new = np.concatenate([new, offset])
        if out is None:
            return new, stats
        out[...] = new
        return out, stats

    def evaluate(self, device: int, spec: OffsetSpec, params: np.ndarray, x: np.ndarray,
                 y: np.ndarray) -> tuple[float, float]:
        """``(accuracy, loss)`` of ``params`` on the device's test rows, seen through its own offset (``mean``:
        the shared offset behind the model, the one every device receives)."""
        return self.trainer.evaluate(params, self._start(device, spec, params), x, y)  # type: ignore[no-any-return]
