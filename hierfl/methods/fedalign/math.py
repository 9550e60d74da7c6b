"""FedAlign as data: the knobs a job carries and the cost of its slim pass (pure, no torch).

Mendieta, Yang, Wang, Lee, Ding, Chen, "Local Learning Matters: Rethinking Data Heterogeneity in
Federated Learning", CVPR 2022 (arXiv 2111.14213). A device adds to its cross-entropy ``μ`` times a
Lipschitz term of the model's final block: the block's transfer-matrix spectral norm at full width and
at a slim width ``ω`` are pulled together. The torch side is :mod:`hierfl.methods.fedalign.trainer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hierfl.core.method import JobMethod

__all__ = ["AlignSpec", "align_work_factor"]


@dataclass(frozen=True)
class AlignSpec(JobMethod):
    """What a FedAlign job adds to its loss.

    ``mu``: weight of the Lipschitz term; ``width``: the slim pass's width multiplier ``ω``;
    ``normalize``: rescale the term each step to ``μ`` times the current cross-entropy (the authors'
    code) instead of adding ``μ·ℓ_Lip`` (the paper's form); ``power_iters``: power iterations of the
    spectral-norm estimate.
    """

    mu: float = 0.45
    width: float = 0.25
    normalize: bool = True
    power_iters: int = 10

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and self.mu >= 0):
            raise ValueError(f"AlignSpec: mu must be a finite number >= 0, got {self.mu!r}")
        if not 0.0 < self.width <= 1.0:
            raise ValueError(f"AlignSpec: width must be in (0, 1], got {self.width!r}")
        if self.power_iters < 1:
            raise ValueError(f"AlignSpec: power_iters must be >= 1, got {self.power_iters!r}")


def align_work_factor(width: float, block_flops: float, model_flops: float) -> float:
    """A FedAlign job's work relative to a plain one: ``1 + ω²·F(block)/F(model)`` (the slim pass's forward
    and backward through the final block, whose multiply-adds scale with the square of the width; the
    power iterations, ``power_iters · B · C²`` multiply-adds per batch, are left out as negligible)."""
    if model_flops <= 0 or block_flops < 0 or block_flops > model_flops:
        raise ValueError(f"need 0 <= block FLOPs <= model FLOPs and model FLOPs > 0, got {block_flops}, {model_flops}")
    return 1.0 + width * width * float(block_flops) / float(model_flops)
