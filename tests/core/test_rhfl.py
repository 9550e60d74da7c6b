"""RHFL's client-confidence re-weighting against hand calculations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierfl.methods.rhfl.math import SCESpec, ccr_weights, confidence_weights, first_round_weights, loss_decrease


def test_first_round_weights_are_one_over_k_minus_one():
    assert first_round_weights(3).tolist() == [0.5, 0.5, 0.5]  # sum 3/2: not normalised, as the code
    assert first_round_weights(2).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="at least 2 parties"):
        first_round_weights(1)


def test_ccr_weights_by_hand():
    # losses 2 → 1, 1.5 → 1, 1 → 1: F = (1, ½, 0), ΣF = 3/2; K = 3, η = ½:
    # a = ½ + ½·F/(3/2) = (½ + ⅓, ½ + ⅙, ½); W = softmax(a)
    prev, cur = np.array([2.0, 1.5, 1.0]), np.array([1.0, 1.0, 1.0])
    assert loss_decrease(prev, cur).tolist() == [1.0, 0.5, 0.0]
    e = [math.exp(0.5 + 1 / 3), math.exp(0.5 + 1 / 6), math.exp(0.5)]
    assert ccr_weights(prev, cur, 0.5).tolist() == pytest.approx([x / sum(e) for x in e], rel=1e-12)
    # the loss decrease is relative to the current loss: 4 → 2 is F = 1, 3 → 2 is F = ½
    assert loss_decrease(np.array([4.0, 3.0]), np.array([2.0, 2.0])).tolist() == [1.0, 0.5]
    # a party whose loss rises gets less than 1/K: F = (1, −1, 1), ΣF = 1, K = 3, η = 1: a = ½ + F
    w = confidence_weights(np.array([1.0, -1.0, 1.0]), 1.0)
    e = [math.exp(1.5), math.exp(-0.5), math.exp(1.5)]
    assert w.tolist() == pytest.approx([x / sum(e) for x in e], rel=1e-12)


def test_ccr_guard_and_eta_zero_give_equal_weights():
    same = np.array([1.0, 1.0, 1.0])
    assert ccr_weights(same, same, 0.5).tolist() == pytest.approx([1 / 3] * 3)  # ΣF = 0: guarded
    assert ccr_weights(np.array([2.0, 1.0, 1.0]), same, 0.0).tolist() == pytest.approx([1 / 3] * 3)
    # F = (1, −1): ΣF = 0 exactly → the η term is dropped rather than dividing by zero
    assert confidence_weights(np.array([1.0, -1.0]), 0.5).tolist() == [0.5, 0.5]


def test_ccr_refuses_bad_input():
    with pytest.raises(ValueError, match="positive current losses"):
        loss_decrease(np.array([1.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="same shape"):
        loss_decrease(np.array([1.0, 2.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="eta"):
        confidence_weights(np.array([1.0, 0.5]), -1.0)
    with pytest.raises(ValueError, match="at least 2 parties"):
        confidence_weights(np.array([1.0]), 0.5)


def test_sce_spec():
    assert SCESpec(0.1, 1.0).eval_passes == 1
    assert SCESpec(0.1, 1.0, report=False).eval_passes == 0
    with pytest.raises(ValueError, match="a \\+ b must be > 0"):
        SCESpec(0.0, 0.0)
    with pytest.raises(ValueError, match="b must be"):
        SCESpec(0.1, -1.0)
