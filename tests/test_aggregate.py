"""Weighted averaging against hand-computed numbers and properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.core.aggregate import normalised_weights, weighted_average


def test_hand_computed_weighted_average():
    a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    b = np.array([3.0, 6.0, -1.0], dtype=np.float32)
    out = weighted_average([a, b], [1, 3])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [2.5, 5.0, 0.0], atol=1e-7)


def test_degenerate_inputs_raise():
    v = np.zeros(2, dtype=np.float32)
    with pytest.raises(ValueError, match="sum to zero"):
        weighted_average([v, v], [0, 0])
    with pytest.raises(ValueError, match=">= 0"):
        weighted_average([v], [-1])
    with pytest.raises(ValueError, match="at least one"):
        weighted_average([], [])
    with pytest.raises(ValueError, match="2 vectors but 1"):
        weighted_average([v, v], [1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 1000), min_size=1, max_size=8), st.integers(0, 2**31 - 1))
def test_properties(weights, seed):
    rng = np.random.default_rng(seed)
    vecs = [rng.standard_normal(6).astype(np.float32) for _ in weights]
    p = normalised_weights(weights)
    assert abs(p.sum() - 1.0) < 1e-12
    out = weighted_average(vecs, weights)
    stack = np.stack(vecs)
    assert np.all(out <= stack.max(axis=0) + 1e-5) and np.all(out >= stack.min(axis=0) - 1e-5)
    same = weighted_average([vecs[0]] * len(weights), weights)
    np.testing.assert_allclose(same, vecs[0], rtol=1e-6, atol=1e-6)
