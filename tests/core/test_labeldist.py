"""Jensen–Shannon scores and client selection (BGFL) on hand-made histograms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierfl.core.labeldist import js_divergence, js_scores, select_by_score


def test_js_by_hand() -> None:
    assert js_divergence(np.array([3, 0]), np.array([0, 5])) == 1.0       # disjoint supports
    assert js_divergence(np.array([2, 2]), np.array([7, 7])) == 0.0       # the same distribution
    # p = (½, ½), q = (1, 0), m = (¾, ¼): KL(p‖m) = ½ log₂(⅔) + ½ log₂ 2, KL(q‖m) = log₂(4/3)
    by_hand = 0.5 * (0.5 * math.log2(2 / 3) + 0.5) + 0.5 * math.log2(4 / 3)
    assert js_divergence(np.array([1, 1]), np.array([4, 0])) == pytest.approx(by_hand, abs=1e-15)
    assert by_hand == pytest.approx(0.3112781244591328, abs=1e-15)
    # symmetric, and a matrix of rows at once
    assert js_divergence(np.array([4, 0]), np.array([1, 1])) == pytest.approx(by_hand, abs=1e-15)
    scores = js_scores(np.array([[3, 0], [1, 1], [0, 9]]), np.array([1, 0]))
    assert scores.tolist() == pytest.approx([0.0, by_hand, 1.0], abs=1e-15)
    with pytest.raises(ValueError, match="no samples"):
        js_scores(np.array([[0, 0]]), np.array([1, 1]))


def test_selection_rules_on_hand_made_scores() -> None:
    rng = np.random.default_rng
    clients, scores = [10, 11, 12, 13], np.array([0.5, 0.1, 0.9, 0.3])
    assert select_by_score(clients, scores, 2, "js_lowest", rng(0)) == [11, 13]
    assert select_by_score(clients, scores, 2, "js_highest", rng(0)) == [10, 12]
    assert sorted(select_by_score(clients, scores, 4, "random", rng(0))) == clients
    # js_weighted: weights 1 − s; a client with s = 1 is never drawn while others have weight
    for seed in range(20):
        assert 12 not in select_by_score(clients, np.array([0.5, 0.1, 1.0, 0.3]), 3, "js_weighted", rng(seed))
    # ties of the sorted rules are broken by the stream: both tied clients are chosen over the seeds
    tied = {tuple(select_by_score([0, 1, 2], np.array([0.2, 0.2, 0.9]), 1, "js_lowest", rng(s))) for s in range(20)}
    assert tied == {(0,), (1,)}
    with pytest.raises(ValueError, match="m must be"):
        select_by_score(clients, scores, 5, "js_lowest", rng(0))
    with pytest.raises(ValueError, match="rule"):
        select_by_score(clients, scores, 1, "best", rng(0))
