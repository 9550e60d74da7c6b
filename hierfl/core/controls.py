"""Control variates kept by servers (pure numpy): the weight of each device's control delta in a server's step.

A method whose jobs carry control variates (a server control ``c`` down with the model, each device's
control delta ``Δc_i`` up behind its update) has the aggregator step ``c ← c + Σ_{i∈S} κ_i Δc_i``. The
weights are the method's choice: ``1/N`` (variance reduction's uniform rule) or ``n_i / n`` (which keeps
``c`` the sample-weighted mean of the ``c_i``, matching a sample-weighted model average).
"""

from __future__ import annotations

import numpy as np

__all__ = ["control_weights"]


def control_weights(samples: np.ndarray, weighting: str) -> np.ndarray:
    """``κ_i`` per device: ``1/N`` (``uniform``) or ``n_i / n`` (``samples``)."""
    n = np.asarray(samples, dtype=np.float64)
    if n.size == 0:
        raise ValueError("control weights of no device")
    if weighting == "uniform":
        return np.full(n.size, 1.0 / n.size)
    if weighting == "samples":
        if n.sum() <= 0:
            raise ValueError("control weights: devices hold no samples")
        return n / n.sum()
    raise ValueError(f"unknown control weighting {weighting!r}; allowed: uniform, samples")
