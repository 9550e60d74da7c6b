"""Assigning devices to edge servers (pure functions; ``random`` takes an explicit generator)."""

from __future__ import annotations

import numpy as np

__all__ = ["round_robin", "random_balanced", "nearest", "members_of"]


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


def members_of(assignment: np.ndarray, num_edges: int) -> list[np.ndarray]:
    """Sorted device ids of each edge."""
    return [np.flatnonzero(assignment == e).astype(np.int64) for e in range(num_edges)]


def _check(num_devices: int, num_edges: int) -> None:
    if num_edges < 1 or num_devices < num_edges:
        raise ValueError(f"need 1 <= edges <= devices, got {num_edges} edges for {num_devices} devices")
