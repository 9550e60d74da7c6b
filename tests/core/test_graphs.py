"""Device graphs and Metropolis–Hastings mixing, against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.graphs import (
    DeviceGraph,
    connected,
    consensus_distance,
    erdos_renyi,
    k_regular,
    metropolis_row,
    metropolis_weights,
    random_geometric,
    ring,
    small_world,
    torus,
)
from hierfl.core.rng import stream


def test_ring_and_torus_edges() -> None:
    assert ring(4).edges == ((0, 1), (0, 3), (1, 2), (2, 3))
    assert ring(2).edges == ((0, 1),)
    t = torus(3, 3)
    assert len(t.edges) == 18 and all(t.degree(i) == 4 for i in range(9))
    assert t.neighbours[4] == (1, 3, 5, 7)
    assert t.neighbours[0] == (1, 2, 3, 6)  # wraps around both ways


def test_k_regular_and_small_world() -> None:
    g = k_regular(6, 4)
    assert len(g.edges) == 12 and all(g.degree(i) == 4 for i in range(6))
    assert g.neighbours[0] == (1, 2, 4, 5)
    with pytest.raises(ValueError, match="even"):
        k_regular(6, 3)
    same = small_world(8, 2, 0.0, stream(1, "g"))
    assert same.edges == ring(8).edges  # beta = 0: no rewiring
    rewired = small_world(16, 4, 0.5, stream(1, "g"))
    assert len(rewired.edges) == 32  # rewiring keeps the number of edges
    assert rewired.edges != k_regular(16, 4).edges


def test_random_graphs_are_reproducible() -> None:
    a, xy = random_geometric(20, 0.4, stream(3, "g"))
    b, _ = random_geometric(20, 0.4, stream(3, "g"))
    assert a == b and xy.shape == (20, 2)
    for i, j in a.edges:
        assert np.hypot(*(xy[i] - xy[j])) < 0.4
    assert erdos_renyi(10, 1.0, stream(1, "g")).edges == tuple((i, j) for i in range(10) for j in range(i + 1, 10))
    assert erdos_renyi(10, 0.0, stream(1, "g")).edges == ()


def test_metropolis_ring_by_hand() -> None:
    w = metropolis_weights(ring(4))
    third = 1.0 / 3.0
    expected = np.array([[third, third, 0, third], [third, third, third, 0],
                         [0, third, third, third], [third, 0, third, third]])
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)


def test_metropolis_star_by_hand() -> None:
    star = DeviceGraph(4, ((0, 1), (0, 2), (0, 3)))
    w = metropolis_weights(star)
    # d_0 = 3, d_leaf = 1: W_0j = 1/(1+3) = 1/4, W_00 = 1 − 3/4, W_jj = 1 − 1/4
    np.testing.assert_allclose(w[0], [0.25, 0.25, 0.25, 0.25])
    np.testing.assert_allclose(np.diag(w), [0.25, 0.75, 0.75, 0.75])
    assert metropolis_row(3, [1, 1, 1]) == ([0.25, 0.25, 0.25], 0.25)


def test_metropolis_on_the_live_subgraph() -> None:
    # node 3 of the 4-ring left: path 0 – 1 – 2 with live degrees 1, 2, 1
    w = metropolis_weights(ring(4), np.array([True, True, True, False]))
    third = 1.0 / 3.0
    expected = np.array([[2 * third, third, 0, 0], [third, third, third, 0],
                         [0, third, 2 * third, 0], [0, 0, 0, 1.0]])
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_metropolis_is_symmetric_and_doubly_stochastic(seed: int) -> None:
    rng = stream(seed, "g")
    g = erdos_renyi(12, 0.3, rng)
    live = rng.random(12) < 0.7
    w = metropolis_weights(g, live)
    np.testing.assert_allclose(w, w.T, atol=0)
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert (w >= 0).all()
    for i, j in g.edges:  # W_ij = 1/(1 + max(d_i, d_j)) on live edges, 0 elsewhere
        d = [sum(1 for k in g.neighbours[v] if live[k]) for v in (i, j)]
        assert w[i, j] == (1.0 / (1 + max(d)) if live[i] and live[j] else 0.0)


def test_connected_and_consensus_distance() -> None:
    assert connected(ring(5))
    assert not connected(DeviceGraph(4, ((0, 1), (2, 3))))
    # x̄ = (1, 0); each row is at squared distance 1: (1 + 1) / 2
    assert consensus_distance(np.array([[0.0, 0.0], [2.0, 0.0]])) == 1.0
    assert consensus_distance(np.ones((3, 4))) == 0.0
    with pytest.raises(ValueError, match="N >= 1"):
        consensus_distance(np.zeros((0, 3)))


def test_bad_edge_is_refused() -> None:
    with pytest.raises(ValueError, match="pair"):
        DeviceGraph(3, ((1, 0),))
