"""DP-FedAvg's arithmetic on the rows of one aggregation (numpy only).

Sources:

* McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language Models", ICLR 2018:
  flat clipping of each update ``Δ_i ← Δ_i · min(1, S/‖Δ_i‖₂)``, the sum of the clipped updates plus
  ``N(0, (zS)²I)``, divided by the expected number of clients ``C`` (the fixed-denominator estimator; the
  noise std on the average is ``zS/C``, as TFF's ``gaussian_fixed`` and Flower's ``compute_stdv``);
* Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping", NeurIPS
  2021 (TF-Privacy's ``QuantileEstimatorQuery``): each client reports ``b_i = 1[‖Δ_i‖ ≤ S]``; the server
  forms ``b̄ = (Σ(b_i − ½) + N(0, σ_b²))/C + ½``, clamped to [0, 1], and steps ``S ← S·exp(−η(b̄ − γ))``
  (γ: the target *unclipped* quantile). The update's noise multiplier is raised so the two releases
  together spend the stated ``z``: ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)`` (TFF ``adaptive_clip_noise_params``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["ClipResult", "clip_updates", "noised_mean", "adaptive_step", "update_noise_multiplier"]


@dataclass(frozen=True)
class ClipResult:
    """Clipped updates (float64, one per row), their norms before clipping, and which were clipped."""

    deltas: np.ndarray
    norms: np.ndarray
    clipped: np.ndarray


def clip_updates(V: np.ndarray, base: np.ndarray, clip: float) -> ClipResult:
    """``Δ_i = V_i − base`` scaled by ``min(1, clip/‖Δ_i‖₂)`` (flat over all tensors; float64)."""
    D = np.asarray(V, dtype=np.float64) - np.asarray(base, dtype=np.float64)[None, :]
    norms = np.sqrt(np.einsum("ij,ij->i", D, D))
    with np.errstate(divide="ignore"):
        factor = np.where(norms > clip, clip / np.where(norms > 0, norms, 1.0), 1.0)
    return ClipResult(D * factor[:, None], norms, norms > clip)


def noised_mean(deltas: np.ndarray, denominator: int, std_sum: float, rng: np.random.Generator,
                local_std: float = 0.0) -> np.ndarray:
    """``(Σ_i (Δ_i + N(0, local_std²)) + N(0, std_sum²)) / denominator``.

    ``local_std`` is each device's own noise (local DP: drawn row by row, in arrival order), ``std_sum``
    the aggregator's noise on the sum (central DP). Draws come from ``rng`` only (a named seed stream).
    """
    d = deltas.shape[1]
    total = np.zeros(d, dtype=np.float64)
    for row in deltas:  # arrival order: the same bits with any executor
        total += row
        if local_std > 0.0:
            total += rng.normal(0.0, local_std, size=d)
    if std_sum > 0.0:
        total += rng.normal(0.0, std_sum, size=d)
    return total / float(denominator)


def adaptive_step(clip: float, norms: np.ndarray, denominator: int, count_std: float, quantile: float,
                  lr: float, rng: np.random.Generator) -> tuple[float, float]:
    """The next clip norm and the noised unclipped fraction ``b̄`` (geometric update of Andrew et al.).

    ``b̄ = clamp((Σ(1[‖Δ_i‖ ≤ S] − ½) + N(0, count_std²))/C + ½, 0, 1)``; ``S ← S·exp(−lr·(b̄ − quantile))``:
    more updates within the clip than the target quantile shrink it, fewer grow it.
    """
    unclipped = (np.asarray(norms) <= clip).astype(np.float64) - 0.5
    noise = rng.normal(0.0, count_std) if count_std > 0.0 else 0.0
    frac = min(1.0, max(0.0, (float(unclipped.sum()) + noise) / float(denominator) + 0.5))
    return clip * math.exp(-lr * (frac - quantile)), frac


def update_noise_multiplier(z: float, count_std: float) -> float:
    """``z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)``: the update's multiplier so that update and count spend ``z`` together.

    Requires ``z < 2σ_b`` (else the count alone would spend more than ``z``); ``z = 0`` stays 0.
    """
    if z == 0.0:
        return 0.0
    if count_std <= 0.0 or z >= 2.0 * count_std:
        raise ValueError(f"adaptive clipping needs noise_multiplier < 2·count_stddev ({z:g} >= {2.0 * count_std:g})")
    return float((z ** -2 - (2.0 * count_std) ** -2) ** -0.5)
