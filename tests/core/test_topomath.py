"""Topology arithmetic: path composition, distances, proportional splits (hand-computed and properties)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierfl.core.topomath import (
    blocks,
    compose_path,
    distance_latency_ms,
    pairwise_km,
    round_robin_within,
    split_counts,
    uniform_square,
)


def test_compose_path_sums_latency_and_takes_the_bottleneck_per_direction():
    # edge -> router: 1000 up / 400 down, 2 ms; router -> cloud: 300 up / 10000 down, 20.5 ms
    assert compose_path([(1000, 400, 2.0), (300, 10000, 20.5)]) == (300, 400, 22.5)
    assert compose_path([(50, 60, 0.0)]) == (50, 60, 0.0)
    with pytest.raises(ValueError):
        compose_path([])
    with pytest.raises(ValueError):
        compose_path([(0, 1, 1)])
    with pytest.raises(ValueError):
        compose_path([(1, 1, -1)])


def test_pairwise_distance_and_latency():
    d = pairwise_km(np.array([[0, 0], [3, 4]]), np.array([[0, 0], [6, 8], [3, 0]]))
    assert np.allclose(d, [[0, 10, 3], [5, 5, 4]])
    assert np.allclose(distance_latency_ms(d, 1.0, 0.5), [[1, 6, 2.5], [3.5, 3.5, 3]])
    with pytest.raises(ValueError):
        distance_latency_ms(d, -1.0, 0.1)


def test_split_counts_largest_remainder():
    assert split_counts(10, [0.6, 0.4]).tolist() == [6, 4]
    # 7 · (1/3, 1/3, 1/3) = 2.33 each: one leftover unit to the first (ties → earlier)
    assert split_counts(7, [1, 1, 1]).tolist() == [3, 2, 2]
    # 5 · (0.5, 0.3, 0.2) = 2.5, 1.5, 1.0 → floors 2, 1, 1; leftover 1 → first (remainder .5 ties .5)
    assert split_counts(5, [0.5, 0.3, 0.2]).tolist() == [3, 1, 1]
    assert split_counts(3, [0, 1]).tolist() == [0, 3]
    for bad in ([], [-1, 2], [0, 0]):
        with pytest.raises(ValueError):
            split_counts(4, bad)


@given(st.integers(0, 500), st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=8))
def test_split_counts_properties(total, weights):
    if sum(weights) <= 0:
        return
    counts = split_counts(total, weights)
    exact = total * np.asarray(weights) / sum(weights)
    assert counts.sum() == total and np.all(counts >= 0)
    assert np.all(np.abs(counts - exact) < 1.0 + 1e-9)


def test_blocks_and_round_robin_within_regions():
    groups = blocks([3, 2])
    assert groups.tolist() == [0, 0, 0, 1, 1]
    # region 0 has edges 0 and 1, region 1 has edge 2
    assert round_robin_within(groups, [[0, 1], [2]]).tolist() == [0, 1, 0, 2, 2]
    assert round_robin_within(np.array([1, 0, 1, 1]), [[5], [3, 4]]).tolist() == [3, 5, 4, 3]
    with pytest.raises(ValueError):
        round_robin_within(np.array([0]), [[]])


def test_uniform_square_is_inside_and_seeded():
    a = uniform_square(np.random.default_rng(1), 500, 4.0, (10.0, -2.0))
    b = uniform_square(np.random.default_rng(1), 500, 4.0, (10.0, -2.0))
    assert np.array_equal(a, b) and a.shape == (500, 2)
    assert a[:, 0].min() >= 10 and a[:, 0].max() <= 14 and a[:, 1].min() >= -2 and a[:, 1].max() <= 2
    assert abs(a[:, 0].mean() - 12) < 0.2  # uniform: mean at the centre
