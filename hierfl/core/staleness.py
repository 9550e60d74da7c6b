"""Staleness functions σ(τ): how much an update computed τ versions ago still counts (pure).

docs/explanation/algorithms.md §1.4, the library shared by FedCH, FedAsync, FedBuff and AHFL:

* ``constant``        σ(τ) = 1                                   (Xie et al., FedAsync, arXiv 1903.03934)
* ``polynomial(a)``   σ(τ) = (τ + 1)^(−a)                        (FedAsync; Plato, APPFL, FLSim)
* ``hinge(a, b)``     σ(τ) = 1 if τ ≤ b else 1 / (a·(τ − b) + 1)  (FedAsync; Plato, APPFL)
* ``fedbuff``         σ(τ) = 1 / √(1 + τ)                        (Nguyen et al., FedBuff, arXiv 2106.06639; FLSim)
* ``fedch(a, b)``     σ(τ) = 1 if τ ≤ a else τ^(−b)              (Wang et al., FedCH, INFOCOM'21)
* ``exponential(lam)`` σ(τ) = e^(−lam·τ)                         (asynchronous protocols; [D])

Staleness ``τ = v_now − v_start`` is a non-negative integer measured at the aggregator that
applies the update. Every function returns a value in (0, 1], non-increasing in τ, with
σ(0) = 1; values that would underflow to 0 are clamped to the smallest positive float so a
very stale update keeps a (negligible) positive weight instead of a zero that breaks
normalisation.

The configs that select one of them by name (``staleness: {name: hinge, a: 10, b: 4}``) are
plug-ins in :mod:`hierfl.policies.staleness`.
"""

from __future__ import annotations

import math

__all__ = ["constant", "polynomial", "hinge", "fedbuff", "fedch", "exponential"]

_TINY = math.ulp(0.0) * 2**52  # smallest positive normal float (2.2e-308)


def _check(tau: int) -> int:
    if isinstance(tau, bool) or int(tau) != tau or tau < 0:
        raise ValueError(f"staleness must be an integer >= 0, got {tau!r}")
    return int(tau)


def _clamp(value: float) -> float:
    return min(1.0, max(value, _TINY))


def constant(tau: int) -> float:
    """σ(τ) = 1."""
    _check(tau)
    return 1.0


def polynomial(tau: int, a: float) -> float:
    """σ(τ) = (τ + 1)^(−a)."""
    return _clamp(math.exp(-a * math.log1p(_check(tau))))


def hinge(tau: int, a: float, b: float) -> float:
    """σ(τ) = 1 if τ ≤ b else 1 / (a·(τ − b) + 1)."""
    t = _check(tau)
    return 1.0 if t <= b else _clamp(1.0 / (a * (t - b) + 1.0))


def fedbuff(tau: int) -> float:
    """σ(τ) = 1 / √(1 + τ) (polynomial with a = 0.5)."""
    return _clamp(1.0 / math.sqrt(1.0 + _check(tau)))


def fedch(tau: int, a: float, b: float) -> float:
    """σ(τ) = 1 if τ ≤ a else τ^(−b); τ = 0 always gives 1 (guards 0^(−b))."""
    t = _check(tau)
    if t <= a or t == 0:
        return 1.0
    return _clamp(math.exp(-b * math.log(t)))


def exponential(tau: int, lam: float) -> float:
    """σ(τ) = e^(−lam·τ)."""
    return _clamp(math.exp(-lam * _check(tau)))
