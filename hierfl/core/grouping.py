"""Assigning devices to edge servers (pure functions; ``random`` takes an explicit generator)."""

from __future__ import annotations

import numpy as np

__all__ = ["round_robin", "random_balanced", "nearest", "kmeans", "members_of"]


def round_robin(num_devices: int, num_edges: int) -> np.ndarray:
    """Device ``i`` → edge ``i mod E``."""
    _check(num_devices, num_edges)
    return np.arange(num_devices, dtype=np.int64) % num_edges


def random_balanced(num_devices: int, num_edges: int, rng: np.random.Generator) -> np.ndarray:
    """A random assignment with balanced sizes (⌊N/E⌋ or ⌊N/E⌋+1 devices per edge)."""
    _check(num_devices, num_edges)
    out = np.empty(num_devices, dtype=np.int64)
    out[rng.permutation(num_devices)] = np.arange(num_devices) % num_edges
    return out


def nearest(latency_ms: np.ndarray) -> np.ndarray:
    """Each device → the edge with the lowest link latency (ties → lower edge id).

    ``latency_ms`` has shape (devices, edges). Edges may end up with no device.
    """
    if latency_ms.ndim != 2 or latency_ms.shape[1] < 1:
        raise ValueError("latency matrix must be (devices, edges) with at least one edge")
    return np.argmin(latency_ms, axis=1).astype(np.int64)


def kmeans(features: np.ndarray, k: int, rng: np.random.Generator, max_iter: int = 100) -> np.ndarray:
    """Lloyd's k-means on standardised ``features`` (devices × F) → labels in ``0..k-1``.

    Seeding is k-means++ from ``rng``; a cluster that empties is re-seeded with the point
    farthest from its centre, so every label is used when ``k <= devices``. Labels are renumbered
    by increasing mean of the first feature (e.g. compute time: group 0 = the fastest), so the
    result does not depend on the seeding order.
    """
    x = np.asarray(features, dtype=np.float64)
    n = x.shape[0]
    _check(n, k)
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    centres = [x[rng.integers(n)]]
    for _ in range(1, k):
        d2 = np.min([((x - c) ** 2).sum(axis=1) for c in centres], axis=0)
        total = d2.sum()
        centres.append(x[rng.choice(n, p=d2 / total)] if total > 0 else x[rng.integers(n)])
    c = np.array(centres)
    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(max_iter):
        dist = ((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
        new = np.argmin(dist, axis=1).astype(np.int64)
        moved = np.zeros(n, dtype=bool)
        for j in range(k):  # re-seed an empty cluster with the worst-served point that can move
            if not np.any(new == j):
                sizes = np.bincount(new, minlength=k)
                cost = np.where(moved | (sizes[new] < 2), -np.inf, dist[np.arange(n), new])
                far = int(np.argmax(cost))
                new[far] = j
                moved[far] = True
        if np.array_equal(new, labels):
            break
        labels = new
        c = np.array([x[labels == j].mean(axis=0) for j in range(k)])
    order = np.argsort([features[labels == j, 0].mean() for j in range(k)], kind="stable")
    rank = np.empty(k, dtype=np.int64)
    rank[order] = np.arange(k)
    return rank[labels]


def members_of(assignment: np.ndarray, num_edges: int) -> list[np.ndarray]:
    """Sorted device ids of each edge."""
    return [np.flatnonzero(assignment == e).astype(np.int64) for e in range(num_edges)]


def _check(num_devices: int, num_edges: int) -> None:
    if num_edges < 1 or num_devices < num_edges:
        raise ValueError(f"need 1 <= edges <= devices, got {num_edges} edges for {num_devices} devices")
