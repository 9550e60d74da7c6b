"""Label distributions at the aggregator: Jensen–Shannon scores and client selection by them (pure numpy).

Lian et al. ("Blockchain-Based Two-Stage Federated Learning With Non-IID Data in IoMT System", IEEE
TCSS 2023) score each client by how far its label distribution lies from a reference one and select
the lower-scored (closer) clients first. docs/explanation/algorithms.md §5.15.

* :func:`js_divergence` — ``JS₂(p ‖ q) = ½ KL₂(p ‖ m) + ½ KL₂(q ‖ m)``, ``m = (p + q)/2``, base-2 logs,
  so it lies in ``[0, 1]`` (0: the same distribution; 1: disjoint supports);
* :func:`js_scores` — every row of a histogram matrix against one reference histogram;
* :func:`select_by_score` — pick ``m`` clients: the lowest scores, the highest, at random, or at
  random with probability ``∝ 1 − s`` (ties of the sorted rules broken by a seeded stream).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SELECTION_RULES", "js_divergence", "js_scores", "select_by_score"]

SELECTION_RULES = ("js_lowest", "js_highest", "random", "js_weighted")


def _normalise(hist: np.ndarray) -> np.ndarray:
    hist = np.asarray(hist, dtype=np.float64)
    if (hist < 0).any():
        raise ValueError(f"a label histogram has counts >= 0, got {hist!r}")
    total = hist.sum(axis=-1, keepdims=True)
    if (total <= 0).any():
        raise ValueError("a label histogram with no samples has no distribution")
    return hist / total


def _kl2(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``Σ p log₂(p/q)`` over the last axis, with ``0 log 0 = 0`` (q > 0 wherever p > 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(p / q), 0.0)
    return terms.sum(axis=-1)


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen–Shannon divergence of two histograms (normalised here), base 2: in ``[0, 1]``."""
    return float(js_scores(np.asarray(p)[None, :], q)[0])


def js_scores(hists: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``(K,)`` JS₂ divergence of each row of ``hists`` (``(K, C)`` counts) from ``reference`` (``(C,)``),
    clipped into ``[0, 1]`` against rounding."""
    p = _normalise(np.atleast_2d(hists))
    q = _normalise(np.asarray(reference))[None, :]
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"histograms over {p.shape[1]} classes against a reference over {q.shape[1]}")
    m = (p + q) / 2.0
    return np.clip(0.5 * _kl2(p, m) + 0.5 * _kl2(q, m), 0.0, 1.0)


def select_by_score(clients: list[int], scores: np.ndarray, m: int, rule: str, rng: np.random.Generator) -> list[int]:
    """``m`` of ``clients`` (sorted on return) by ``rule``.

    ``js_lowest`` / ``js_highest``: the ``m`` smallest / largest scores, ties broken by a random
    permutation from ``rng``; ``random``: uniformly without replacement; ``js_weighted``: without
    replacement with probability ``∝ 1 − s`` (uniform if every ``1 − s`` is 0).
    """
    scores = np.asarray(scores, dtype=np.float64)
    k = len(clients)
    if scores.shape != (k,):
        raise ValueError(f"select_by_score: {k} clients but scores of shape {scores.shape}")
    if not 1 <= m <= k:
        raise ValueError(f"select_by_score: m must be in 1..{k}, got {m}")
    if rule not in SELECTION_RULES:
        raise ValueError(f"select_by_score: rule must be one of {SELECTION_RULES}, got {rule!r}")
    ids = np.asarray(clients, dtype=np.int64)
    if rule in ("js_lowest", "js_highest"):
        tie = rng.permutation(k)
        key = scores if rule == "js_lowest" else -scores
        order = np.lexsort((tie, key))  # by score, then by the random tie-break
        chosen = ids[order[:m]]
    elif rule == "random":
        chosen = rng.choice(ids, size=m, replace=False)
    else:
        w = 1.0 - scores
        p = w / w.sum() if w.sum() > 0 else None
        if p is not None and int((p > 0).sum()) < m:  # fewer clients with weight than seats: fill uniformly
            p = None
        chosen = rng.choice(ids, size=m, replace=False, p=p)
    return sorted(int(i) for i in chosen)
