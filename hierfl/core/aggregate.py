"""Aggregation math on flat float32 parameter vectors (pure numpy).

As in Flower's ``strategy/aggregate.py``, aggregation is vector arithmetic. Sums run in a fixed
order (the order of the arguments, which callers sort by participant id) and accumulate in
float64, so the result is identical wherever it is computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["normalised_weights", "weighted_average"]


def normalised_weights(weights: Sequence[float]) -> np.ndarray:
    """``weights / sum(weights)`` as float64; raises on empty, negative, non-finite or zero-sum input."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("aggregation needs at least one weight")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"aggregation weights must be finite and >= 0, got {w.tolist()}")
    total = w.sum()
    if total <= 0:
        raise ValueError("aggregation weights sum to zero: nothing to average")
    return w / total


def weighted_average(vectors: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """``wavg(models, weights) = Σ_k (w_k / Σ w) · models_k`` (ALGORITHMS.md §1.3), as float32.

    Parameters
    ----------
    vectors:
        Flat parameter vectors of equal length, in a fixed (caller-sorted) order.
    weights:
        Non-negative weights, typically sample counts ``n_k`` (FedAvg, McMahan et al. 2017).
    """
    if len(vectors) != len(weights):
        raise ValueError(f"{len(vectors)} vectors but {len(weights)} weights")
    p = normalised_weights(weights)
    size = vectors[0].shape
    acc = np.zeros(size, dtype=np.float64)
    for vec, pk in zip(vectors, p):
        if vec.shape != size:
            raise ValueError(f"vector shapes differ: {vec.shape} vs {size}")
        acc += pk * vec.astype(np.float64, copy=False)
    return acc.astype(np.float32)
