"""FedDC's device jobs on a device host (Gao et al., "FedDC: Federated Learning with Non-IID Data via
Local Drift Decoupling and Correction", CVPR 2022; math in :mod:`hierfl.core.feddc`).

A job reads and moves the device's drift ``h_i`` and control ``c_i`` (the host's per-device state).
FedDC's penalty gradient ``α_i (θ − w)`` is the exact SGD replay's proximal term and ``α_i h_i + g_i``
its constant correction, so the replay runs it unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hierfl.core.feddc import device_update, local_terms, mean_steps, relative_weights
from hierfl.core.work import TrainSpec
from hierfl.learn.local import LocalTrainer
from hierfl.runtime.device_state import DeviceState

__all__ = ["FedDCJobs"]


class FedDCJobs:
    """The FedDC jobs of one host's devices: their relative weights ``ω_i`` (from the partition, made on
    first use), the mean step count ``K̄`` and their state."""

    def __init__(self, trainer: LocalTrainer, states: DeviceState, parts: list[np.ndarray]) -> None:
        self.trainer = trainer
        self.states = states
        self.parts = parts
        self._omega: np.ndarray | None = None

    def train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray, c: np.ndarray, x: np.ndarray,
              y: np.ndarray, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """One job: ``(upload model, δc_i, stats)``; ``h_i`` and ``c_i`` move."""
        drift = spec.drift
        assert drift is not None
        sizes = np.array([p.size for p in self.parts])
        if self._omega is None:
            self._omega = relative_weights(sizes)
        omega = float(self._omega[device])
        h_i, c_i = self.states.get(device, "h", c), self.states.get(device, "c", c)
        alpha_i, corr = local_terms(drift.alpha, omega, c, c_i, h_i)
        size = self.trainer.num_params
        job = replace(spec, prox=spec.prox + alpha_i)
        y_new, stats = self.trainer.train(params, x, y, job, seed, correction=corr, rows=self.parts[device],
                                          out=None if out is None else out[:size])
        y_new = np.array(y_new[:size], dtype=np.float32)
        k_bar = mean_steps(sizes, spec.epochs, spec.steps, spec.batch_size)
        h_new, c_new, dc = device_update(h_i, c_i, c, omega, np.asarray(params)[:size], y_new, k_bar, spec.lr)
        self.states.put(device, h=h_new, c=c_new)
        if drift.server_rule == "paper":  # the paper averages θ⁺ + h_i weighted by samples
            y_new = (y_new.astype(np.float64) + h_new.astype(np.float64)).astype(np.float32)
        return y_new, dc, stats
