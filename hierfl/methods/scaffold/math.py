"""SCAFFOLD control variates, option II (pure numpy).

Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML 2020. docs/explanation/algorithms.md §5.6. A device with control ``c_i`` training from
``x`` with the server control ``c`` takes ``K`` steps ``y ← y − η_l (g_i(y) − c_i + c)``; then

* option II: ``c_i⁺ = c_i − c + (x − y) / (K · η_l)``, ``Δc_i = c_i⁺ − c_i``;
* the server: ``c ← c + Σ_{i∈S} κ_i Δc_i`` with ``κ_i = 1/N`` (the paper's ``(|S|/N)·mean``, which
  goes with its uniform average of ``Δy``) or ``κ_i = n_i / n`` (keeps ``c = Σ (n_i/n) c_i`` for the
  sample-weighted average hierfl's protocols use; the default of ``training.trainer``).

``K`` is the **total** number of local steps of the job (epochs × batches), not one epoch's.
With momentum or weight decay in the local optimiser the option-II estimate is approximate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hierfl.core.controls import control_weights
from hierfl.core.method import JobMethod
from hierfl.core.message import CONTROLLED, MessageLayout

__all__ = ["option2_control", "correction", "control_weights", "ControlJob"]


@dataclass(frozen=True)
class ControlJob(JobMethod):
    """A SCAFFOLD job (as a job method, :mod:`hierfl.core.method`): every gradient is corrected by ``c − c_i``
    with the server control ``c`` that came with the job; the device's ``c_i`` (per-device state of its host)
    moves by option II and the result carries ``y`` and ``Δc_i`` (layout :data:`~hierfl.core.message.CONTROLLED`)."""

    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("c",)
    layout: ClassVar[MessageLayout] = CONTROLLED


def correction(c: np.ndarray, c_i: np.ndarray) -> np.ndarray:
    """``c − c_i``: what SCAFFOLD adds to every local gradient (float32)."""
    return (np.asarray(c, dtype=np.float64) - np.asarray(c_i, dtype=np.float64)).astype(np.float32)


def option2_control(c_i: np.ndarray, c: np.ndarray, x: np.ndarray, y: np.ndarray, steps: int,
                    lr: float) -> tuple[np.ndarray, np.ndarray]:
    """``(c_i⁺, Δc_i)`` of option II, both float32; ``Δc_i`` is exactly ``c_i⁺ − c_i`` of the stored values.

    Raises ``ValueError`` for ``steps < 1`` or ``lr <= 0`` (the estimate divides by ``K·η_l``).
    """
    if steps < 1 or not lr > 0:
        raise ValueError(f"option II needs steps >= 1 and lr > 0, got steps={steps}, lr={lr}")
    ci = np.asarray(c_i, dtype=np.float64)
    new = (ci - np.asarray(c, dtype=np.float64)
           + (np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)) / (steps * lr)).astype(np.float32)
    return new, (new.astype(np.float64) - ci).astype(np.float32)

