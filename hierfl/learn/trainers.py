"""Local-trainer plug-ins (``training.trainer``): what a device's job optimises and what it sends back.

* ``sgd`` — minibatch SGD with ``training.momentum`` and ``training.weight_decay`` (the default).
* ``fedprox`` — Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
  Heterogeneous Networks", MLSys 2020 (arXiv 1812.06127), ALGORITHMS.md §5.5: the local objective
  gets ``(μ/2)‖w − w_t‖²``, i.e. ``μ (w − w_t)`` is added to every gradient. Works with every
  protocol; with FedAsync/AHFL's own ρ the two coefficients add up.
* ``scaffold`` — Karimireddy et al., ICML 2020, option II (ALGORITHMS.md §5.6; math in
  :mod:`hierfl.core.scaffold`). Each device's control ``c_i`` lives in its device host and
  persists across rounds; the cloud keeps ``c``, stepped ``c ← c + Σ_{i∈S} κ_i Δc_i``. The paper
  averages ``Δy`` uniformly and uses ``κ_i = 1/N``; hierfl's FedAvg/HierFAVG average models by
  sample count, so ``κ_i = n_i / n`` by default (``c`` then tracks ``Σ (n_i/n) c_i``, the gradient
  of the objective those averages optimise) [D]; ``control_weighting: uniform`` is the paper's
  rule. (With ``uniform``, epoch-based jobs and power-law sample counts — a device's step count
  ∝ its data — we measured divergence on ``fedavg_synthetic.yaml``.) Messages carry two vectors: down ``(x, c)``,
  up ``[y; Δc]`` (an edge server relays ``[x_ℓ; Σ κ_i Δc_i]``), so every transfer is twice the
  model's bytes. Needs a synchronous protocol that supports it (``fedavg``, ``hierfavg``).

These are config models only (no torch): the runtime reads :meth:`TrainerConfig.spec_fields`
through :class:`~hierfl.core.work.TrainSpec`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

__all__ = ["TRAINERS", "TrainerConfig", "SGDTrainer", "FedProxTrainer", "ScaffoldTrainer", "NoTrainer"]

TRAINERS: Registry = Registry("trainer")


class TrainerConfig(ConfigModel):
    """Base of the local-trainer configs.

    Class attributes state what the trainer needs from the rest of the scenario (checked at load
    time by :mod:`hierfl.scenario.checks`): ``needs_control_variates`` — a protocol that carries
    SCAFFOLD's control variates; ``needs_every_update`` — why every trained update must arrive
    (no straggler policy that drops updates, no devices going offline), or None.
    """

    needs_control_variates: ClassVar[bool] = False
    needs_every_update: ClassVar[str | None] = None
    # no model is trained or evaluated (timing-only runs): accuracy targets make no sense
    timing_only: ClassVar[bool] = False

    @property
    def payload_factor(self) -> int:
        """Vectors per message: every transfer moves this many model-sized float32 vectors."""
        return 1

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`~hierfl.core.work.TrainSpec` fields this trainer sets."""
        return {}



@TRAINERS.register
class NoTrainer(TrainerConfig):
    """``trainer: none``: timing only. Every time, selection, staleness, queue and counter is what a
    training run of the same scenario gives, but no job is run (an update is the model the job
    started from) and no model is evaluated (evaluation lines carry ``accuracy: null``). For system
    studies at 10^5–10^6 devices: round times, queue lengths, contention, churn."""

    timing_only: ClassVar[bool] = True
    name: Literal["none"] = "none"

    def spec_fields(self) -> dict[str, Any]:
        """``train: false``."""
        return {"train": False}


@TRAINERS.register
class SGDTrainer(TrainerConfig):
    """``trainer: sgd``: plain minibatch SGD (momentum and weight decay from ``training:``)."""

    name: Literal["sgd"] = "sgd"


@TRAINERS.register
class FedProxTrainer(TrainerConfig):
    """``trainer: {name: fedprox, mu: 0.01}``: SGD on ``F_k(w) + (μ/2)‖w − w_t‖²``."""

    name: Literal["fedprox"] = "fedprox"
    mu: float = Field(default=0.01, ge=0.0, allow_inf_nan=False,
                      description="proximal coefficient μ >= 0 (grid 0.001–1; 0 = SGD) [D/K]")

    def spec_fields(self) -> dict[str, Any]:
        """``mu``."""
        return {"mu": float(self.mu)}


@TRAINERS.register
class ScaffoldTrainer(TrainerConfig):
    """``trainer: {name: scaffold, control_weighting: uniform}``: option-II control variates."""

    name: Literal["scaffold"] = "scaffold"
    needs_control_variates: ClassVar[bool] = True
    # Option II updates c_i on the device when its job runs; the server's c moves only by the Δc_i
    # that arrive. An update that ran but never arrives (cut by a straggler policy, or its device
    # went offline while uploading) would leave c ≠ mean(c_i) for good, so such runs are refused.
    needs_every_update: ClassVar[str | None] = "every update that was trained to arrive (c = mean of the c_i)"

    control_weighting: Literal["samples", "uniform"] = Field(
        default="samples",
        description="server control step c += Σ κ_i Δc_i with κ_i = n_i/n (samples, matching the sample-weighted "
                    "model average) or 1/N (uniform, the paper's choice with its uniform average) [D]")

    @property
    def payload_factor(self) -> int:
        """Model and control travel together."""
        return 2

    def spec_fields(self) -> dict[str, Any]:
        """``control_variates``."""
        return {"control_variates": True}
