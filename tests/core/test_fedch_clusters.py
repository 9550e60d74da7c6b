"""FedCH construction math (hierfl.methods.fedch.math) and re-clustering policies: hand-computed
cases and a brute-force optimality property (docs/explanation/algorithms.md §2.3–2.5)."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.methods.fedch import math as fc
from hierfl.policies.recluster import AdaptiveRecluster, NeverRecluster, PeriodicRecluster


def test_balanced_sizes_and_slots():
    assert fc.cluster_sizes(7, 3) == [3, 2, 2]
    assert fc.cluster_sizes(6, 3) == [2, 2, 2]
    assert fc.cluster_sizes(5, 5) == [1, 1, 1, 1, 1]
    assert fc.cluster_sizes(5, 1) == [5]
    assert fc.slot_clusters(7, 3).tolist() == [0, 0, 0, 1, 1, 2, 2]
    for bad in (0, 8, 2.5, True):
        with pytest.raises(ValueError, match="1..7"):
            fc.cluster_sizes(7, bad)


def test_distances_hand_computed():
    compute = [1.0, 2.0, 4.0]
    comm = [[9.0, 0.5, 0.25], [0.5, 9.0, 1.0], [2.0, 0.25, 9.0]]  # the diagonal is ignored (taken as 0)
    d = fc.leader_distance(compute, comm, "abs_diff")
    # d[i, j] = |c_i + comm[i, j] − c_j|
    assert d.tolist() == [[0.0, 0.5, 2.75], [1.5, 0.0, 1.0], [5.0, 2.25, 0.0]]
    s = fc.leader_distance(compute, comm, "sum")
    # d[i, j] = c_i + comm[i, j]; a leader's own distance is its compute time
    assert s.tolist() == [[1.0, 1.5, 1.25], [2.5, 2.0, 3.0], [6.0, 4.25, 4.0]]
    e = fc.edge_distance(compute, [[0.1, 0.2], [0.3, 0.1], [0.0, 0.5]])
    assert np.allclose(e, [[1.1, 1.2], [2.3, 2.1], [4.0, 4.5]])


def test_initial_leaders_best_first_ties_to_lower_id():
    # scores: 3, 1, 3, 0.5, 1 → 3 (0.5), then 1 and 4 tie at 1 (→ 1 first), then 0 and 2 tie (→ 0)
    assert fc.initial_leaders([2, 0.5, 1, 0.25, 0.5], [1, 0.5, 2, 0.25, 0.5], 4) == [3, 1, 4, 0]


def six_devices():
    # compute 1, 2, 3 | 10, 11, 13; no communication cost; device 0 and 5 are the initial leaders
    compute = np.array([1.0, 2.0, 3.0, 10.0, 11.0, 13.0])
    cloud = np.array([0.0, 20.0, 20.0, 20.0, 20.0, 0.0])
    return compute, cloud, fc.leader_distance(compute, np.zeros((6, 6)), "abs_diff")


def test_construction_with_medoid_update_hand_computed():
    compute, cloud, d = six_devices()
    seeds = fc.initial_leaders(compute, cloud, 2)
    assert seeds == [0, 5]
    res = fc.construct_hungarian(d, seeds, max_iter=20)
    # iteration 1, leaders 0 and 5: {1, 2} → 0 (1 + 2), {3, 4} → 5 (3 + 2): cost 8
    # medoids: {0,1,2}: Σd(i,·) = 3, 2, 3 → 1;  {3,4,5}: 4, 3, 5 → 4
    # iteration 2, leaders 1 and 4: 0 → 1 (1), 2 → 1 (1), 3 → 4 (1), 5 → 4 (2): cost 5; leaders stable
    assert res.costs == [8.0, 5.0] and res.iterations == 2
    assert res.leaders == [1, 4] and res.total_cost == 5.0
    assert res.members() == [[0, 1, 2], [3, 4, 5]]
    # the recorded matrix is the one solved in the kept iteration: leader rows pinned
    assert res.cost.shape == (6, 6)
    assert res.cost[1].tolist() == [0, 0, 0, fc.PIN, fc.PIN, fc.PIN]
    assert res.cost[5].tolist() == [11, 11, 11, 2, 2, 2]
    assert sum(res.cost[i, res.slot_of[i]] for i in range(6)) == 5.0
    # capped at one iteration: the first assignment is kept
    one = fc.construct_hungarian(d, seeds, max_iter=1)
    assert one.iterations == 1 and one.leaders == [0, 5] and one.total_cost == 8.0


def test_k_equals_n_and_k_equals_one():
    compute, cloud, d = six_devices()
    every = fc.construct_hungarian(d, fc.initial_leaders(compute, cloud, 6))
    assert sorted(every.leaders) == list(range(6)) and every.total_cost == 0.0
    assert all(m == [leader] for m, leader in zip(every.members(), every.leaders))
    one = fc.construct_hungarian(d, fc.initial_leaders(compute, cloud, 1))
    assert one.members() == [[0, 1, 2, 3, 4, 5]]
    # the medoid of the whole set: Σ_i |c_i − c_j| is smallest at c = 3 or 10 (both 28): tie → lower id
    assert one.leaders == [2] and one.total_cost == 28.0


def test_edge_assignment_is_balanced_and_minimal():
    # 4 devices, 2 edges: every device prefers edge 0, balance forces two onto edge 1;
    # the two with the smallest extra cost of edge 1 (devices 2: +0.1 and 3: +0.2) move
    comm = np.array([[0.1, 1.1], [0.1, 0.9], [0.1, 0.2], [0.1, 0.3]])
    res = fc.assign_to_edges(fc.edge_distance(np.zeros(4), comm))
    assert res.members() == [[0, 1], [2, 3]] and res.leaders == [0, 1]
    assert res.total_cost == pytest.approx(0.1 + 0.1 + 0.2 + 0.3)


def test_balanced_kmeans_groups_and_picks_the_strongest_leader():
    features = np.array([[1.0, 0.1], [1.2, 0.1], [5.0, 0.1], [5.5, 0.1], [1.1, 0.1], [5.2, 0.1]])
    score = features.sum(axis=1)
    res = fc.construct_balanced_kmeans(features, [0, 2], score)
    assert res.members() == [[0, 1, 4], [2, 3, 5]]
    assert res.leaders == [0, 2]


def brute_force(d: np.ndarray, leaders: list[int]) -> float:
    """Cheapest assignment with the slot capacities of ``cluster_sizes`` and leader k in cluster k."""
    n, k = d.shape[0], len(leaders)
    sizes = fc.cluster_sizes(n, k)
    others = [i for i in range(n) if i not in leaders]
    best = math.inf
    for labels in itertools.product(range(k), repeat=len(others)):
        counts = np.bincount(labels, minlength=k) + 1
        if counts.tolist() != sizes:
            continue
        best = min(best, sum(d[i, leaders[c]] for i, c in zip(others, labels)))
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(1, n),
    st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n),
    st.lists(st.floats(0.0, 2.0), min_size=n * n, max_size=n * n),
    st.sampled_from(["abs_diff", "sum"]))))
def test_assignment_is_optimal_against_brute_force(case):
    n, k, compute, comm, kind = case
    d = fc.leader_distance(compute, np.reshape(comm, (n, n)), kind)
    res = fc.construct_hungarian(d, fc.initial_leaders(compute, np.zeros(n), k))
    # the kept iteration's cost is the brute-force optimum for its leaders
    assert res.total_cost == pytest.approx(brute_force(d, res.leaders), abs=1e-9)
    assert res.total_cost == pytest.approx(min(res.costs)) and len(res.costs) == res.iterations <= 20
    # balanced sizes, each leader in its own cluster, every device exactly once
    members = res.members()
    assert [len(m) for m in members] == fc.cluster_sizes(n, k)
    assert all(leader in m for leader, m in zip(res.leaders, members))
    assert sorted(i for m in members for i in m) == list(range(n))


def test_alpha_and_staleness_weights_hand_computed():
    assert fc.alpha_base(1, 10) == 1.0 and fc.alpha_base(10, 10) == pytest.approx(0.1)
    assert fc.alpha_base(3, 10) == pytest.approx(0.8) and fc.alpha_base(3, 10, "fraction") == pytest.approx(0.2)
    # α = 0.8, a = 5, b = 1: full weight up to τ = 5, then 0.8/τ
    assert [fc.staleness_alpha(t, 0.8, 5, 1) for t in (0, 3, 5)] == [0.8, 0.8, 0.8]
    assert fc.staleness_alpha(6, 0.8, 5, 1) == pytest.approx(0.8 / 6)
    assert fc.staleness_alpha(10, 0.8, 5, 1) == pytest.approx(0.08)
    assert fc.staleness_alpha(9, 0.8, 5, 0.5) == pytest.approx(0.8 / 3)
    # a = 0: τ = 0 is guarded (no 0^−b), τ = 4 with b = 2 gives α/16
    assert fc.staleness_alpha(0, 0.5, 0, 2) == 0.5 and fc.staleness_alpha(4, 0.5, 0, 2) == pytest.approx(0.5 / 16)
    assert fc.staleness_alpha(7, 0.5, 0, 0) == 0.5  # b = 0: constant α


def test_kstar_objective_hand_computed():
    p = dict(budget_s=10.0, compute_s=1.0, comm_s=1.0, lr=0.1, mu=0.5, q=0.05, f0_gap=2.0, local_steps=1)
    # K = 1: ρ = 0.95, T = 10·1/(3·2) = 5/3, ρ^T = 0.918063; L = 2ρ^T + 0.05/(2·0.1·0.25)·(1 − ρ^T)
    assert fc.kstar_objective(1, 3, **p) == pytest.approx(1.918063, abs=1e-6)
    # K = 2: α = 2/3, ρ = 1/3 + 2/3·0.95 = 0.966667, T = 10/3, ρ^T = 0.893146
    assert fc.kstar_objective(2, 3, **p) == pytest.approx(1.893146, abs=1e-6)
    k, values = fc.choose_k(3, **p)
    assert k == 2 and sorted(values) == [1, 2]  # the range is [1, ⌊(N+1)/2⌋]


def test_kstar_with_the_default_constants_is_one():
    # μ = 0.01, Q = 1, η = 0.01: the noise floor Q/(2ημ²) = 5e5 dwarfs F(w0) − F*, so L(K) falls
    # with fewer affordable epochs and K* = 1; a huge F(w0) − F* flips it to ⌊(N+1)/2⌋
    p = dict(budget_s=600.0, compute_s=0.5, comm_s=0.05, lr=0.01, mu=0.01, q=1.0, f0_gap=2.3, local_steps=10)
    assert fc.choose_k(50, **p)[0] == 1
    assert fc.choose_k(50, **{**p, "f0_gap": 1e7})[0] == 25
    with pytest.raises(ValueError, match="lr·mu"):
        fc.kstar_objective(1, 3, **{**p, "mu": 200.0})


def test_periodic_policy_fires_every_rho_k():
    policy = PeriodicRecluster(rho=2).make(3, 9)
    fired = [policy.aggregation_applied(0, False) for _ in range(6)]
    assert fired == [False] * 5 + [True]
    policy.reset()
    assert [policy.aggregation_applied(1, True) for _ in range(6)][-1] is True
    for k in (1, 9):  # ϱ = ∞ for K = 1 and K = N
        never = PeriodicRecluster(rho=1).make(k, 9)
        assert not any(never.aggregation_applied(0, True) for _ in range(50))


def test_adaptive_policy_flags_against_running_median():
    policy = AdaptiveRecluster(gamma=1.5, k_tilde=2).make(3, 9)
    # the first round sets the baseline; 1.5 is not > 1.5 × 1; 1.6 > 1.5 × median(1, 1.5, 1) = 1.5
    assert [policy.round_closed(0, t) for t in (10.0, 1.0)] == [False, False]
    policy.reset()
    assert [policy.round_closed(0, t) for t in (1.0, 1.5, 1.0, 1.6)] == [False, False, False, True]
    assert policy.aggregation_applied(0, True) is False       # one flagged cluster < K̃ = 2
    assert policy.aggregation_applied(0, True) is False       # the same cluster again still counts once
    assert policy.aggregation_applied(2, False) is False
    assert policy.aggregation_applied(1, True) is True
    assert policy.state()["flagged"] == [0, 1]
    policy.reset()
    assert policy.state()["flagged"] == [] and policy.round_closed(0, 100.0) is False
    assert not NeverRecluster().make(3, 9).aggregation_applied(0, True)


def test_eligible_leaders_hand_computed():
    compute, cloud, d = six_devices()
    # devices 0 and 1 may not lead (offline at construction): the best eligible seeds are 5 and 2
    mask = np.array([False, False, True, True, True, True])
    assert fc.initial_leaders(compute, cloud, 2, mask) == [5, 2]
    with pytest.raises(ValueError, match="only 1 devices are eligible"):
        fc.initial_leaders(compute, cloud, 2, np.array([True] + [False] * 5))
    res = fc.construct_hungarian(d, [0, 5], eligible=mask)
    # the medoid of {0, 1, 2} would be 1 (see above); 1 is not eligible, so 2 (Σ = 3) leads it
    assert res.leaders == [2, 4] and res.members() == [[0, 1, 2], [3, 4, 5]]
    # a cluster with no eligible member keeps its leader
    assert fc.medoid_leaders(d, np.array([0, 0, 0, 1, 1, 1]), [0, 5], np.array([False] * 3 + [True] * 3)) == [0, 4]
    km = fc.construct_balanced_kmeans(np.column_stack([compute, cloud]), [0, 5], compute + cloud, eligible=mask)
    assert all(mask[j] for j in km.leaders)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(1, n),
    st.lists(st.floats(0.01, 10.0), min_size=n, max_size=n),
    st.lists(st.floats(0.0, 2.0), min_size=n * n, max_size=n * n),
    st.lists(st.booleans(), min_size=n, max_size=n))))
def test_only_eligible_devices_lead_and_the_assignment_stays_optimal(case):
    n, k, compute, comm, eligible = case
    mask = np.array(eligible)
    if mask.sum() < k:
        mask[:k] = True
    d = fc.leader_distance(compute, np.reshape(comm, (n, n)), "abs_diff")
    res = fc.construct_hungarian(d, fc.initial_leaders(compute, np.zeros(n), k, mask), eligible=mask)
    assert all(mask[j] for j in res.leaders)
    assert res.total_cost == pytest.approx(brute_force(d, res.leaders), abs=1e-9)
    assert [len(m) for m in res.members()] == fc.cluster_sizes(n, k)
