"""Cosine similarity of model vectors (pure numpy): what a role computes for a protocol that groups
devices by the similarity of their updates (docs/explanation/algorithms.md §5.9)."""

from __future__ import annotations

import numpy as np

__all__ = ["cosine_similarity"]


def cosine_similarity(vectors: np.ndarray) -> np.ndarray:
    """``S_ij = cos(v_i, v_j)`` of the rows of ``vectors`` (float64); a zero row has similarity 0 to all."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    u = v / safe[:, None]
    s = u @ u.T
    s[norms == 0, :] = 0.0
    s[:, norms == 0] = 0.0
    return np.clip(s, -1.0, 1.0)
