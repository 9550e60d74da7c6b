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


def _naive_linear_combination(terms, dtype=np.float32):
    """The textbook loop (every term computed), for the bit-identity check of the zero-delta shortcut."""
    acc = None
    for coef, plus, minus in terms:
        term = np.asarray(plus, dtype=np.float64)
        if minus is not None:
            term = term - np.asarray(minus, dtype=np.float64)
        acc = np.zeros_like(term) if acc is None else acc
        acc += float(coef) * term
    return acc.astype(dtype, copy=False)


def test_zero_deltas_are_skipped_with_the_bits_of_the_full_sum_signed_zeros_included():
    """A delta of a model from itself (timing-only updates) is skipped with the bits of the full sum,
    whatever the order and signs (±0.0 included) of the coefficients and signed zeros in the vectors."""
    from hierfl.core.aggregate import linear_combination

    rng = np.random.default_rng(5)
    for trial in range(300):
        n = 6
        pool = [rng.normal(size=n).astype(np.float32) for _ in range(3)]
        neg_zero = np.array([-0.0, 0.0, -0.0, 1.5, -0.0, 0.0], dtype=np.float32)
        pool.append(neg_zero)
        terms = []
        for _ in range(rng.integers(1, 7)):
            kind = rng.integers(0, 4)
            c = float(rng.choice([0.5, -0.25, 0.0, -0.0, 1.0]))
            a = pool[rng.integers(0, len(pool))]
            if kind == 0:
                terms.append((c, a, None))
            elif kind == 1:
                terms.append((c, a, a))                      # a zero delta: skipped
            else:
                terms.append((c, a, pool[rng.integers(0, len(pool))]))
        got, want = linear_combination(terms), _naive_linear_combination(terms)
        assert got.tobytes() == want.tobytes(), (trial, terms)
    # a non-finite model is never skipped: inf − inf is nan, as in the full sum
    bad = np.array([np.inf, 1.0], dtype=np.float32)
    out = linear_combination([(1.0, np.ones(2, np.float32), None), (0.5, bad, bad)])
    assert np.isnan(out[0]) and out[1] == 1.0
