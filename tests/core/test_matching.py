"""PFNM / FedMA matching: the cost formula by hand, the assignment against brute force, permuted MLPs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hierfl.methods.matched.math import (
    assignment_cost,
    assignment_ops,
    class_average,
    class_shares,
    match_fc_layer,
    match_layer,
    match_mlp,
    match_one,
    permute_inputs,
)


def test_cost_by_hand() -> None:
    # one client atom w = [1, 2] with precision 1 (w̃ = w), one global atom G = [0.5, 0], S = [2, 2], m = 1,
    # J = 2, prior μ₀ = 0, 1/σ₀² = 1, γ = 1, one new column
    w = np.array([[1.0, 2.0]])
    G = np.array([[0.5, 0.0]])
    S = np.array([[2.0, 2.0]])
    cost = assignment_cost(w, np.ones(2), G, S, np.array([1]), np.zeros(2), np.ones(2), 1.0, 2, 1)
    existing = (1.5 ** 2 / 3 + 2 ** 2 / 3) - (0.25 / 2) + math.log(1 / 1)
    new = (1 ** 2 / 2 + 2 ** 2 / 2) - 0 - 2 * math.log(1) + 2 * math.log(1 / 2)
    assert cost.shape == (1, 2)
    assert cost[0, 0] == pytest.approx(existing, abs=1e-12)
    assert cost[0, 1] == pytest.approx(new, abs=1e-12)


def test_cost_new_atoms_pay_log_k_and_popularity_caps_at_10() -> None:
    w = np.zeros((1, 1))
    G = np.zeros((1, 1))
    S = np.ones((1, 1))
    c = assignment_cost(w, np.ones(1), G, S, np.array([15]), np.zeros(1), np.ones(1), 7.0, 20, 3)
    assert c[0, 0] == pytest.approx(math.log(10 / 10))  # m̃ = min(15, 10), J − m̃ = 10
    for k in (1, 2, 3):
        assert c[0, k] == pytest.approx(-2 * math.log(k) + 2 * math.log(7 / 20))


def _brute_max(cost: np.ndarray) -> float:
    r, c = cost.shape
    return max(sum(cost[i, cols[i]] for i in range(r)) for cols in itertools.permutations(range(c), r))


@pytest.mark.parametrize("seed", range(5))
def test_assignment_reaches_brute_force_maximum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    G = rng.normal(size=(3, 4))
    S = rng.uniform(1, 3, size=(3, 4))
    w = rng.normal(size=(3, 4))
    pop = np.array([1, 2, 1])
    _, _, _, assign, total, _ = match_one(w, np.ones(4), G, S, pop, np.zeros(4), np.ones(4), 1.0, 4)
    cost = assignment_cost(w, np.ones(4), G, S, pop, np.zeros(4), np.ones(4), 1.0, 4, 3)
    assert total == pytest.approx(_brute_max(cost), abs=1e-9)
    assert len(set(assign.tolist())) == 3


def test_ops_count() -> None:
    # r = 3 rows, c = 5 columns, D = 4: 3·3·5·4 + 3·5·3
    assert assignment_ops(3, 2, 3, 4) == 3 * 3 * 5 * 4 + 3 * 5 * 3


def _mlp(rng: np.random.Generator, d: int, h: int, c: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.normal(size=(h, d)), rng.normal(size=h)), (rng.normal(size=(c, h)), rng.normal(size=c))]


def _permute(net: list[tuple[np.ndarray, np.ndarray]], perm: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    (W1, b1), (W2, b2) = net
    p = list(perm)
    return [(W1[p], b1[p]), (W2[:, p], b2.copy())]


def _forward(net: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for k, (W, b) in enumerate(net):
        x = x @ W.T + b
        if k < len(net) - 1:
            x = np.maximum(x, 0)
    return x


def test_permuted_clients_recover_the_model_and_the_brute_force_permutation() -> None:
    """Three clients hold permutations of one MLP (width 3): the matching finds every permutation, and the
    matched model is the unpermuted one up to PFNM's shrinkage toward its prior (hand-computed)."""
    rng = np.random.default_rng(0)
    base = _mlp(rng, 4, 3, 2)
    perms = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]
    clients = [_permute(base, p) for p in perms]
    sigma2, sigma0_2 = 1.0, 1e4  # a weak prior: the average is the client value up to 1e-4
    m = match_mlp(clients, None, sigma2, sigma0_2, 1.0, 5, np.random.default_rng(1))
    assert m.widths == [3]
    # global neuron order is client 0's (the first client with most atoms); client j's neuron l is base
    # neuron perms[j][l], so it must be assigned to global index perms[j][l]
    for j, p in enumerate(perms):
        assert m.assignments[0][j].tolist() == list(p)
    # brute force over every (π_1, π_2): the one that aligns the clients exactly is the matching's
    A = [np.hstack([c[0][0], c[0][1][:, None], c[1][0].T]) for c in clients]
    spreads = {pp: sum(float(((A[k + 1][np.argsort(pp[k])] - A[0]) ** 2).sum()) for k in range(2))
               for pp in itertools.product(itertools.permutations(range(3)), repeat=2)}
    best = min(spreads, key=spreads.__getitem__)
    assert spreads[best] == 0.0
    assert [tuple(m.assignments[0][k].tolist()) for k in (1, 2)] == list(best)
    for j in (1, 2):
        aligned = _permute(clients[j], tuple(np.argsort(m.assignments[0][j])))
        np.testing.assert_allclose(aligned[0][0], base[0][0])
    # hand calculation of the shrinkage: hidden atoms have J copies at precision 1/σ², prior N(μ₀, σ₀²)
    J = 3
    shrink = (J / sigma2) / (1 / sigma0_2 + J / sigma2)
    np.testing.assert_allclose(m.layers[0][0], base[0][0] * shrink, rtol=1e-12)
    np.testing.assert_allclose(m.layers[0][1], (base[0][1] * J / sigma2 + 0.1 / sigma0_2) / (1 / sigma0_2 + J / sigma2))
    # outgoing weights: precision 1/σ² per client (no class counts) → J copies as well
    np.testing.assert_allclose(m.layers[1][0], base[1][0] * shrink, rtol=1e-12)
    x = rng.normal(size=(5, 4))
    np.testing.assert_allclose(_forward(m.layers, x), _forward(base, x), atol=1e-2)


