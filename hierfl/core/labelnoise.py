"""Label noise injected per device (pure): symmetric and pair-flip corruption of training labels.

Methods robust to noisy labels (Fang and Ye, "Robust Federated Learning with Noisy and Heterogeneous
Clients", CVPR 2022) study parties whose private labels are noisy: a label is kept with probability ``1 − ε_i`` and
otherwise replaced, either by one of the other classes drawn uniformly (symmetric noise) or by the
next class (pair flip, ``c → (c + 1) mod C``), the two noise models of the noisy-label literature.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NOISE_KINDS", "flip_labels"]

NOISE_KINDS = ("symmetric", "pair_flip")


def flip_labels(labels: np.ndarray, rate: float, kind: str, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``labels`` where each label is corrupted with probability ``rate``.

    ``symmetric``: a corrupted label becomes one of the other ``C − 1`` classes, uniformly;
    ``pair_flip``: it becomes ``(c + 1) mod C``. A corrupted label never equals the clean one.
    Draws: one uniform per sample (which are corrupted), then, for symmetric noise, one integer
    per corrupted sample, in sample order.
    """
    if kind not in NOISE_KINDS:
        raise ValueError(f"label noise kind must be one of {', '.join(NOISE_KINDS)}, got {kind!r}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"label noise rate must lie in [0, 1], got {rate}")
    if num_classes < 2:
        raise ValueError(f"label noise needs at least 2 classes, got {num_classes}")
    y = np.asarray(labels, dtype=np.int64).copy()
    hit = np.flatnonzero(rng.random(y.size) < rate)
    if kind == "pair_flip":
        y[hit] = (y[hit] + 1) % num_classes
    else:  # an offset of 1..C-1 from the clean class: uniform over the other classes
        y[hit] = (y[hit] + rng.integers(1, num_classes, size=hit.size)) % num_classes
    return y
