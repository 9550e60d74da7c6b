"""FedDC: local drift decoupling and correction (pure numpy).

Gao, Fu, Li, Chen, Xu, Xu, "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling
and Correction", CVPR 2022 (arXiv 2203.11751); the rules below are those of the authors' code
(``gaoliang13/FedDC``), docs/explanation/algorithms.md §5.14.

Each device ``i`` keeps two model-sized vectors across rounds: its drift ``h_i`` and its control
``c_i``; the aggregator keeps the control ``c`` and ``H = Σ_i h_i``. With ``ω_i = N·n_i / Σ_j n_j``:

* the local loss is ``CE(θ) + (α_i/2)‖θ + h_i − w‖² + ⟨θ, g_i⟩`` with ``α_i = α/ω_i`` and
  ``g_i = c/ω_i − c_i``; its gradient is the CE gradient plus ``α_i (θ − w)`` (a proximal term) plus
  the constant ``α_i h_i + g_i`` (:func:`local_terms`), so the SGD replay needs nothing new;
* after the job (``Δ_i = θ⁺ − w``): ``h_i ← h_i + Δ_i``, ``c_i⁺ = c_i − c/ω_i − Δ_i/(K̄·η_0)`` and
  ``δc_i = ω_i (c_i⁺ − c_i)`` (:func:`device_update`);
* the server: ``c ← c + (1/N) Σ_{i∈S} δc_i`` and ``w = mean_{i∈S} θ_i⁺ + H/N`` with
  ``H ← H + Σ_{i∈S} Δ_i`` (:class:`DriftRule`, the code's rule). The paper's rule instead averages
  ``θ_i⁺ + h_i`` weighted by samples: the device then uploads ``θ⁺ + h_i`` and the aggregator
  averages as usual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hierfl.core.method import JobMethod
from hierfl.core.message import CONTROLLED, MessageLayout

__all__ = ["DriftSpec", "relative_weights", "mean_steps", "local_terms", "device_update", "DriftRule"]


@dataclass(frozen=True)
class DriftSpec(JobMethod):
    """What a FedDC job needs besides the training spec (hashable: it travels in a ``TrainSpec``).

    ``alpha``: the penalty α; ``server_rule``: ``code`` (upload θ⁺) or ``paper`` (upload θ⁺ + h_i).
    """

    alpha: float
    server_rule: str = "code"

    # as a job method (hierfl.core.method): h_i and c_i are per-device state of the device's host; the
    # result carries θ⁺ and δc_i (the control-variates message, δc_i summed apart by the aggregator)
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("h", "c")
    layout: ClassVar[MessageLayout] = CONTROLLED

    def __post_init__(self) -> None:
        if not math.isfinite(self.alpha) or self.alpha < 0:
            raise ValueError(f"FedDC: alpha must be a finite number >= 0, got {self.alpha!r}")
        if self.server_rule not in ("code", "paper"):
            raise ValueError(f"FedDC: server_rule must be code or paper, got {self.server_rule!r}")


def relative_weights(samples: np.ndarray) -> np.ndarray:
    """``ω_i = N·n_i / Σ_j n_j`` (1 for every device on balanced data); raises if no device holds data."""
    n = np.asarray(samples, dtype=np.float64)
    if n.size == 0 or n.sum() <= 0:
        raise ValueError("FedDC: relative weights of devices that hold no samples")
    return n.size * n / n.sum()


def mean_steps(samples: np.ndarray, epochs: int | None, steps: int | None, batch_size: int | None) -> int:
    """``K̄``: the local steps of a device of average size, ``E·⌈n̄/B⌉`` (or the fixed ``steps``)."""
    if steps is not None:
        return int(steps)
    n_bar = float(np.mean(np.asarray(samples, dtype=np.float64)))
    b = n_bar if batch_size is None else min(float(batch_size), n_bar)
    return int(epochs or 1) * max(1, math.ceil(n_bar / b - 1e-12))


def local_terms(alpha: float, omega: float, c: np.ndarray, c_i: np.ndarray,
                h_i: np.ndarray) -> tuple[float, np.ndarray]:
    """``(α_i, α_i h_i + g_i)``: the proximal coefficient of the job and the constant added to every
    gradient (float32), with ``α_i = α/ω_i`` and ``g_i = c/ω_i − c_i``."""
    if not omega > 0:
        raise ValueError(f"FedDC: a device's relative weight must be > 0, got {omega}")
    alpha_i = alpha / omega
    g = np.asarray(c, dtype=np.float64) / omega - np.asarray(c_i, dtype=np.float64)
    return alpha_i, (alpha_i * np.asarray(h_i, dtype=np.float64) + g).astype(np.float32)


def device_update(h_i: np.ndarray, c_i: np.ndarray, c: np.ndarray, omega: float, start: np.ndarray,
                  theta: np.ndarray, mean_steps: int, lr: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(h_i⁺, c_i⁺, δc_i)`` after a job from ``start`` (= w) to ``theta`` (= θ⁺), all float32.

    ``h_i⁺ = h_i + Δ``, ``c_i⁺ = c_i − c/ω_i − Δ/(K̄·η_0)``, ``δc_i = ω_i (c_i⁺ − c_i)`` with
    ``Δ = θ⁺ − w``. Raises for ``mean_steps < 1`` or ``lr <= 0``.
    """
    if mean_steps < 1 or not lr > 0:
        raise ValueError(f"FedDC needs K̄ >= 1 and lr > 0, got K̄={mean_steps}, lr={lr}")
    delta = np.asarray(theta, dtype=np.float64) - np.asarray(start, dtype=np.float64)
    ci = np.asarray(c_i, dtype=np.float64)
    h_new = (np.asarray(h_i, dtype=np.float64) + delta).astype(np.float32)
    c_new = (ci - np.asarray(c, dtype=np.float64) / omega - delta / (mean_steps * lr)).astype(np.float32)
    dc = (omega * (c_new.astype(np.float64) - ci)).astype(np.float32)
    return h_new, c_new, dc


