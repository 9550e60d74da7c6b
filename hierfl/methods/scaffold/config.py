"""The ``training.trainer`` config of scaffold: ``scaffold`` — Karimireddy et al., ICML 2020, option II (docs/explanation/algorithms.md §5.6; math in
  :mod:`hierfl.methods.scaffold.math`). Each device's control ``c_i`` lives in its device host and
  persists across rounds; the cloud keeps ``c``, stepped ``c ← c + Σ_{i∈S} κ_i Δc_i``. The paper
  averages ``Δy`` uniformly and uses ``κ_i = 1/N``; hierfl's FedAvg/HierFAVG average models by
  sample count, so ``κ_i = n_i / n`` by default (``c`` then tracks ``Σ (n_i/n) c_i``, the gradient
  of the objective those averages optimise) [D]; ``control_weighting: uniform`` is the paper's
  rule. (With ``uniform``, epoch-based jobs and power-law sample counts — a device's step count
  ∝ its data — we measured divergence on ``fedavg_synthetic.yaml``.) Messages carry two vectors: down ``(x, c)``,
  up ``[y; Δc]`` (an edge server relays ``[x_ℓ; Σ κ_i Δc_i]``), so every transfer is twice the
  model's bytes. Needs a synchronous protocol that supports it (``fedavg``, ``hierfavg``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from hierfl.core.message import CONTROLLED, MessageLayout
from hierfl.methods.scaffold.math import ControlJob
from hierfl.learn.trainers import TRAINERS, TrainerConfig

__all__ = ["ScaffoldTrainer"]


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
    def layout(self) -> MessageLayout:
        """Model and control travel together, both ways (down ``c``, up ``Δc_i``)."""
        return CONTROLLED

    def spec_fields(self) -> dict[str, Any]:
        """``control_variates`` and the SCAFFOLD job (:class:`~hierfl.methods.scaffold.math.ControlJob`)."""
        return {"control_variates": True, "method": ControlJob()}
