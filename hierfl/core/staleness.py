"""Staleness functions σ(τ): how much an update computed τ versions ago still counts (pure).

docs/explanation/algorithms.md §1.4, the library the asynchronous protocols share:

* ``constant``        σ(τ) = 1                                   (Xie, Koyejo, Gupta, arXiv 1903.03934)
* ``polynomial(a)``   σ(τ) = (τ + 1)^(−a)                        (Xie et al. 2019; Plato, APPFL, FLSim)
* ``hinge(a, b)``     σ(τ) = 1 if τ ≤ b else 1 / (a·(τ − b) + 1)  (Xie et al. 2019; Plato, APPFL)
* ``exponential(lam)`` σ(τ) = e^(−lam·τ)                         (asynchronous protocols; [D])

A method's own σ (those of Nguyen et al. 2022 and Wang et al. 2021) lives in its package, built from
:func:`check_tau` and :func:`clamp` like the ones here.

Staleness ``τ = v_now − v_start`` is a non-negative integer measured at the aggregator that
applies the update. Every function returns a value in (0, 1], non-increasing in τ, with
σ(0) = 1; values that would underflow to 0 are clamped to the smallest positive float so a
very stale update keeps a (negligible) positive weight instead of a zero that breaks
normalisation.

The configs that select one of them by name (``staleness: {name: hinge, a: 10, b: 4}``) are
plug-ins of :data:`hierfl.policies.staleness.STALENESS`.
"""

from __future__ import annotations

import math

__all__ = ["constant", "polynomial", "hinge", "exponential", "check_tau", "clamp"]

_TINY = math.ulp(0.0) * 2**52  # smallest positive normal float (2.2e-308)


def check_tau(tau: int) -> int:
    """``tau`` as an int; ValueError unless it is an integer >= 0."""
    if isinstance(tau, bool) or int(tau) != tau or tau < 0:
        raise ValueError(f"staleness must be an integer >= 0, got {tau!r}")
    return int(tau)


def clamp(value: float) -> float:
    """``value`` in (0, 1]: at most 1, and at least the smallest positive normal float (never 0)."""
    return min(1.0, max(value, _TINY))


def constant(tau: int) -> float:
    """σ(τ) = 1."""
    check_tau(tau)
    return 1.0


def polynomial(tau: int, a: float) -> float:
    """σ(τ) = (τ + 1)^(−a)."""
    return clamp(math.exp(-a * math.log1p(check_tau(tau))))


def hinge(tau: int, a: float, b: float) -> float:
    """σ(τ) = 1 if τ ≤ b else 1 / (a·(τ − b) + 1)."""
    t = check_tau(tau)
    return 1.0 if t <= b else clamp(1.0 / (a * (t - b) + 1.0))


def exponential(tau: int, lam: float) -> float:
    """σ(τ) = e^(−lam·τ)."""
    return clamp(math.exp(-lam * check_tau(tau)))
