"""Per-device evaluation as data: which of a device's rows it is tested on, and the eval-line fields
summarising the devices' accuracies (pure, no torch).

With ``data.local_test_fraction`` each device keeps a held-out share of its rows (:func:`local_test_split`);
with ``data.test_devices`` whole devices never train and are tested on part of their rows, the rest being
what a method may adapt on first (:func:`support_split`; a job method chooses its own split with
:meth:`JobMethod.eval_split <hierfl.core.method.JobMethod.eval_split>`). The per-device
``(correct, tested, loss sum)`` rows become the ``device_accuracy_*`` fields of an eval line
(:func:`device_accuracy_fields`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["DEFAULT_SUPPORT_FRACTION", "support_split", "local_test_split", "weighted_quantiles",
           "weighted_tail_mean", "device_accuracy_fields"]

DEFAULT_SUPPORT_FRACTION = 0.2
"""Share of a held-out device's rows kept out of its test rows when its method chooses no split of its own."""


def support_split(n: int, fraction: float, seed: int, device: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into a device's ``n`` samples) of its support and query sets.

    A seeded permutation of ``(seed, device)``; the support set is the first ``round(f·n)``, kept
    between 1 and ``n − 1`` so both sets are non-empty (a device with one sample uses it for both).
    """
    if n < 1:
        raise ValueError(f"device {device} has no samples")
    if n == 1:
        only = np.zeros(1, dtype=np.int64)
        return only, only
    perm = np.random.default_rng((int(seed), int(device))).permutation(n).astype(np.int64)
    k = min(max(int(round(fraction * n)), 1), n - 1)
    return np.sort(perm[:k]), np.sort(perm[k:])


def local_test_split(rows: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A device's rows → (training rows, held-out test rows): ``⌊f·n⌋`` test rows, at least 1 when
    ``f > 0`` and the device has 2 or more samples, and always one training row."""
    n = rows.size
    k = int(np.floor(fraction * n))
    if fraction > 0 and n >= 2:
        k = max(k, 1)
    k = min(k, n - 1)
    perm = rng.permutation(n)
    return np.sort(rows[perm[k:]]), np.sort(rows[perm[:k]])


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles of ``values`` where value ``i`` counts ``weights[i]`` times (the lower weighted quantile:
    the smallest value whose cumulative weight share reaches ``q``)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if values.size == 0 or total <= 0:
        raise ValueError("weighted quantiles need at least one value with positive weight")
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order]) / total
    return [float(values[order][min(int(np.searchsorted(cum, q - 1e-12)), values.size - 1)]) for q in qs]


def weighted_tail_mean(values: np.ndarray, weights: np.ndarray, share: float) -> float:
    """Mean of the lowest ``share`` of the weighted distribution of ``values`` (the device at the boundary
    counts with the part of its weight that falls inside): the worst decile's mean for ``share = 0.1``."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if values.size == 0 or total <= 0 or not 0 < share <= 1:
        raise ValueError("a tail mean needs a share in (0, 1] and at least one value with positive weight")
    order = np.argsort(values, kind="stable")
    budget = share * total
    before = np.concatenate([[0.0], np.cumsum(weights[order])[:-1]])
    taken = np.clip(budget - before, 0.0, weights[order])  # each device's weight inside the tail
    return float((taken * values[order]).sum() / taken.sum())


def device_accuracy_fields(results: np.ndarray) -> dict[str, float | int]:
    """Eval-line fields from per-device ``(correct, tested, loss sum)`` rows: the sample-weighted mean,
    p10, p50 and p90 of per-device accuracy, the mean of its worst decile (``worst10``) and its
    sample-weighted standard deviation (``std``, the spread), the weighted mean loss and how many
    devices were tested."""
    results = np.asarray(results, dtype=np.float64)
    if results.size == 0:
        return {}
    correct, tested, loss = results[:, 0], results[:, 1], results[:, 2]
    acc = correct / tested
    p10, p50, p90 = weighted_quantiles(acc, tested, (0.1, 0.5, 0.9))
    mean = float(correct.sum() / tested.sum())
    std = float(np.sqrt((tested * (acc - mean) ** 2).sum() / tested.sum()))
    return {"device_accuracy_mean": mean, "device_accuracy_p10": p10,
            "device_accuracy_p50": p50, "device_accuracy_p90": p90,
            "device_accuracy_worst10": weighted_tail_mean(acc, tested, 0.1), "device_accuracy_std": std,
            "device_loss_mean": float(loss.sum() / tested.sum()), "device_eval_devices": int(acc.size)}
