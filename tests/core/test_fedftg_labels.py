"""FedFTG's server arithmetic against hand calculations: class weights, label allotment, FLOPs."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.methods.fedftg.math import (
    CLASS_WEIGHT_EPS,
    allot_labels,
    batch_weights,
    class_client_weights,
    finetune_flops,
)


def test_class_weights_are_each_clients_share_of_the_class():
    # client 0 holds (1, 0) of classes (0, 1), client 1 holds (3, 2): class 0 → (1/4, 3/4), class 1 → (0, 1)
    a = class_client_weights(np.array([[1, 0], [3, 2]]))
    e = CLASS_WEIGHT_EPS
    assert a.shape == (2, 2)
    assert a[0].tolist() == pytest.approx([1 / (4 + e), 3 / (4 + e)], abs=0)
    assert a[1].tolist() == pytest.approx([0.0, 2 / (2 + e)], abs=0)
    # a class no client holds gets weight 0 everywhere, not NaN
    assert class_client_weights(np.array([[1, 0], [2, 0]]))[1].tolist() == [0.0, 0.0]
    # each sample's row of weights is its class's row
    assert batch_weights(np.array([1, 0, 1]), a).tolist() == [a[1].tolist(), a[0].tolist(), a[1].tolist()]
    with pytest.raises(ValueError, match="non-negative"):
        class_client_weights(np.array([[1, -1]]))
    with pytest.raises(ValueError, match="clients, classes"):
        class_client_weights(np.array([1, 2]))


def test_labels_are_allotted_by_cumulative_rounding_then_shuffled():
    # shares (1/4, 1/4, 1/2) of 10 labels: cumulative 2.5, 5 → cuts 2, 5 → counts (2, 3, 5)
    labels = allot_labels(10, np.array([1.0, 1.0, 2.0]), np.random.default_rng(3))
    assert np.bincount(labels, minlength=3).tolist() == [2, 3, 5]
    sorted_ = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    assert labels.tolist() == sorted_[np.random.default_rng(3).permutation(10)].tolist()
    # a class nobody holds gets no label; 5 labels at shares (0, 1/2, 1/2): cuts 0, 2 → (0, 2, 3)
    assert np.bincount(allot_labels(5, np.array([0, 3, 3]), np.random.default_rng(0)), minlength=3).tolist() == [0, 2, 3]
    # totals (25, 6, 3, 26, 1, 16, 3, 0) of 80, 50 labels: the float cumulative share of the first seven
    # classes is 0.99999..., which the code's rounding would cut at 49, leaving one label to the empty
    # class; here it gets none: cuts 15, 19, 21, 37, 38, 48 → (15, 4, 2, 16, 1, 10, 2, 0)
    totals = np.array([25.0, 6, 3, 26, 1, 16, 3, 0])
    assert (np.cumsum(totals / totals.sum()) * 50).astype(int)[-2] == 49
    got = np.bincount(allot_labels(50, totals, np.random.default_rng(0)), minlength=8)
    assert got.tolist() == [15, 4, 2, 16, 1, 10, 2, 0]
    with pytest.raises(ValueError, match="positive sum"):
        allot_labels(4, np.zeros(3), np.random.default_rng(0))


def test_finetune_flops_follow_the_loop_structure():
    # the specification's example: I = 10, I_d = 5, B = 50, |S| = 10 → 500·(35 F_G + 80 F_T + 45 F_S)
    assert finetune_flops(50, 10, 1, 5, 10, 1.0, 0.0, 0.0) == 500 * 35
    assert finetune_flops(50, 10, 1, 5, 10, 0.0, 1.0, 0.0) == 500 * 80
    assert finetune_flops(50, 10, 1, 5, 10, 0.0, 0.0, 1.0) == 500 * 45
    # B = 2, I = 3, I_g = 2, I_d = 1, K = 2, F = (G 5, T 7, S 7): 6·[2·2·3·19 + (5 + 21 + 14)] = 6·268
    assert finetune_flops(2, 3, 2, 1, 2, 5.0, 7.0, 7.0) == 6 * 268
    with pytest.raises(ValueError, match="teachers"):
        finetune_flops(2, 3, 1, 1, 0, 1.0, 1.0, 1.0)
