"""Capacity classes and rings (FedHiSyn grouping): hand-computed cases."""

import numpy as np
import pytest

from hierfl.core.capacity import capacity_classes, kmeans_1d, quantile_bins, ring_orders, ring_successors


def test_kmeans_1d_is_the_optimal_split_hand_computed():
    # k=2: {0,1,3,4}{10} has SSE 10, {0,1}{3,4,10} 28.7, {0}{1,3,4,10} 46.75 -> the first
    assert kmeans_1d([0, 1, 3, 4, 10], 2).tolist() == [0, 0, 0, 0, 1]
    # k=3: {0,1}{3,4}{10}, SSE 1
    assert kmeans_1d([0, 1, 3, 4, 10], 3).tolist() == [0, 0, 1, 1, 2]
    # input order does not matter; classes are numbered by ascending value
    assert kmeans_1d([10, 3, 0, 4, 1], 3).tolist() == [2, 1, 0, 1, 0]
    assert kmeans_1d([3, 1, 2], 1).tolist() == [0, 0, 0]
    assert kmeans_1d([5, 1, 3], 3).tolist() == [2, 0, 1]


def test_kmeans_1d_ties_split_by_device_id_and_k_is_exact():
    assert kmeans_1d([2.0, 2.0, 2.0], 3).tolist() == [0, 1, 2]
    assert kmeans_1d([2.0, 2.0, 2.0, 9.0], 2).tolist() == [0, 0, 0, 1]


def test_kmeans_runs_on_log_unit_time():
    # linear: {1,10}{20} (SSE 40.5 < 50); log: {0}{2.30,3.00} (SSE 0.24 < 2.65)
    assert kmeans_1d([1, 10, 20], 2).tolist() == [0, 0, 1]
    assert capacity_classes([1, 10, 20], 2).tolist() == [0, 1, 1]
    assert capacity_classes([1, 1.2, 10, 12, 100], 3, "kmeans").tolist() == [0, 0, 1, 1, 2]


def test_quantile_bins_equal_sizes_first_bins_larger():
    # sorted: 0.5(5) 1(4) 2(3) | 3(2) 4(1) | 5(0) 7(6): sizes 3, 2, 2
    assert quantile_bins([5, 4, 3, 2, 1, 0.5, 7], 3).tolist() == [2, 1, 1, 0, 0, 0, 2]
    # where k-means and quantile bins disagree: one outlier
    times = [1, 1.1, 1.2, 1.3, 50]
    assert capacity_classes(times, 2, "kmeans").tolist() == [0, 0, 0, 0, 1]
    assert capacity_classes(times, 2, "quantile").tolist() == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("k", [0, 4])
def test_bad_k_raises(k):
    with pytest.raises(ValueError, match="1 <= k <= number of devices"):
        kmeans_1d([1, 2, 3], k)
    with pytest.raises(ValueError, match="1 <= k"):
        quantile_bins([1, 2, 3], k)


def test_bad_method_and_times():
    with pytest.raises(ValueError, match="allowed: kmeans, quantile"):
        capacity_classes([1, 2], 1, "spectral")
    with pytest.raises(ValueError, match="> 0"):
        capacity_classes([1, 0], 1)


def test_rings_fastest_to_slowest_with_wrap_around_and_a_class_of_one():
    labels = [0, 0, 1, 0, 1, 2]
    times = [3.0, 1.0, 5.0, 2.0, 4.0, 9.0]
    rings = ring_orders(labels, times)
    assert rings == [[1, 3, 0], [4, 2], [5]]
    succ = ring_successors(rings, 6)
    assert succ.tolist() == [1, 3, 4, 0, 2, 5]  # 1→3→0→1 (slowest back to fastest), 4→2→4, 5 alone
    assert ring_orders([0, 0, 0], [2.0, 1.0, 2.0]) == [[1, 0, 2]]  # equal times: by device id


def test_ring_successors_rejects_overlap_and_gaps():
    with pytest.raises(ValueError, match="more than one ring"):
        ring_successors([[0, 1], [1, 2]], 3)
    with pytest.raises(ValueError, match="in no ring"):
        ring_successors([[0, 1]], 3)


def test_every_device_in_exactly_one_class_property():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        k = int(rng.integers(1, n + 1))
        t = rng.lognormal(size=n)
        for method in ("kmeans", "quantile"):
            labels = capacity_classes(t, k, method)
            assert sorted(set(labels.tolist())) == list(range(k))
            # classes are contiguous in unit time: class c is never faster than class c-1
            for c in range(1, k):
                assert t[labels == c].min() >= t[labels == c - 1].max()
            rings = ring_orders(labels, t)
            assert sorted(d for r in rings for d in r) == list(range(n))