def test_noisy_clients_match_the_brute_force_permutation() -> None:
    """Clients are noisy permutations: the matched assignment equals the brute-force minimiser of the total
    squared distance between aligned atoms, and the matched layer is the mean of the aligned atoms."""
    rng = np.random.default_rng(3)
    base = _mlp(rng, 3, 3, 2)
    perms = [(0, 1, 2), (1, 0, 2), (2, 1, 0)]
    clients = [[(W + 0.05 * rng.normal(size=W.shape), b + 0.05 * rng.normal(size=b.shape)) for W, b in
                _permute(base, p)] for p in perms]

    def atoms(net: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        return np.hstack([net[0][0], net[0][1][:, None], net[1][0].T])

    A = [atoms(c) for c in clients]

    def spread(pp: tuple[tuple[int, ...], ...]) -> float:
        aligned = [A[0]] + [A[k + 1][np.argsort(pp[k])] for k in range(2)]  # row g of client k: its atom at global g
        mean = sum(aligned) / 3
        return float(sum(((a - mean) ** 2).sum() for a in aligned))

    best = min(itertools.product(itertools.permutations(range(3)), repeat=2), key=spread)
    m = match_mlp(clients, None, 1.0, 1e6, 1.0, 5, np.random.default_rng(0))
    assert m.widths == [3]
    assert [tuple(m.assignments[0][k + 1].tolist()) for k in range(2)] == list(best)
    aligned = [A[0]] + [A[k + 1][np.argsort(best[k])] for k in range(2)]
    np.testing.assert_allclose(np.hstack([m.layers[0][0], m.layers[0][1][:, None], m.layers[1][0].T]),
                               sum(aligned) / 3, atol=1e-5)


def test_unrelated_atoms_open_new_global_neurons() -> None:
    # two clients with one far-apart atom each and a weak IBP penalty: the global layer has both
    a = [np.array([[10.0, 0.0]]), np.array([[-10.0, 0.0]])]
    lm = match_layer(a, [np.ones(2)] * 2, np.zeros(2), np.full(2, 1.0), 50.0, 3, np.random.default_rng(0))
    assert lm.atoms.shape[0] == 2
    assert sorted(lm.popularity.tolist()) == [1, 1]
    # capped at one atom: both must share it
    capped = match_layer(a, [np.ones(2)] * 2, np.zeros(2), np.full(2, 1.0), 50.0, 3, np.random.default_rng(0), max_atoms=1)
    assert capped.atoms.shape[0] == 1
    np.testing.assert_allclose(capped.atoms[0], [0.0, 0.0])  # (0 + 10 − 10)/(1 + 2)


def test_class_shares_and_average() -> None:
    counts = [np.array([3, 0, 1]), np.array([1, 0, 3])]
    s = class_shares(counts)
    np.testing.assert_allclose(s[0], [0.75, 0.0, 0.25])
    W, b = class_average([np.ones((3, 2)), 3 * np.ones((3, 2))], [np.zeros(3), np.ones(3)], counts)
    np.testing.assert_allclose(W[:, 0], [0.75 + 0.75, 2.0, 0.25 + 2.25])
    np.testing.assert_allclose(b, [0.25, 0.5, 0.75])


def test_fc_layer_and_input_permutation() -> None:
    W = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([0.1, 0.1])
    Wg, bg, lm = match_fc_layer([W, W[::-1]], [b, b], 1.0, 1e8, 1.0, 2, np.random.default_rng(0))
    assert lm.assignments[1].tolist() == [1, 0]
    np.testing.assert_allclose(Wg, W, atol=1e-7)
    np.testing.assert_allclose(bg, b, atol=1e-7)
    nxt = np.array([[1.0, 2.0]])
    np.testing.assert_allclose(permute_inputs(nxt, np.array([2, 0]), 3), [[2.0, 0.0, 1.0]])


def test_layer_ops_by_hand() -> None:
    # two identical clients with 2 atoms of D = 3: every assignment has r = 2 rows and c = 2 + 2 columns
    # (2 global atoms, up to 2 new ones): 3·2·4·3 + 2·4·2 = 88 operations; one first pass and one sweep over
    # both clients make 3 assignments
    a = np.array([[1.0, 0.0, 0.0], [0.0, 5.0, 0.0]])
    lm = match_layer([a, a.copy()], [np.ones(3)] * 2, np.zeros(3), np.ones(3), 1.0, 1, np.random.default_rng(0))
    assert lm.atoms.shape[0] == 2
    assert lm.ops == 3 * 88
