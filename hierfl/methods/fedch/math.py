"""FedCH cluster construction, the choice of K and its staleness function (pure: arrays and numbers, no RNG, no I/O).

Z. Wang, H. Xu, J. Liu, Y. Xu, H. Huang, Y. Zhao, "Accelerating Federated Learning with Cluster
Construction and Hierarchical Aggregation", IEEE TMC 22(7):3805–3822, 2023; conference precursor
"Resource-Efficient Federated Learning with Hierarchical Aggregation in Edge Computing",
INFOCOM 2021. docs/explanation/algorithms.md §2.3 (construction) and §2.4 (K*):

1. balanced slot capacities ``q, r = divmod(N, K)``: clusters ``0..r−1`` get ``q + 1`` slots,
   the rest ``q`` (N slots in all);
2. initial leaders: the K devices with the smallest ``C_cmp(j) + C_com(j, cloud)`` (ties → lower id) [D];
3. distance ``d(i, j)`` of device i to leader j: ``abs_diff`` ``|C_cmp(i) + C_com(i, j) − C_cmp(j)|``
   (default [D]) or ``sum`` ``C_cmp(i) + C_com(i, j)`` (the design notes' literal form [B]);
4. the N × N device-by-slot cost matrix ``Cost[i, s] = d(i, leader of c(s))``, each leader pinned
   to its own cluster's slots (0 there, :data:`PIN` elsewhere) [D];
5. ``scipy.optimize.linear_sum_assignment``;
6. leader update: in each cluster the member j minimising ``Σ_i d(i, j)`` (medoid) [D];
7. repeat 3–6 until the leader set is stable or ``max_iter`` (20) iterations [D], keeping the
   iteration with the lowest total assignment cost [D].

Every function that picks leaders takes an optional ``eligible`` mask: only those devices may lead
(FedCH with churn: a device offline at construction time can be a member but not a leader [D]).

With fixed edge servers as leaders, steps 2 and 6 are skipped and the procedure is one balanced
device → edge assignment (an edge server does not train: ``C_cmp(edge) = 0``, so both distances
are the device's arrival time ``C_cmp(i) + C_com(i, e)``). ``balanced_kmeans`` is the conference
version's construction (§2.1): the same slot assignment on squared distances to feature centroids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from hierfl.core.staleness import check_tau, clamp

__all__ = [
    "PIN", "Construction", "cluster_sizes", "slot_clusters", "leader_distance", "edge_distance",
    "initial_leaders", "slot_cost_matrix", "assign_slots", "medoid_leaders", "construct_hungarian",
    "assign_to_edges", "construct_balanced_kmeans", "alpha_base", "staleness_alpha", "kstar_objective",
    "choose_k", "fedch",
]

PIN = 1e12
"""Cost of putting a leader into a slot of another cluster: large and finite (``linear_sum_assignment`` needs finite costs)."""

Distance = Literal["abs_diff", "sum"]
AlphaRule = Literal["one_minus", "fraction"]


@dataclass(frozen=True)
class Construction:
    """The result of one cluster construction.

    ``cost`` is the device-by-slot matrix that was solved for the kept iteration, ``slot_of[i]``
    the slot device i got, ``cluster_of[i] = slot_cluster[slot_of[i]]``, ``leaders[k]`` the
    leader of cluster k (a device id, or an edge id with edge leaders). ``costs`` lists the total
    assignment cost of every iteration run; ``iterations`` is how many ran.
    """

    cluster_of: np.ndarray
    slot_of: np.ndarray
    leaders: list[int]
    cost: np.ndarray
    total_cost: float
    iterations: int = 1
    costs: list[float] = field(default_factory=list)

    @property
    def k(self) -> int:
        """Number of clusters."""
        return len(self.leaders)

    def members(self) -> list[list[int]]:
        """Sorted device ids of each cluster."""
        return [np.flatnonzero(self.cluster_of == c).astype(int).tolist() for c in range(self.k)]


def _check_k(n: int, k: int) -> None:
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= n:
        raise ValueError(f"K must be an integer in 1..N = 1..{n}, got {k!r}")


def cluster_sizes(n: int, k: int) -> list[int]:
    """Balanced sizes: ``⌊N/K⌋ + 1`` for the first ``N mod K`` clusters, ``⌊N/K⌋`` for the rest."""
    _check_k(n, k)
    q, r = divmod(n, k)
    return [q + 1 if c < r else q for c in range(k)]


def slot_clusters(n: int, k: int) -> np.ndarray:
    """(N,) the cluster each slot belongs to: ``[0]*(q+1), …, [K−1]*q``."""
    return np.repeat(np.arange(k, dtype=np.int64), cluster_sizes(n, k))


def leader_distance(compute_s: np.ndarray, comm_s: np.ndarray, kind: Distance = "abs_diff") -> np.ndarray:
    """(N, N) ``d[i, j]``: distance of device i to device j as its leader (§2.3 step 3).

    ``comm_s[i, j]`` is ``C_com(i, j)``, the time of one model transfer i → j (its diagonal is
    taken as 0: a leader's own model does not travel). ``abs_diff`` is how far i's arrival at
    j is from j's own finishing time, ``sum`` is i's arrival time at j.
    """
    c = np.asarray(compute_s, dtype=np.float64)
    comm = np.array(comm_s, dtype=np.float64)
    if comm.shape != (c.size, c.size):
        raise ValueError(f"comm_s must be ({c.size}, {c.size}), got {comm.shape}")
    np.fill_diagonal(comm, 0.0)
    arrival = c[:, None] + comm
    if kind == "sum":
        return arrival
    if kind == "abs_diff":
        return np.abs(arrival - c[None, :])
    raise ValueError(f"unknown distance {kind!r}; allowed: abs_diff, sum")


def edge_distance(compute_s: np.ndarray, comm_s: np.ndarray) -> np.ndarray:
    """(N, E) distance of device i to edge server e: its arrival time ``C_cmp(i) + C_com(i, e)``.

    An edge server does not train (``C_cmp(edge) = 0``), so ``abs_diff`` and ``sum`` coincide;
    ``C_cmp(i)`` is constant along a row, so the assignment minimises total device → edge time.
    """
    c = np.asarray(compute_s, dtype=np.float64)
    comm = np.asarray(comm_s, dtype=np.float64)
    if comm.ndim != 2 or comm.shape[0] != c.size:
        raise ValueError(f"comm_s must be ({c.size}, E), got {comm.shape}")
    return c[:, None] + comm


def _eligible(n: int, eligible: np.ndarray | None) -> np.ndarray:
    if eligible is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(eligible, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"eligible must be a boolean mask of length {n}, got shape {mask.shape}")
    return mask


def initial_leaders(compute_s: np.ndarray, cloud_s: np.ndarray, k: int, eligible: np.ndarray | None = None) -> list[int]:
    """The K (eligible) devices with the smallest ``C_cmp(j) + C_com(j, cloud)``, best first, ties → lower id."""
    score = np.asarray(compute_s, dtype=np.float64) + np.asarray(cloud_s, dtype=np.float64)
    _check_k(score.size, k)
    mask = _eligible(score.size, eligible)
    if mask.sum() < k:
        raise ValueError(f"{k} leaders needed but only {int(mask.sum())} devices are eligible")
    order = [int(i) for i in np.lexsort((np.arange(score.size), score)) if mask[i]]
    return order[:k]


def slot_cost_matrix(dist_to_cluster: np.ndarray, slots: np.ndarray, leaders: list[int] | None = None) -> np.ndarray:
    """(N, N) ``Cost[i, s] = dist_to_cluster[i, c(s)]``; with ``leaders``, row ``leaders[k]`` is 0 on
    cluster k's slots and :data:`PIN` elsewhere, so every leader lands in its own cluster (§2.3 step 4)."""
    d = np.asarray(dist_to_cluster, dtype=np.float64)
    cost = d[:, slots].copy()
    if leaders is not None:
        for c, j in enumerate(leaders):
            cost[j, :] = PIN
            cost[j, slots == c] = 0.0
    return cost


def assign_slots(cost: np.ndarray) -> tuple[np.ndarray, float]:
    """Optimal device → slot assignment of a square cost matrix: ``(slot_of, total cost)``."""
    # imported here: scipy.optimize costs every process that loads the protocols (the driver of any
    # run) about 0.4 CPU s and 50 MB, and only FedCH's cluster construction needs it
    from scipy.optimize import linear_sum_assignment  # noqa: PLC0415

    rows, cols = linear_sum_assignment(cost)
    slot_of = np.empty(cost.shape[0], dtype=np.int64)
    slot_of[rows] = cols
    return slot_of, float(cost[rows, cols].sum())


def medoid_leaders(dist: np.ndarray, cluster_of: np.ndarray, leaders: list[int],
                   eligible: np.ndarray | None = None) -> list[int]:
    """§2.3 step 6: in each cluster, the (eligible) member j minimising ``Σ_{i∈cluster} d(i, j)``.

    Ties keep the current leader when it is among the minimisers (so a stable set is recognised),
    else the lowest device id [D]. A cluster without an eligible member keeps its leader.
    """
    mask = _eligible(len(cluster_of), eligible)
    new = []
    for c, current in enumerate(leaders):
        members = np.flatnonzero(cluster_of == c)
        totals = dist[np.ix_(members, members)].sum(axis=0)
        candidates = mask[members]
        if not candidates.any():
            new.append(int(current))
            continue
        best = totals[candidates].min()
        winners = members[candidates & (totals == best)]
        new.append(int(current) if current in winners else int(winners[0]))
    return new


def construct_hungarian(dist: np.ndarray, leaders: list[int], max_iter: int = 20,
                        eligible: np.ndarray | None = None) -> Construction:
    """FedCH's construction with device leaders (§2.3 steps 3–7), from the given initial leaders.

    ``dist`` is the (N, N) :func:`leader_distance`. Runs assignment + medoid update until the
    leader set repeats the previous one or ``max_iter`` iterations, and returns the iteration
    with the lowest total cost (the earliest on ties). ``eligible``: the devices the medoid update
    may choose as leaders (all by default).
    """
    d = np.asarray(dist, dtype=np.float64)
    n, k = d.shape[0], len(leaders)
    _check_k(n, k)
    if len(set(leaders)) != k:
        raise ValueError(f"leaders must be distinct devices, got {leaders}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    slots = slot_clusters(n, k)
    current = [int(j) for j in leaders]
    best: Construction | None = None
    costs: list[float] = []
    it = 0
    for it in range(1, max_iter + 1):
        cost = slot_cost_matrix(d[:, current], slots, current)
        slot_of, total = assign_slots(cost)
        costs.append(total)
        cluster_of = slots[slot_of]
        if best is None or total < best.total_cost:
            best = Construction(cluster_of, slot_of, list(current), cost, total)
        nxt = medoid_leaders(d, cluster_of, current, eligible)
        if nxt == current:
            break
        current = nxt
    assert best is not None
    return Construction(best.cluster_of, best.slot_of, best.leaders, best.cost, best.total_cost, it, costs)


def assign_to_edges(dist: np.ndarray) -> Construction:
    """Balanced device → edge assignment with the E edge servers as fixed leaders (one solve)."""
    d = np.asarray(dist, dtype=np.float64)
    n, e = d.shape
    slots = slot_clusters(n, e)
    cost = slot_cost_matrix(d, slots)
    slot_of, total = assign_slots(cost)
    return Construction(slots[slot_of], slot_of, list(range(e)), cost, total, 1, [total])


def _standardise(features: np.ndarray) -> np.ndarray:
    x = np.asarray(features, dtype=np.float64)
    std = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)


def construct_balanced_kmeans(features: np.ndarray, seeds: list[int], leader_score: np.ndarray,
                              max_iter: int = 20, eligible: np.ndarray | None = None) -> Construction:
    """The conference version's construction (docs/explanation/algorithms.md §2.1): balanced k-means, then leaders.

    Features are standardised (z-score per column); centroids start at the ``seeds`` devices and
    are recomputed as member means; each round solves the same balanced slot assignment on the
    squared Euclidean distances. Stops when the assignment repeats or after ``max_iter``; keeps
    the lowest-cost iteration. Each cluster's leader is then its (eligible, when it has one)
    member with the smallest ``leader_score`` (compute + communication time; ties → lower id).
    """
    x = _standardise(features)
    n, k = x.shape[0], len(seeds)
    _check_k(n, k)
    slots = slot_clusters(n, k)
    centres = x[list(seeds)]
    best: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
    costs: list[float] = []
    previous: np.ndarray | None = None
    it = 0
    for it in range(1, max_iter + 1):
        d2 = ((x[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
        cost = slot_cost_matrix(d2, slots)
        slot_of, total = assign_slots(cost)
        costs.append(total)
        cluster_of = slots[slot_of]
        if best is None or total < best[3]:
            best = (cluster_of, slot_of, cost, total)
        if previous is not None and np.array_equal(previous, cluster_of):
            break
        previous = cluster_of
        centres = np.array([x[cluster_of == c].mean(axis=0) for c in range(k)])
    assert best is not None
    cluster_of, slot_of, cost, total = best
    score = np.asarray(leader_score, dtype=np.float64)
    mask = _eligible(n, eligible)
    leaders = []
    for c in range(k):
        members = np.flatnonzero(cluster_of == c)
        if mask[members].any():
            members = members[mask[members]]
        leaders.append(int(members[np.lexsort((members, score[members]))[0]]))
    return Construction(cluster_of, slot_of, leaders, cost, total, it, costs)


# -- α and K* ---------------------------------------------------------------------------------
def alpha_base(k: int, n: int, rule: AlphaRule = "one_minus") -> float:
    """Base mixing weight α: ``1 − (K−1)/N`` (``one_minus``, INFOCOM'21 φ(K)) or ``(K−1)/N`` (``fraction``)."""
    _check_k(n, k)
    frac = (k - 1) / n
    if rule == "one_minus":
        return 1.0 - frac
    if rule == "fraction":
        return frac
    raise ValueError(f"unknown alpha rule {rule!r}; allowed: one_minus, fraction")


def staleness_alpha(tau: int, alpha: float, a: float, b: float) -> float:
    """``α_τ = α`` if ``τ ≤ a`` else ``α·τ^(−b)`` (§2.1); τ = 0 always gives α."""
    return alpha * fedch(tau, a, b)


def kstar_objective(k: int, n: int, *, budget_s: float, compute_s: float, comm_s: float, lr: float,
                    mu: float, q: float, f0_gap: float, local_steps: int, rule: AlphaRule = "one_minus") -> float:
    """``L(K)`` of §2.4 with time as the single resource.

    ``ρ_K = (K−1)/N + α(1 − ημ)^H``, ``T(K) = R·K / (N(c + b))`` affordable global epochs, and
    ``L(K) = ρ_K^T (F(w0) − F*) + (Q1 + Q2)(1 − ρ_K^T) / (2ημ²)``.
    """
    _check_k(n, k)
    if not 0 < lr * mu < 1:
        raise ValueError(f"need 0 < lr·mu < 1, got lr={lr}, mu={mu}")
    if compute_s + comm_s <= 0:
        raise ValueError("per-epoch resource use c + b must be > 0")
    rho = (k - 1) / n + alpha_base(k, n, rule) * (1.0 - lr * mu) ** local_steps
    epochs = budget_s * k / (n * (compute_s + comm_s))
    decay = math.exp(epochs * math.log(rho)) if rho > 0 else 0.0
    return decay * f0_gap + q * (1.0 - decay) / (2.0 * lr * mu * mu)


def choose_k(n: int, **params: float) -> tuple[int, dict[int, float]]:
    """``K* = argmin L(K)`` over ``K ∈ [1, ⌊(N+1)/2⌋]``, evaluating every K (ties → smaller K).

    ``params`` are the keyword arguments of :func:`kstar_objective`. Returns K* and all values.
    """
    if n < 1:
        raise ValueError(f"need at least one device, got {n}")
    values = {k: kstar_objective(k, n, **params) for k in range(1, (n + 1) // 2 + 1)}  # type: ignore[arg-type]
    best = min(values, key=lambda k: (values[k], k))
    return best, values


def fedch(tau: int, a: float, b: float) -> float:
    """The cloud's staleness function (docs/explanation/algorithms.md §1.4, §2.5; Wang et al., INFOCOM 2021):
    σ(τ) = 1 if τ ≤ a else τ^(−b); τ = 0 always gives 1 (guards 0^(−b))."""
    t = check_tau(tau)
    if t <= a or t == 0:
        return 1.0
    return clamp(math.exp(-b * math.log(t)))
