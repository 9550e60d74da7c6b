"""Device–device graphs and their mixing matrices (pure math: arrays and numbers, no hidden RNG).

Serverless protocols (peer-to-peer learning on graphs, decentralised SGD of Lian et al. 2017/18) let every device talk only
to its one-hop neighbours. This module builds the undirected graphs they run on and the
Metropolis–Hastings weights they mix with:

* generators — ``ring``, ``torus`` (2-D, wrap-around), ``random_geometric`` (radius ``r`` in the
  unit square), ``erdos_renyi`` (edge probability ``p``), ``k_regular`` (the circulant graph of
  ``k`` nearest ring neighbours) and ``small_world`` (Watts–Strogatz rewiring of that circulant);
  the random ones take an explicit ``numpy.random.Generator``;
* :func:`metropolis_weights` — the doubly stochastic mixing matrix on the live subgraph
  (Xiao & Boyd, "Fast linear iterations for distributed averaging", 2004; used by Lian et al.,
  "Can Decentralized Algorithms Outperform Centralized Algorithms?", NeurIPS 2017):
  ``W_ij = 1 / (1 + max(d_i, d_j))`` on an edge, ``W_ii = 1 − Σ_{j≠i} W_ij``, where ``d`` counts
  live neighbours only, so a node that leaves drops out of the matrix and the rest still mix
  with a symmetric, doubly stochastic matrix;
* :func:`consensus_distance` — ``(1/N) Σ_i ‖x_i − x̄‖²``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DeviceGraph",
    "connected",
    "consensus_distance",
    "erdos_renyi",
    "k_regular",
    "metropolis_row",
    "metropolis_weights",
    "random_geometric",
    "ring",
    "small_world",
    "torus",
]


@dataclass(frozen=True)
class DeviceGraph:
    """An undirected graph over devices ``0..n-1`` with optional per-link bandwidth and latency.

    ``edges`` are sorted pairs ``(i, j)`` with ``i < j``; ``links`` maps a pair to
    ``(bandwidth_mbps, latency_ms)`` where a file set them (a missing pair, or ``inf`` / ``nan``,
    falls back to the world's device-to-device rule).
    """

    n: int
    edges: tuple[tuple[int, int], ...]
    links: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    neighbours: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        adj: list[list[int]] = [[] for _ in range(self.n)]
        for i, j in self.edges:
            if not (0 <= i < j < self.n):
                raise ValueError(f"edge {(i, j)} is not a pair 0 <= i < j < {self.n}")
            adj[i].append(j)
            adj[j].append(i)
        object.__setattr__(self, "neighbours", tuple(tuple(sorted(a)) for a in adj))

    def degree(self, i: int) -> int:
        """Number of neighbours of ``i`` (live or not)."""
        return len(self.neighbours[i])

    def link(self, i: int, j: int) -> tuple[float, float] | None:
        """``(bandwidth_mbps, latency_ms)`` of the pair ``{i, j}`` when a file set it."""
        return self.links.get((min(i, j), max(i, j)))


def _graph(n: int, pairs: Iterable[tuple[int, int]]) -> DeviceGraph:
    edges = sorted({(min(i, j), max(i, j)) for i, j in pairs if i != j})
    return DeviceGraph(n, tuple((int(i), int(j)) for i, j in edges))


def ring(n: int) -> DeviceGraph:
    """Cycle ``0 – 1 – … – n-1 – 0`` (a single edge for two nodes, no edge for one)."""
    return _graph(n, ((i, (i + 1) % n) for i in range(n)))


def torus(rows: int, cols: int) -> DeviceGraph:
    """2-D torus: node ``r·cols + c`` linked to its right and lower neighbours, wrapping around."""
    pairs = []
    for r in range(rows):
        for c in range(cols):
            v = r * cols + c
            pairs.append((v, r * cols + (c + 1) % cols))
            pairs.append((v, ((r + 1) % rows) * cols + c))
    return _graph(rows * cols, pairs)


def random_geometric(n: int, radius: float, rng: np.random.Generator) -> tuple[DeviceGraph, np.ndarray]:
    """Nodes uniform in the unit square, linked when closer than ``radius``; the graph and (n, 2) positions."""
    xy = rng.random((n, 2))
    d = np.hypot(xy[:, None, 0] - xy[None, :, 0], xy[:, None, 1] - xy[None, :, 1])
    i, j = np.nonzero(np.triu(d < radius, k=1))
    return _graph(n, zip(i.tolist(), j.tolist())), xy


def erdos_renyi(n: int, p: float, rng: np.random.Generator) -> DeviceGraph:
    """Each of the ``n(n-1)/2`` pairs is an edge with probability ``p`` (pairs drawn in row order)."""
    i, j = np.triu_indices(n, k=1)
    keep = rng.random(i.shape[0]) < p
    return _graph(n, zip(i[keep].tolist(), j[keep].tolist()))


def k_regular(n: int, k: int) -> DeviceGraph:
    """The circulant graph: each node linked to its ``k/2`` nearest neighbours on each side of a ring
    (``k`` even, ``k < n``), so every node has degree ``k``."""
    if k % 2 or not 0 <= k < n:
        raise ValueError(f"k must be even and 0 <= k < n={n}, got {k}")
    return _graph(n, ((i, (i + s) % n) for i in range(n) for s in range(1, k // 2 + 1)))


def small_world(n: int, k: int, beta: float, rng: np.random.Generator) -> DeviceGraph:
    """Watts–Strogatz: the circulant graph of :func:`k_regular`, each edge ``(i, i+s)`` rewired with
    probability ``beta`` to ``(i, u)``, ``u`` uniform among the nodes not yet linked to ``i``."""
    base = k_regular(n, k)
    adj = [set(a) for a in base.neighbours]
    for s in range(1, k // 2 + 1):
        for i in range(n):
            j = (i + s) % n
            if j not in adj[i] or rng.random() >= beta:
                continue
            free = [u for u in range(n) if u != i and u not in adj[i]]
            if not free:
                continue
            u = free[int(rng.integers(len(free)))]
            adj[i].discard(j)
            adj[j].discard(i)
            adj[i].add(u)
            adj[u].add(i)
    return _graph(n, ((i, j) for i in range(n) for j in adj[i]))


def connected(graph: DeviceGraph) -> bool:
    """Whether every node can reach every other (breadth-first search)."""
    if graph.n <= 1:
        return True
    seen = {0}
    todo = [0]
    while todo:
        for j in graph.neighbours[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == graph.n


def _live_degrees(graph: DeviceGraph, live: np.ndarray) -> np.ndarray:
    return np.array([sum(1 for j in graph.neighbours[i] if live[j]) if live[i] else 0 for i in range(graph.n)],
                    dtype=np.int64)


def metropolis_row(degree_i: int, neighbour_degrees: Iterable[int]) -> tuple[list[float], float]:
    """One node's Metropolis–Hastings weights: ``1/(1 + max(d_i, d_j))`` per live neighbour, in the
    order given, and the self weight ``1 − Σ`` of them."""
    w = [1.0 / (1.0 + max(degree_i, int(d))) for d in neighbour_degrees]
    return w, 1.0 - sum(w)


def metropolis_weights(graph: DeviceGraph, live: np.ndarray | None = None) -> np.ndarray:
    """(n, n) Metropolis–Hastings mixing matrix on the subgraph of ``live`` nodes (all by default).

    Degrees count live neighbours only. A node that is not live has the identity row and column
    (it keeps its model and nobody mixes with it), so the matrix stays symmetric and doubly stochastic.
    """
    n = graph.n
    alive = np.ones(n, dtype=bool) if live is None else np.asarray(live, dtype=bool)
    deg = _live_degrees(graph, alive)
    w = np.zeros((n, n), dtype=np.float64)
    for i, j in graph.edges:
        if alive[i] and alive[j]:
            w[i, j] = w[j, i] = 1.0 / (1.0 + max(deg[i], deg[j]))
    w[np.diag_indices(n)] = 1.0 - w.sum(axis=1)
    return w


def consensus_distance(models: np.ndarray) -> float:
    """``(1/N) Σ_i ‖x_i − x̄‖²`` of the rows of ``models`` ((N, P)); raises on no rows."""
    x = np.asarray(models, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"consensus distance needs an (N, P) array with N >= 1, got shape {x.shape}")
    return float(np.sum((x - x.mean(axis=0)) ** 2) / x.shape[0])
