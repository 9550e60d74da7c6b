"""WSCC's clustering math: affinity propagation on the cosine similarity of client updates (pure).

Tian, Liao, Yu, Blasch, "WSCC: A Weight-Similarity-Based Client Clustering Approach for Non-IID
Federated Learning", IEEE IoT-J 2022 (DOI 10.1109/JIOT.2022.3175149); docs/explanation/algorithms.md §5.9.
Clients are grouped by the cosine similarity of their weights (by default of their warm-up
*updates* ``w_i − w0``: raw weights are dominated by the shared initialisation), with
scikit-learn's ``AffinityPropagation`` on the precomputed similarity
(:func:`hierfl.core.similarity.cosine_similarity`); AP chooses the number of
clusters. If AP does not converge, or gives every client its own cluster, everyone is one
cluster (FedAvg) and the reason is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Clustering", "affinity_clusters", "similarity_summary", "cluster_servers"]


@dataclass(frozen=True)
class Clustering:
    """AP's result: ``labels[i]`` the cluster of client ``i`` (0..k−1, numbered by first member),
    the exemplar of each cluster, and why it fell back to one cluster (or None)."""

    labels: np.ndarray
    exemplars: list[int]
    fallback: str | None = None

    @property
    def members(self) -> list[list[int]]:
        """Client indices per cluster."""
        k = int(self.labels.max()) + 1 if self.labels.size else 0
        return [np.flatnonzero(self.labels == c).tolist() for c in range(k)]


def affinity_clusters(similarity: np.ndarray, damping: float = 0.5, preference: float | str = "median",
                      max_iter: int = 200, convergence_iter: int = 15, seed: int = 0) -> Clustering:
    """Affinity propagation on a precomputed similarity (§5.9 defaults); labels renumbered by first member."""
    from sklearn.cluster import AffinityPropagation  # type: ignore[import-untyped]
    from sklearn.exceptions import ConvergenceWarning  # type: ignore[import-untyped]
    import warnings

    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[0]
    if s.shape != (n, n) or n < 1:
        raise ValueError(f"similarity must be a non-empty square matrix, got {s.shape}")
    one = Clustering(np.zeros(n, dtype=np.int64), [0])
    if n == 1:
        return one
    if np.ptp(s[~np.eye(n, dtype=bool)]) == 0:  # nobody can be told apart (scikit-learn picks arbitrary centres)
        return Clustering(one.labels, one.exemplars, "all similarities are equal")
    pref = float(np.median(s)) if preference == "median" else float(preference)
    ap = AffinityPropagation(affinity="precomputed", damping=damping, preference=pref, max_iter=max_iter,
                             convergence_iter=convergence_iter, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            raw = ap.fit_predict(s)
        except ConvergenceWarning:
            return Clustering(one.labels, one.exemplars, "affinity propagation did not converge")
    if raw.min() < 0:
        return Clustering(one.labels, one.exemplars, "affinity propagation did not converge")
    centers = [int(c) for c in ap.cluster_centers_indices_]
    if len(set(raw.tolist())) == n:
        return Clustering(one.labels, one.exemplars, "affinity propagation gave every client its own cluster")
    order: dict[int, int] = {}
    for label in raw.tolist():
        order.setdefault(int(label), len(order))
    labels = np.array([order[int(label)] for label in raw], dtype=np.int64)
    exemplars = [centers[old] for old, _ in sorted(order.items(), key=lambda kv: kv[1])]
    return Clustering(labels, exemplars)


def similarity_summary(similarity: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Mean off-diagonal similarity within and between clusters, and overall min / mean / max."""
    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[0]
    off = ~np.eye(n, dtype=bool)
    same = (labels[:, None] == labels[None, :]) & off
    other = labels[:, None] != labels[None, :]
    vals = s[off] if n > 1 else s.ravel()

    def mean(mask: np.ndarray) -> float | None:  # type: ignore[type-arg]
        return float(s[mask].mean()) if mask.any() else None

    return {"min": float(vals.min()), "mean": float(vals.mean()), "max": float(vals.max()),
            "within_mean": mean(same), "between_mean": mean(other)}  # type: ignore[dict-item]


def cluster_servers(members: list[list[int]], edge_of: np.ndarray, num_edges: int) -> list[int]:
    """Each cluster's edge aggregator (docs/explanation/algorithms.md §5.9 step 6): the edge server that is the home
    (``edge_of``) of most of its members, the lowest id on a tie; several clusters may share one.
    A cluster none of whose members has a home server goes to server 0."""
    servers = []
    for group in members:
        homes = edge_of[np.asarray(group, dtype=np.int64)]
        homes = homes[homes >= 0]
        servers.append(int(np.bincount(homes, minlength=num_edges).argmax()) if homes.size else 0)
    return servers
