"""Cohort sampling of synchronous rounds: a fixed-size sample, or each device on its own coin (numpy only).

* fixed: ``m`` devices drawn uniformly without replacement (McMahan et al., AISTATS 2017: ``max(⌈C·N⌉, 1)``
  devices a round), the sampling most FL code does;
* bernoulli: every device joins the round on its own coin of probability ``q`` (Poisson sampling, the
  sampling that differential privacy's amplification analyses assume: Abadi et al., CCS 2016; McMahan et al.,
  ICLR 2018), so a round's size varies and may be zero.

A Bernoulli cohort is drawn as its size, ``Binomial(n, q)``, then that many members uniformly without
replacement: the same distribution as ``n`` coins, at a cost that grows with the cohort, not the population.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SAMPLINGS", "bernoulli_cohort"]

SAMPLINGS = ("fixed", "bernoulli")


def bernoulli_cohort(rng: np.random.Generator, population: int | np.ndarray, q: float) -> np.ndarray:
    """Members of ``population`` (a count ``n``: devices ``0..n-1``; or an array of ids) that each joined with
    probability ``q``, independently, in the order drawn (sort them for a canonical order)."""
    size = int(population) if np.ndim(population) == 0 else len(population)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q must be in (0, 1], got {q}")
    count = int(rng.binomial(size, q))
    if count == 0:
        return np.empty(0, dtype=np.int64)
    return np.asarray(rng.choice(population, size=count, replace=False), dtype=np.int64)
