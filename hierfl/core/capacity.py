"""Capacity classes and intra-class rings (the grouping of Li et al., ICPP 2022), as pure functions.

G. Li, Y. Hu, M. Zhang, J. Liu, Q. Yin, Y. Peng, D. Dou, ICPP 2022 (arXiv 2206.10546);
docs/explanation/algorithms.md §3.2. Devices are put into ``k`` classes by the time ``t_i`` of one local training
unit — 1-D k-means on ``log t_i`` (default, [D]) or equal-size quantile bins — and each class is
a ring ordered fastest → slowest whose slowest member sends back to the fastest ([B]).

Classes are numbered by ascending unit time (class 0 is the fastest) and every tie is broken by
device id, so the result is a pure function of the input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["kmeans_1d", "quantile_bins", "capacity_classes", "ring_orders", "ring_successors"]


def _check(values: np.ndarray, k: int) -> None:
    if values.ndim != 1 or values.size == 0:
        raise ValueError("need a non-empty 1-D array of values")
    if not np.all(np.isfinite(values)):
        raise ValueError("values must be finite")
    if not 1 <= k <= values.size:
        raise ValueError(f"need 1 <= k <= number of devices ({values.size}), got k={k}")


def _sorted_order(values: np.ndarray) -> np.ndarray:
    """Indices by ascending value, ties by index."""
    return np.lexsort((np.arange(values.size), values))


def kmeans_1d(values: Sequence[float] | np.ndarray, k: int) -> np.ndarray:
    """Globally optimal 1-D k-means labels (class 0 = smallest values), exactly ``k`` non-empty classes.

    Dynamic programming over the sorted values (as Ckmeans.1d.dp, Wang & Song 2011): in 1-D an
    optimal clustering is a split of the sorted values into contiguous segments, so there is no
    initialisation to seed and no local optimum. ``O(k·n²)`` time, vectorised over one axis.
    """
    x = np.asarray(values, dtype=np.float64)
    _check(x, k)
    n = x.size
    order = _sorted_order(x)
    s = x[order]
    p1 = np.concatenate([[0.0], np.cumsum(s)])
    p2 = np.concatenate([[0.0], np.cumsum(s * s)])
    best = np.full((k + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    start = np.zeros((k + 1, n + 1), dtype=np.int64)
    for c in range(1, k + 1):
        for j in range(c, n - (k - c) + 1):  # first j sorted values in c segments
            first = np.arange(c - 1, j)       # the last segment is s[first:j]
            m = j - first
            total = p1[j] - p1[first]
            sse = np.maximum((p2[j] - p2[first]) - total * total / m, 0.0)  # cancellation can go below 0
            cand = best[c - 1, first] + sse
            a = int(np.argmin(cand))  # first minimum: deterministic tie-break
            best[c, j], start[c, j] = cand[a], first[a]
    labels_sorted = np.empty(n, dtype=np.int64)
    j = n
    for c in range(k, 0, -1):
        i = int(start[c, j])
        labels_sorted[i:j] = c - 1
        j = i
    labels = np.empty(n, dtype=np.int64)
    labels[order] = labels_sorted
    return labels


def quantile_bins(values: Sequence[float] | np.ndarray, k: int) -> np.ndarray:
    """Equal-size bins by ascending value: sizes ⌈n/k⌉ for the first ``n mod k`` classes, ⌊n/k⌋ after."""
    x = np.asarray(values, dtype=np.float64)
    _check(x, k)
    labels = np.empty(x.size, dtype=np.int64)
    for c, chunk in enumerate(np.array_split(_sorted_order(x), k)):
        labels[chunk] = c
    return labels


def capacity_classes(unit_time_s: Sequence[float] | np.ndarray, k: int, method: str = "kmeans") -> np.ndarray:
    """Class of each device from its unit time: ``kmeans`` on ``log t_i`` or ``quantile`` bins."""
    t = np.asarray(unit_time_s, dtype=np.float64)
    if t.size and np.any(t <= 0):
        raise ValueError("unit times must be > 0")
    if method == "kmeans":
        # log: a class is a range of speed *ratios* (2 s vs 4 s as far apart as 20 s vs 40 s)
        return kmeans_1d(np.log(t), k)
    if method == "quantile":
        return quantile_bins(t, k)
    raise ValueError(f"unknown classing method {method!r}; allowed: kmeans, quantile")


def ring_orders(labels: Sequence[int] | np.ndarray, unit_time_s: Sequence[float] | np.ndarray) -> list[list[int]]:
    """Each class's members ordered fastest → slowest (ties by device id); classes in label order."""
    lab = np.asarray(labels, dtype=np.int64)
    t = np.asarray(unit_time_s, dtype=np.float64)
    if lab.shape != t.shape:
        raise ValueError(f"labels and unit times differ in shape: {lab.shape} vs {t.shape}")
    order = _sorted_order(t)
    return [[int(i) for i in order if lab[i] == c] for c in np.unique(lab)]


def ring_successors(rings: Sequence[Sequence[int]], num_devices: int) -> np.ndarray:
    """``succ[i]``: the next slower member of i's ring; the slowest wraps to the fastest; alone → itself."""
    succ = np.full(num_devices, -1, dtype=np.int64)
    for ring in rings:
        for pos, device in enumerate(ring):
            if succ[device] != -1:
                raise ValueError(f"device {device} is in more than one ring")
            succ[device] = ring[(pos + 1) % len(ring)]
    if np.any(succ < 0):
        raise ValueError(f"devices in no ring: {np.flatnonzero(succ < 0).tolist()}")
    return succ
