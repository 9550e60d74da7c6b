"""The ``training.trainer`` config of fedprox: ``fedprox`` — Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
  Heterogeneous Networks", MLSys 2020 (arXiv 1812.06127), docs/explanation/algorithms.md §5.5: the local objective
  gets ``(μ/2)‖w − w_t‖²``, i.e. ``μ (w − w_t)`` is added to every gradient. Works with every
  protocol; with FedAsync/AHFL's own ρ the two coefficients add up.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hierfl.learn.trainers import TRAINERS, TrainerConfig

__all__ = ["FedProxTrainer"]


@TRAINERS.register
class FedProxTrainer(TrainerConfig):
    """``trainer: {name: fedprox, mu: 0.01}``: SGD on ``F_k(w) + (μ/2)‖w − w_t‖²``."""

    name: Literal["fedprox"] = "fedprox"
    mu: float = Field(default=0.01, ge=0.0, allow_inf_nan=False,
                      description="proximal coefficient μ >= 0 (grid 0.001–1; 0 = SGD) [D/K]")

    def spec_fields(self) -> dict[str, Any]:
        """``mu``."""
        return {"mu": float(self.mu)}
