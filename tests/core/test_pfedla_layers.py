"""pFedLA's layer-wise aggregation against hand calculations on tiny tensors (hierfl.methods.pfedla.math)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.methods.pfedla.math import kept_layers, layer_groups, layer_weights, personalise

LAYOUT = [("a.weight", (2,)), ("a.bias", (1,)), ("b.weight", (1,))]


def test_layer_groups_by_module_or_by_tensor():
    layer = layer_groups(LAYOUT)
    assert [g.tolist() for g in layer] == [[0, 1, 2], [3]]
    tensor = layer_groups(LAYOUT, "tensor")
    assert [g.tolist() for g in tensor] == [[0, 1], [2], [3]]


def test_personalised_aggregation_layer_by_layer():
    # θ_0 = [1, 2, 3 | 4], θ_1 = [5, 6, 7 | 8]; layer a weighted (0.25, 0.75), layer b (1, 0)
    models = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    w = np.array([[0.25, 0.75], [1.0, 0.0]])
    out = personalise(models, layer_groups(LAYOUT), w)
    # a: 0.25·[1,2,3] + 0.75·[5,6,7] = [4, 5, 6]; b: 4
    assert out.dtype == np.float32
    assert out.tolist() == [4.0, 5.0, 6.0, 4.0]


def test_weights_normalise_fall_back_to_one_hot_and_keep_layers():
    alpha = np.array([[2.0, 3.0], [5.0, 1.0], [0.0, 0.0]])
    # client 0's self-weights 2, 5, 0: k_keep = 1 keeps layer 1
    assert kept_layers(alpha, 0, 1) == [1]
    assert kept_layers(alpha, 1, 2) == [0, 1]  # self-weights 3, 1, 0
    assert kept_layers(alpha, 0, 0) == []
    w = layer_weights(alpha, 0, kept=[1])
    assert w.tolist() == [[0.4, 0.6], [1.0, 0.0], [1.0, 0.0]]  # the zero row: client 0's own layer
    with pytest.raises(ValueError, match="k_keep"):
        kept_layers(alpha, 0, 4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.floats(0.0, 5.0), min_size=3, max_size=3), min_size=1, max_size=4),
       st.integers(0, 2), st.integers(0, 4))
def test_weights_are_convex_and_the_model_lies_between_the_clients(alpha, client, k_keep):
    """Every row of â sums to 1 with non-negative entries, kept rows are one-hot, and each personalised
    layer lies within the clients' range of that layer."""
    a = np.array(alpha)
    k = min(k_keep, a.shape[0])
    kept = kept_layers(a, client, k)
    w = layer_weights(a, client, kept)
    assert (w >= 0).all() and np.allclose(w.sum(axis=1), 1.0)
    assert all(w[l, client] == 1.0 for l in kept)
    layout = [(f"m{l}.weight", (2,)) for l in range(a.shape[0])]
    models = np.random.default_rng(0).standard_normal((3, 2 * a.shape[0])).astype(np.float32)
    out = personalise(models, layer_groups(layout), w)
    assert (out >= models.min(axis=0) - 1e-5).all() and (out <= models.max(axis=0) + 1e-5).all()
