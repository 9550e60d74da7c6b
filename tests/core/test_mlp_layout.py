"""Flat MLP vectors as layers; rebuilding in a new layout; frozen prefixes (hand-computed sizes)."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.mlp_layout import (
    frozen_prefix,
    mlp_layers,
    mlp_size,
    mlp_vector,
    relayout,
)


def test_sizes_by_hand() -> None:
    # 4 → 3 → 2: W1 3·4 + b1 3 + W2 2·3 + b2 2 = 23
    assert mlp_size(4, [3], 2) == 23
    assert frozen_prefix(4, [3], 2, 1) == 15
    assert frozen_prefix(4, [3, 5], 2, 2) == 15 + 5 * 3 + 5
    with pytest.raises(ValueError, match="layers must be in"):
        frozen_prefix(4, [3], 2, 3)


def test_layers_round_trip_and_match_torch_layout() -> None:
    torch = pytest.importorskip("torch")
    from hierfl.models import MLPConfig

    module = MLPConfig(hidden=[3]).build((4,), 2, seed=1)
    flat = torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy()
    layers = mlp_layers(flat, 4, [3], 2)
    np.testing.assert_array_equal(layers[0][0], module.layers[0].weight.detach().numpy())
    np.testing.assert_array_equal(layers[1][1], module.layers[2].bias.detach().numpy())
    np.testing.assert_array_equal(mlp_vector(layers), flat)


def test_relayout_widens_with_dead_neurons_and_narrows_back() -> None:
    v = np.arange(1, mlp_size(2, [2], 2) + 1, dtype=np.float32)
    wide = relayout(v, 2, [2], [3], 2)
    (W1, b1), (W2, b2) = mlp_layers(wide, 2, [3], 2)
    np.testing.assert_array_equal(W1, [[1, 2], [3, 4], [0, 0]])
    np.testing.assert_array_equal(b1, [5, 6, 0])
    np.testing.assert_array_equal(W2, [[7, 8, 0], [9, 10, 0]])
    np.testing.assert_array_equal(b2, [11, 12])
    np.testing.assert_array_equal(relayout(wide, 2, [3], [2], 2), v)


def test_dead_neurons_change_neither_output_nor_training() -> None:
    """A width-2 net embedded in width 4 trains to the embedding of the width-2 net's result."""
    pytest.importorskip("torch")
    from hierfl.core.work import TrainSpec
    from hierfl.learn.local import LocalTrainer
    from hierfl.models import MLPConfig

    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=20)
    narrow = LocalTrainer(MLPConfig(hidden=[2]), (3,), 2)
    wide = LocalTrainer(MLPConfig(hidden=[4]), (3,), 2)
    p = rng.normal(size=narrow.num_params).astype(np.float32)
    spec = TrainSpec(epochs=2, batch_size=5, lr=0.1, momentum=0.9, weight_decay=1e-3)
    out_n, _ = narrow.train(p, x, y, spec, seed=3)
    out_w, _ = wide.train(relayout(p, 3, [2], [4], 2), x, y, spec, seed=3)
    np.testing.assert_allclose(relayout(out_w, 3, [4], [2], 2), out_n, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out_w, relayout(relayout(out_w, 3, [4], [2], 2), 3, [2], [4], 2))


def test_frozen_prefix_keeps_the_leading_layers() -> None:
    pytest.importorskip("torch")
    from hierfl.core.work import TrainSpec
    from hierfl.learn.local import LocalTrainer
    from hierfl.models import MLPConfig

    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=16)
    tr = LocalTrainer(MLPConfig(hidden=[4]), (3,), 2)
    p = rng.normal(size=tr.num_params).astype(np.float32)
    k = frozen_prefix(3, [4], 2, 1)
    spec = TrainSpec(epochs=1, batch_size=4, lr=0.1, momentum=0.9, weight_decay=1e-2, frozen=k)
    out, _ = tr.train(p, x, y, spec, seed=0)
    np.testing.assert_array_equal(out[:k], p[:k])
    assert np.abs(out[k:] - p[k:]).max() > 1e-3
    # the trainable part equals plain gradient descent on the output layer with the hidden layer fixed:
    # one full batch step of lr 0.1, no momentum, by hand with numpy
    spec1 = TrainSpec(epochs=1, batch_size=None, lr=0.1, frozen=k)
    out1, _ = tr.train(p, x, y, spec1, seed=0)
    (W1, b1), (W2, b2) = mlp_layers(p.astype(np.float64), 3, [4], 2)
    h = np.maximum(x @ W1.T + b1, 0)
    z = h @ W2.T + b2
    prob = np.exp(z - z.max(1, keepdims=True))
    prob /= prob.sum(1, keepdims=True)
    prob[np.arange(16), y] -= 1
    gW2 = prob.T @ h / 16
    gb2 = prob.mean(0)
    (_, _), (W2n, b2n) = mlp_layers(out1.astype(np.float64), 3, [4], 2)
    np.testing.assert_allclose(W2n, W2 - 0.1 * gW2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b2n, b2 - 0.1 * gb2, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="frozen must be"):
        TrainSpec(frozen=-1)
