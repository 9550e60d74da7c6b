"""The ``training.trainer`` config of fedalign: ``fedalign`` — Mendieta et al., "Local Learning Matters: Rethinking Data Heterogeneity in Federated
  Learning", CVPR 2022 (:mod:`hierfl.methods.fedalign.trainer`): cross-entropy plus μ times the Lipschitz term of the
  model's final block at a slim width; any protocol. Its slim pass is charged as a work factor.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hierfl.methods.fedalign.math import AlignSpec, align_work_factor
from hierfl.learn.trainers import TRAINERS, TrainerConfig, one_model

__all__ = ["FedAlignTrainer"]


@TRAINERS.register
class FedAlignTrainer(TrainerConfig):
    """``trainer: {name: fedalign, mu: 0.45, width: 0.25}``: FedAlign (Mendieta et al., CVPR 2022).

    Local loss ``ℓ_CE + μ·(sg(ℓ_CE)/sg(ℓ_Lip))·ℓ_Lip`` (``normalize_lip``, the authors' code) or
    ``ℓ_CE + μ·ℓ_Lip`` (the paper), ``ℓ_Lip`` the squared gap between the final block's transfer-matrix
    spectral norms at full width and at width ``ω`` (:mod:`hierfl.methods.fedalign.trainer`). A pure local-loss change:
    any protocol, any tier. A job's work is ``1 + ω²·F(block)/F(model)`` times a plain job's.
    """

    name: Literal["fedalign"] = "fedalign"
    mu: float = Field(default=0.45, ge=0.0, allow_inf_nan=False,
                      description="weight μ of the Lipschitz term (the authors' --mu) [design default 0.45, from the "
                                  "authors' code]")
    width: float = Field(default=0.25, gt=0.0, le=1.0, allow_inf_nan=False,
                         description="width multiplier ω of the slim pass through the final block (--width) "
                                     "[design default 0.25, from the authors' code]")
    normalize_lip: bool = Field(
        default=True,
        description="true: rescale the Lipschitz term each step to μ times the current cross-entropy (the authors' "
                    "code); false: add μ·ℓ_Lip (the paper's form) [design default: true]")
    power_iters: int = Field(default=10, ge=1, description="power iterations of the spectral-norm estimate, from the "
                                                           "all-ones vector [design default 10, from the authors' code]")
    clip_norm: float | None = Field(
        default=10.0, gt=0.0, allow_inf_nan=False,
        description="max-norm clipping of each local step's whole gradient (the authors' code clips at 10); null: "
                    "no clipping [design default 10]")

    def spec_fields(self) -> dict[str, Any]:
        """The FedAlign job (:class:`~hierfl.methods.fedalign.math.AlignSpec`, a job method) and the clipping norm."""
        return {"method": AlignSpec(float(self.mu), float(self.width), bool(self.normalize_lip), int(self.power_iters)),
                "clip_norm": None if self.clip_norm is None else float(self.clip_norm)}

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """``1 + ω²·F(final block)/F(model)``: the slim pass's forward and backward."""
        from hierfl.learn.local import final_block_flops, forward_flops

        return align_work_factor(float(self.width), float(call(final_block_flops, model, input_shape, num_classes)),
                                 float(call(forward_flops, model, input_shape, num_classes)))

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The model needs a slimmable final block (an ``mlp`` with a hidden layer, or a ``cnn``)."""
        out = one_model(scenario, "fedalign")
        if not scenario.model.slimmable_final_block:
            out.append(("model", "fedalign slims the model's final block; allowed: an mlp with at least one hidden "
                        "layer, or a cnn", getattr(scenario.model, "name", None)))
        if scenario.runtime.precision != "fp32":
            out.append(("runtime.precision", "fedalign's loss runs in float32; allowed: fp32", scenario.runtime.precision))
        return out