@dataclass(frozen=True)
class DriftRule:
    """The aggregator's side of FedDC (the code's rule) over a round of ``members`` devices.

    Given the round's start model ``w`` (``base``), the unweighted mean of the ``count`` participants'
    models and the running ``H`` (kept in ``state.drift``, float64): ``H ← H + count·(mean − w)``
    (that is ``Σ_{i∈S} Δ_i``, since each ``h_i`` moved by exactly its ``Δ_i``) and
    ``w⁺ = mean + H / members``. Devices that did not take part keep their drift in ``H``.
    With ``keeps_control`` the aggregator also steps its own control ``c ← c + Σ κ_i δc_i`` (the
    sum its role gathered, given to :meth:`take_control`).
    """

    members: int
    # the aggregator keeps its own control c (an edge's c_e) instead of relaying the δc sum upwards
    keeps_control: bool = False
    # the code's rule (mean θ⁺ + H/N); False: the plain average (the paper's rule, whose uploads carry h_i)
    adds_drift: bool = True

    def __post_init__(self) -> None:
        if self.members < 1:
            raise ValueError(f"FedDC: an aggregator over {self.members} devices")

    def round_step(self, base: np.ndarray | None, avg: np.ndarray, count: int, state: Any) -> np.ndarray:
        """The new model (float32); ``state.drift`` is updated in place."""
        if not self.adds_drift:
            return np.asarray(avg, dtype=np.float32)
        if base is None:
            raise ValueError("FedDC's server rule needs the model the round started from")
        mean = np.asarray(avg, dtype=np.float64)
        step = count * (mean - np.asarray(base, dtype=np.float64))
        state.drift = step if state.drift is None else state.drift + step
        return (mean + state.drift / self.members).astype(np.float32)

    def take_control(self, control_sum: np.ndarray | None, state: Any) -> bool:
        """Step the aggregator's own control by the round's ``Σ κ_i δc_i`` (float64), if it keeps one;
        whether it took the sum (else the role keeps it for the upload)."""
        if not self.keeps_control or control_sum is None:
            return False
        old = 0.0 if state.control is None else state.control.astype(np.float64)
        state.control = (old + control_sum).astype(np.float32)
        return True
