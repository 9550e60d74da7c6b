"""``privacy.dp_sgd`` — sample-level DP-SGD at the devices (Abadi et al., CCS 2016) and its load-time checks.

``privacy: {dp_sgd: {noise_multiplier, clip, batch_sampling, delta, accountant, costs}}``; ``dp_sgd: null`` (the
default) is today's run. What a device's job then does is :mod:`hierfl.learn.dp_sgd`; what it spends is accounted
per device by :mod:`hierfl.privacy.driver_dp_sgd`. The checks here refuse every setting under which ε would be
wrong or a setting would be ignored: the sampling must be one an accountant covers, the job must be plain local
training (a trainer's or protocol's own loops, or its own loss, would bypass the per-sample clip), and the
model's per-sample gradients must bound one example's influence (no batch norm) and draw nothing (no dropout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.core.work import DpSgdSpec

__all__ = ["DpSgdCostConfig", "DpSgdConfig", "MODEL_LIMITS", "dp_sgd_problems"]

MODEL_LIMITS: Mapping[str, str] = {
    "dropout": "per-sample gradients run each example outside the job's dropout streams",
    "running_stats": "per-sample gradients cannot bound one example's influence through batch normalisation, which "
                     "mixes a batch's examples",
}
"""What of a model DP-SGD cannot honour (the build's check, :mod:`hierfl.assemble.loops`)."""


class DpSgdCostConfig(ConfigModel):
    """``costs:`` what per-sample gradients cost a device in emulated time, on top of plain training.

    A job's work becomes ``samples processed × factor``, with ``factor = grad_factor + (norm_ops·P +
    noise_ops·P/b) / (efficiency · 3F)`` (``P`` parameters, ``F`` forward FLOPs of one sample, ``b`` the batch
    size, ``3F`` the FLOPs of one plain training sample): a function of the model's size only, never of its
    values."""

    grad_factor: PositiveFloat = Field(default=1.0, ge=1.0, description="per-example gradients relative to the "
                                       "batch's backward pass: about 1× (per-example outer products instead of one "
                                       "summed one) [D]")
    norm_ops: NonNegativeFloat = Field(default=3.0, description="FLOP equivalents per parameter and example: the "
                                       "gradient's norm (2) and its scaling (1) [D]")
    noise_ops: NonNegativeFloat = Field(default=21.0, description="FLOP equivalents per parameter and step: drawing "
                                        "a Gaussian sample (20, as privacy.dp.costs) and adding it (1) [D]")
    efficiency: PositiveFloat = Field(default=0.25, le=1.0, description="fraction of a device's FLOP/s the "
                                      "memory-bound norm, scale and noise work reaches [D]")

    def work_factor(self, params: int, forward_flops: float, batch: int) -> float:
        """The factor on a job's work (see the class docstring)."""
        extra = (self.norm_ops * params + self.noise_ops * params / max(1, batch)) / (self.efficiency * 3.0 *
                                                                                      max(forward_flops, 1.0))
        return float(self.grad_factor + extra)


class DpSgdConfig(ConfigModel):
    """``privacy.dp_sgd``: sample-level DP-SGD in every device's local training (Abadi et al., CCS 2016)."""

    noise_multiplier: PositiveFloat = Field(default=1.0, description="z: the noise std on a step's sum of clipped "
                                            "per-sample gradients over the clip norm")
    clip: PositiveFloat = Field(default=1.0, description="C: L2 bound of each example's gradient (not "
                                "training.clip_norm, which clips a step's whole gradient, nor privacy.dp.clip, which "
                                "clips a device's update)")
    batch_sampling: Literal["fixed_size", "poisson"] = Field(
        default="fixed_size", description="how a step draws its batch from the job's n samples, independently "
        "every step: fixed_size — training.batch_size b of them uniformly without replacement (accounted under "
        "replace-one); poisson — each with probability b/n (accounted under add-or-remove-one). The noisy sum is "
        "divided by b either way (the expected batch size under Poisson sampling)")
    accountant: Literal["auto", "rdp", "pld"] = Field(
        default="auto", description="auto: RDP; pld: the PLD accountant (tighter), poisson sampling only "
        "(dp-accounting 0.6.0's PLD does not cover sampling without replacement)")
    delta: Literal["auto"] | float = Field(default="auto", description="δ of each device's ε; auto: 1/n^1.1, n "
                                           "the largest device's sample count")
    costs: DpSgdCostConfig = Field(default=DpSgdCostConfig(), description="what per-sample gradients cost in "
                                   "emulated time")

    def spec(self) -> DpSgdSpec:
        """What a job carries (:attr:`hierfl.core.work.TrainSpec.dp_sgd`)."""
        return DpSgdSpec(float(self.noise_multiplier), float(self.clip), self.batch_sampling)

    def accountant_kind(self) -> str:
        """``rdp`` or ``pld``."""
        return "pld" if self.accountant == "pld" else "rdp"

    def delta_for(self, largest: int) -> float:
        """δ: the stated value, or ``n^−1.1`` of the largest device's sample count ``n``."""
        return float(max(1, largest)) ** -1.1 if self.delta == "auto" else float(self.delta)


def dp_sgd_problems(scenario: Any) -> list[Problem]:
    """What cannot be combined with ``privacy.dp_sgd`` (each would give a wrong ε or ignore a setting)."""
    cfg = scenario.privacy.dp_sgd
    if cfg is None:
        return []
    out = []
    if scenario.privacy.dp is not None:
        out.append(Problem("privacy.dp_sgd", "one privacy mechanism per run (the ε in the evaluation lines and the "
                           "budget would mix two privacy units: a device's update and one example); allowed: "
                           "privacy.dp or privacy.dp_sgd", "both set"))
    t = scenario.training
    if t.steps is None:
        out.append(Problem("training.epochs", "privacy.dp_sgd samples every step's batch on its own, so a job is a "
                           "number of steps; allowed: training.steps (local steps per job)", t.epochs))
    trainer = t.trainer
    if trainer.timing_only:
        out.append(Problem("training.trainer", "trainer none trains nothing, so privacy.dp_sgd would be ignored; "
                           "allowed: a trainer that runs plain local training", trainer.name))
    elif (trainer.spec_fields().get("method") is not None or trainer.module_loop_limits(scenario)
          or len(trainer.layout.parts) > 1 or type(trainer).work_factor is not _base_work_factor()):
        out.append(Problem("training.trainer", f"trainer {trainer.name!r} runs jobs, losses or messages of its own "
                           "that the per-sample clip and noise would not cover; allowed with privacy.dp_sgd: a "
                           "trainer of plain local training (sgd, or one that only adds a proximal term)", trainer.name))
    proto = scenario.protocol
    if proto.own_train_specs:
        out.append(Problem("protocol.name", f"protocol {proto.name!r} builds training jobs of its own shape (epochs "
                           "or steps of its own), while privacy.dp_sgd accounts every job as training.steps steps "
                           "of the run's spec; allowed: a protocol that runs the run's training spec", proto.name))
    elif proto.module_loop_limits(scenario) or proto.exchanges != "weights" or proto.uses_public_data:
        out.append(Problem("protocol.name", f"protocol {proto.name!r} trains the model in loops or jobs of its own "
                           "(or exchanges outputs computed on the devices' models), which privacy.dp_sgd's per-sample "
                           "clip and noise would not cover; allowed: a protocol that exchanges weights trained by "
                           "the plain local loop", proto.name))
    precision = getattr(scenario.runtime, "precision", "fp32")
    if precision != "fp32":
        out.append(Problem("runtime.precision", "privacy.dp_sgd's per-sample gradients are float32; allowed: fp32",
                           precision))
    if cfg.accountant == "pld" and cfg.batch_sampling == "fixed_size":
        out.append(Problem("privacy.dp_sgd.accountant", "dp-accounting 0.6.0's PLD accountant does not cover "
                           "sampling without replacement; allowed with batch_sampling fixed_size: auto, rdp (or "
                           "batch_sampling: poisson)", cfg.accountant))
    if cfg.delta != "auto" and not 0.0 < float(cfg.delta) < 1.0:
        out.append(Problem("privacy.dp_sgd.delta", "allowed: auto or 0 < δ < 1", cfg.delta))
    return out


def _base_work_factor() -> Any:
    from hierfl.learn.trainers import TrainerConfig  # noqa: PLC0415 (the base trainer's: no extra loss)

    return TrainerConfig.work_factor
