"""Topology arithmetic: path composition, distances, distance latency, proportional splits.

Pure functions of numbers and arrays (no I/O, no hidden RNG) used by the topology files and
generators of :mod:`hierfl.topology`:

* a multi-hop path between an edge server and the cloud is one end-to-end link whose latency is
  the **sum** of the hop latencies and whose bandwidth is the **bottleneck** (minimum) hop, per
  direction — the usual store-and-forward-free reading of a path for a single model transfer;
* latency from distance is ``base_ms + ms_per_km · distance`` (light in fibre covers about
  200 km per ms one way, 0.005 ms/km; real routes are longer than the straight line, hence the
  default of 0.01 ms/km used by the generators);
* proportions become integer counts by the largest-remainder (Hamilton) method, so they always
  sum to the total and every count is within 1 of its exact share.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["compose_path", "pairwise_km", "distance_latency_ms", "split_counts", "blocks",
           "round_robin_within", "uniform_square"]


def compose_path(hops: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """``(up_mbps, down_mbps, latency_ms)`` of a path made of ``hops`` (each ``(up, down, latency)``).

    Bandwidth is the bottleneck hop per direction, latency the sum of the hops.
    """
    if not hops:
        raise ValueError("a path needs at least one hop")
    for up, down, lat in hops:
        if not (up > 0 and down > 0):
            raise ValueError(f"hop bandwidths must be > 0, got up {up}, down {down}")
        if lat < 0:
            raise ValueError(f"hop latency must be >= 0, got {lat}")
    return (min(h[0] for h in hops), min(h[1] for h in hops), float(sum(h[2] for h in hops)))


def pairwise_km(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances (km) between the rows of ``a`` (n, 2) and ``b`` (m, 2) → (n, m)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 2)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 2)
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))


def distance_latency_ms(distance_km: np.ndarray | float, base_ms: float, ms_per_km: float) -> np.ndarray:
    """One-way latency ``base_ms + ms_per_km · distance`` (both ≥ 0)."""
    if base_ms < 0 or ms_per_km < 0:
        raise ValueError(f"base_ms and ms_per_km must be >= 0, got {base_ms}, {ms_per_km}")
    return base_ms + ms_per_km * np.asarray(distance_km, dtype=np.float64)


def split_counts(total: int, weights: Sequence[float]) -> np.ndarray:
    """Integer counts summing to ``total`` in proportion to ``weights`` (largest remainder).

    Each count is ``floor(total · w / Σw)``; the units left over go to the largest remainders,
    ties to the earlier entry. Raises ``ValueError`` for negative weights or a zero sum.
    """
    w = np.asarray(weights, dtype=np.float64)
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if w.size == 0 or np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    left = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def blocks(counts: Sequence[int]) -> np.ndarray:
    """Label ``k`` repeated ``counts[k]`` times: contiguous blocks in order (``[2, 1]`` → ``[0, 0, 1]``)."""
    return np.repeat(np.arange(len(counts), dtype=np.int64), np.asarray(counts, dtype=np.int64))


def round_robin_within(group_of: np.ndarray, members: Sequence[Sequence[int]]) -> np.ndarray:
    """Balance each group's devices over that group's edge servers, round robin in device order.

    ``group_of[i]`` is device ``i``'s group; ``members[g]`` lists the edge ids of group ``g``
    (non-empty). The ``j``-th device of group ``g`` goes to ``members[g][j mod len(members[g])]``.
    """
    out = np.empty(len(group_of), dtype=np.int64)
    seen = np.zeros(len(members), dtype=np.int64)
    for i, g in enumerate(np.asarray(group_of, dtype=np.int64)):
        edges = members[g]
        if not edges:
            raise ValueError(f"group {g} has no edge server")
        out[i] = edges[seen[g] % len(edges)]
        seen[g] += 1
    return out


def uniform_square(rng: np.random.Generator, count: int, side_km: float,
                   origin_km: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """``count`` points uniform in the square ``origin + [0, side]²`` (km), shape (count, 2)."""
    if side_km <= 0:
        raise ValueError(f"side must be > 0, got {side_km}")
    return np.asarray(origin_km, dtype=np.float64) + rng.uniform(0.0, side_km, size=(count, 2))
