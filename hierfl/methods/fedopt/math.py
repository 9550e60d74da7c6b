"""The FedOpt server optimizers' rules (pure numpy): how an aggregator turns an aggregated delta into its next model.

docs/explanation/algorithms.md §5.7 — Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar, McMahan, "Adaptive
Federated Optimization", ICLR 2021 (arXiv 2003.00295), and the server momentum of Hsu, Qi, Brown, "Measuring the
Effects of Non-Identical Data Distribution for Federated Visual Classification" (arXiv 1909.06335). The
aggregator receives ``Δ_t`` (the protocol's aggregate minus the model it started from, e.g.
``Σ n_i y_i / Σ n_i − x_t`` for a sample-weighted average) and steps, with ``m_{−1} = 0``, ``v_{−1} = τ²``:

* ``fedavg``     ``x ← x + η Δ``                               (η = 1: plain averaging)
* ``fedavgm``    ``m ← β m + Δ``;  ``x ← x + η m``
* ``fedadagrad`` ``m ← β1 m + (1 − β1) Δ``;  ``v ← v + Δ²``
* ``fedadam``    ``m`` as above;  ``v ← β2 v + (1 − β2) Δ²``
* ``fedyogi``    ``m`` as above;  ``v ← v − (1 − β2) Δ² ⊙ sign(v − Δ²)``
* adaptive update ``x ← x + η m / (√v + τ)`` element-wise, **no bias correction**.

Deltas, moments and the update are computed in float64 (state ``m``, ``v`` is float64); the
new model is returned as float32. Everything here is a pure function of its arguments; the state a
role keeps between steps is :class:`hierfl.core.serveropt.OptState`. The configs that select an
optimizer by name (``server_optimizer: {cloud: {name: fedadam}}``) are in :mod:`hierfl.methods.fedopt.config`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "fedavg_step", "fedavgm_step", "adaptive_step", "adagrad_second_moment",
    "adam_second_moment", "yogi_second_moment", "first_moment",
]


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def fedavg_step(x: np.ndarray, delta: np.ndarray, lr: float) -> np.ndarray:
    """Server SGD: ``x + η Δ`` (float32)."""
    return (_f64(x) + lr * _f64(delta)).astype(np.float32)


def fedavgm_step(x: np.ndarray, delta: np.ndarray, m: np.ndarray | None, lr: float,
                 beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Server SGD with momentum (FedAvgM): ``m ← β m + Δ``, ``x ← x + η m``; returns ``(x, m)``."""
    d = _f64(delta)
    m_new = d.copy() if m is None else beta * m + d
    return (_f64(x) + lr * m_new).astype(np.float32), m_new


def first_moment(delta: np.ndarray, m: np.ndarray | None, beta1: float) -> np.ndarray:
    """``m ← β1 m + (1 − β1) Δ`` with ``m_{−1} = 0``."""
    d = _f64(delta)
    return (1.0 - beta1) * d if m is None else beta1 * m + (1.0 - beta1) * d


def _v_prev(v: np.ndarray | None, delta: np.ndarray, tau: float) -> np.ndarray:
    return np.full(np.shape(delta), tau * tau, dtype=np.float64) if v is None else v


def adagrad_second_moment(delta: np.ndarray, v: np.ndarray | None, tau: float) -> np.ndarray:
    """FedAdagrad: ``v ← v + Δ²`` with ``v_{−1} = τ²``."""
    d = _f64(delta)
    return _v_prev(v, d, tau) + d * d


def adam_second_moment(delta: np.ndarray, v: np.ndarray | None, beta2: float, tau: float) -> np.ndarray:
    """FedAdam: ``v ← β2 v + (1 − β2) Δ²`` with ``v_{−1} = τ²``."""
    d = _f64(delta)
    return beta2 * _v_prev(v, d, tau) + (1.0 - beta2) * d * d


def yogi_second_moment(delta: np.ndarray, v: np.ndarray | None, beta2: float, tau: float) -> np.ndarray:
    """FedYogi: ``v ← v − (1 − β2) Δ² ⊙ sign(v − Δ²)`` with ``v_{−1} = τ²``."""
    d2 = _f64(delta) ** 2
    prev = _v_prev(v, d2, tau)
    return prev - (1.0 - beta2) * d2 * np.sign(prev - d2)


def adaptive_step(x: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, tau: float) -> np.ndarray:
    """``x + η m / (√v + τ)`` element-wise, no bias correction (float32)."""
    return (_f64(x) + lr * m / (np.sqrt(v) + tau)).astype(np.float32)
