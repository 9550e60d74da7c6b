"""A weighted sum of one and the same vector (timing-only rounds) does no arithmetic and keeps the bits.

The reference is the plain float64 streaming sum, ``Σ w_k x`` then ``/ Σ w_k`` as float32, computed here
with numpy (the arithmetic :class:`~hierfl.core.aggregate.WeightedSum` does on distinct vectors).
"""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.aggregate import WeightedSum, weighted_average


def _reference(x: np.ndarray, weights: list[float]) -> np.ndarray:
    acc = np.multiply(x, weights[0], dtype=np.float64)
    for w in weights[1:]:
        acc += np.multiply(x, w, dtype=np.float64)
    return (acc / sum(weights)).astype(np.float32)


@pytest.mark.parametrize("kind", ["fractional", "counts", "wide"])
def test_the_same_vector_n_times_is_returned_without_arithmetic_and_with_the_sums_bits(kind):
    rng = np.random.default_rng({"fractional": 1, "counts": 2, "wide": 3}[kind])
    for _ in range(40):
        n = int(rng.integers(1, 60))
        # magnitudes across float32's range, signed zeros, a subnormal and the largest finite value
        x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-40, 38, 4000)).astype(np.float32)
        x[:5] = [0.0, -0.0, 1.4e-45, -3.4028235e38, 1e-38]
        if kind == "fractional":
            w = list(rng.random(n) + 1e-3)
        elif kind == "counts":
            w = [float(v) for v in rng.integers(0, 600, n)]
            w[0] = 1.0
        else:
            w = list(rng.random(n) * 10.0 ** float(rng.integers(-6, 9)) + 1e-9)
        acc = WeightedSum()
        for wk in w:
            acc.add(x, wk)
        out = acc.result()
        assert acc.folds == 0 and out is x  # no model arithmetic, no copy
        assert out.tobytes() == _reference(x, w).tobytes()


def test_a_different_vector_folds_the_deferred_ones_in_order():
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 1000)).astype(np.float32)
    w = [3.0, 0.25, 7.5, 1.0]
    acc = WeightedSum()
    for v, wk in zip([x, x, x, y], w):
        acc.add(v, wk)
    assert acc.result().tobytes() == weighted_average([x, x.copy(), x.copy(), y], w).tobytes()
    assert acc.folds == 4


@pytest.mark.filterwarnings("ignore:invalid value")
def test_a_non_finite_vector_takes_the_arithmetic():
    x = np.array([1.0, np.inf, np.nan, -2.0], dtype=np.float32)
    acc = WeightedSum()
    acc.add(x, 0.0)
    acc.add(x, 2.0)
    out = acc.result()
    assert acc.folds == 2 and out is not x
    assert np.isnan(out[1]) and np.isnan(out[2])  # 0·inf is NaN: the plain sum's answer, not x's


def test_empty_and_zero_weight_still_refused():
    with pytest.raises(ValueError, match="at least one"):
        WeightedSum().result()
    acc = WeightedSum()
    acc.add(np.ones(3, dtype=np.float32), 0.0)
    with pytest.raises(ValueError, match="sum to zero"):
        acc.result()


def test_a_long_vector_folds_block_by_block_with_the_whole_vector_bits():
    from hierfl.core.aggregate import _BLOCK

    rng = np.random.default_rng(6)
    n = 2 * _BLOCK + 123  # two whole blocks and a tail
    vs = (rng.standard_normal((5, n)) * 10.0 ** rng.integers(-20, 20, (5, n))).astype(np.float32)
    w = [3.0, 0.125, 17.5, 1e-3, 2.0]
    acc = WeightedSum()
    for v, wk in zip(vs, w):
        acc.add(v, wk)
    ref = np.multiply(vs[0], w[0], dtype=np.float64)
    for v, wk in zip(vs[1:], w[1:]):
        ref += np.multiply(v, wk, dtype=np.float64)
    assert acc.folds == 5 and acc.result().tobytes() == (ref / sum(w)).astype(np.float32).tobytes()


def test_a_read_only_input_comes_back_as_a_writable_copy_of_its_bits():
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    x.flags.writeable = False
    acc = WeightedSum()
    acc.add(x, 2.0)
    acc.add(x, 5.0)
    out = acc.result()
    assert acc.folds == 0 and out is not x and out.flags.writeable and out.tobytes() == x.tobytes()
