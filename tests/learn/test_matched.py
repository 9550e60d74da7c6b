"""Server work of PFNM / FedMA on capacity-layout MLP vectors: permuted clients, widths, dead neurons."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.mlp_layout import mlp_layers, mlp_vector
from hierfl.methods.matched.trainer import (
    Shape,
    active_layers,
    embed,
    fedma_final,
    fedma_layer,
    init_models,
    pfnm_global,
)

SHAPE = Shape(4, [5, 5], 2)  # capacity: two hidden layers of 5


def _narrow(rng: np.random.Generator, widths: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    dims = [4, *widths, 2]
    return [(rng.normal(size=(dims[k + 1], dims[k])), rng.normal(size=dims[k + 1])) for k in range(3)]


def _permute_hidden(net, perms):
    out = [list(p) for p in net]
    for k, p in enumerate(perms):
        p = list(p)
        out[k][0], out[k][1] = out[k][0][p], out[k][1][p]
        out[k + 1][0] = out[k + 1][0][:, p]
    return [tuple(x) for x in out]


def _forward(layers, x):
    for k, (W, b) in enumerate(layers):
        x = x @ W.T + b
        if k < len(layers) - 1:
            x = np.maximum(x, 0)
    return x


def test_embed_and_active_round_trip() -> None:
    net = _narrow(np.random.default_rng(0), [3, 2])
    v = embed(net, SHAPE)
    assert v.shape == (5 * 4 + 5 + 5 * 5 + 5 + 2 * 5 + 2,)
    back = active_layers(SHAPE.layers(v), [3, 2])
    for (W, b), (W2, b2) in zip(net, back):
        np.testing.assert_allclose(W2, W, rtol=1e-6)
        np.testing.assert_allclose(b2, b, rtol=1e-6)
    full = SHAPE.layers(v)
    assert not full[0][0][3:].any() and not full[1][0][:, 3:].any() and not full[2][0][:, 2:].any()
    x = np.random.default_rng(1).normal(size=(3, 4))
    np.testing.assert_allclose(_forward(full, x), _forward(net, x), rtol=1e-5)


def test_init_models_are_distinct_and_narrow() -> None:
    pytest.importorskip("torch")
    from hierfl.models import MLPConfig

    models = init_models(MLPConfig(hidden=[5, 5]), (4,), SHAPE, [1, 2], [[3, 3], [5, 2]])
    a = SHAPE.layers(models[0])
    assert not a[0][0][3:].any() and a[0][0][:3].all()
    b = SHAPE.layers(models[1])
    assert b[0][0].all() and not b[1][0][2:].any()
    assert not np.array_equal(a[0][0][:3], b[0][0][:3])


def test_pfnm_global_recovers_permuted_two_layer_mlps() -> None:
    rng = np.random.default_rng(2)
    base = _narrow(rng, [3, 2])
    perms = [((0, 1, 2), (0, 1)), ((2, 0, 1), (1, 0)), ((1, 2, 0), (0, 1))]
    models = [embed(_permute_hidden(base, p), SHAPE) for p in perms]
    g, widths, assignments, ops = pfnm_global(models, [[3, 2]] * 3, None, SHAPE, 1.0, 1e6, 1.0, 3,
                                              np.random.default_rng(0))
    assert widths == [3, 2]
    assert [a.tolist() for a in assignments[0]] == [list(p[0]) for p in perms]
    assert [a.tolist() for a in assignments[1]] == [list(p[1]) for p in perms]
    x = rng.normal(size=(6, 4))
    np.testing.assert_allclose(_forward(SHAPE.layers(g), x), _forward(base, x), rtol=1e-3, atol=1e-3)
    assert ops > 0


def test_fedma_layer_gives_every_client_the_global_layer_and_keeps_its_function() -> None:
    rng = np.random.default_rng(4)
    base = _narrow(rng, [3, 3])
    models = [embed(_permute_hidden(base, p), SHAPE) for p in [((0, 1, 2), (0, 1, 2)), ((1, 2, 0), (2, 1, 0))]]
    out, width, assignments, _ = fedma_layer(models, [[3, 3]] * 2, 0, SHAPE, 1.0, 1e8, 1.0, 2,
                                             np.random.default_rng(0))
    assert width == 3
    assert assignments[1].tolist() == [1, 2, 0]
    l0 = [SHAPE.layers(m)[0] for m in out]
    np.testing.assert_allclose(l0[0][0], l0[1][0], rtol=1e-9)  # the same global layer 0
    x = rng.normal(size=(5, 4))
    for before, after in zip(models, out):  # matching exact permutations changes no client's function
        np.testing.assert_allclose(_forward(SHAPE.layers(after), x), _forward(SHAPE.layers(before), x), rtol=1e-5,
                                   atol=1e-5)
    # the second layer next: its inputs now agree
    out2, width2, _, _ = fedma_layer(out, [[3, 3]] * 2, 1, SHAPE, 1.0, 1e8, 1.0, 2, np.random.default_rng(0))
    assert width2 == 3
    np.testing.assert_allclose(SHAPE.layers(out2[0])[1][0], SHAPE.layers(out2[1])[1][0], rtol=1e-9)
    with pytest.raises(ValueError, match="differ in width"):
        fedma_layer(models, [[3, 3], [2, 3]], 1, SHAPE, 1.0, 1.0, 1.0, 1, np.random.default_rng(0))


def test_fedma_final_by_hand() -> None:
    shape = Shape(1, [1], 2)
    a = mlp_vector([(np.array([[1.0]]), np.array([0.0])), (np.array([[2.0], [4.0]]), np.array([1.0, 1.0]))])
    b = mlp_vector([(np.array([[1.0]]), np.array([0.0])), (np.array([[6.0], [0.0]]), np.array([3.0, 5.0]))])
    g, ops = fedma_final([a, b], [1], [np.array([1, 3]), np.array([3, 1])], shape)
    _, (W2, b2) = mlp_layers(g, 1, [1], 2)
    # class 0: shares 1/4, 3/4 → 0.25·2 + 0.75·6 = 5; class 1: 0.75·4 + 0.25·0 = 3; biases 0.25·1 + 0.75·3, 0.75·1 + 0.25·5
    np.testing.assert_allclose(W2[:, 0], [5.0, 3.0])
    np.testing.assert_allclose(b2, [2.5, 2.0])
    assert ops == 2 * 2 * (2 + 2)


def test_submodel_gives_each_client_its_matched_neurons_in_its_own_order() -> None:
    """Permuted clients, matched with a weak prior: each client's sub-network of the global model is its own
    network again (its order, its width)."""
    from hierfl.methods.matched.trainer import submodel

    rng = np.random.default_rng(5)
    base = _narrow(rng, [3, 2])
    perms = [((0, 1, 2), (0, 1)), ((2, 0, 1), (1, 0))]
    nets = [_permute_hidden(base, p) for p in perms]
    models = [embed(n, SHAPE) for n in nets]
    g, widths, assignments, _ = pfnm_global(models, [[3, 2]] * 2, None, SHAPE, 1.0, 1e8, 1.0, 2,
                                            np.random.default_rng(0))
    for j, net in enumerate(nets):
        sub, w = submodel(g, widths, [assignments[0][j], assignments[1][j]], SHAPE)
        assert w == [3, 2]
        for (W, b), (Ws, bs) in zip(net, active_layers(SHAPE.layers(sub), w)):
            np.testing.assert_allclose(Ws, W, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(bs, b, rtol=1e-6, atol=1e-6)
    # a client that used fewer global neurons gets a narrower sub-network: global neurons 0 and 2 of layer 0
    sub, w = submodel(g, widths, [np.array([2, 0]), np.array([1])], SHAPE)
    (W0, _), (W1, _), (W2, _) = active_layers(SHAPE.layers(sub), w)
    G = active_layers(SHAPE.layers(g), widths)
    assert w == [2, 1]
    np.testing.assert_allclose(W0, G[0][0][[2, 0]], rtol=1e-6)
    np.testing.assert_allclose(W1, G[1][0][np.ix_([1], [2, 0])], rtol=1e-6)
    np.testing.assert_allclose(W2, G[2][0][:, [1]], rtol=1e-6)
    with pytest.raises(ValueError, match="do not index"):
        submodel(g, widths, [np.array([5]), np.array([0])], SHAPE)
