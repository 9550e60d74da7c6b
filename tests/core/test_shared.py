"""The shared dataset of a data-sharing stage (BGFL's D_g) against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.shared import SharedData, SharedRows, share_counts, share_rows, shared_rows_for
from hierfl.core.work import TrainSpec, job_samples


def test_share_counts_by_largest_remainder() -> None:
    # n = (7, 3, 0), α = 0.25: ⌊2.5 + ½⌋ = 3 in all; floors (1, 0, 0), remainders (0.75, 0.75, 0) → (2, 1, 0)
    assert share_counts(np.array([7, 3, 0]), 0.25).tolist() == [2, 1, 0]
    # n = (10, 10), α = 0.05: ⌊1 + ½⌋ = 1; floors (0, 0), equal remainders: the lower class
    assert share_counts(np.array([10, 10]), 0.05).tolist() == [1, 0]
    # α = 0.5 of (5, 4, 1): ⌊5 + ½⌋ = 5 in all; floors (2, 2, 0) = 4, remainders (0.5, 0, 0.5): one more to
    # class 0 (the lower of the two largest)
    assert share_counts(np.array([5, 4, 1]), 0.5).tolist() == [3, 2, 0]
    assert share_counts(np.array([3, 0]), 0.0).tolist() == [0, 0]
    assert share_counts(np.array([3, 1]), 1.0).tolist() == [3, 1]
    with pytest.raises(ValueError, match="alpha"):
        share_counts(np.array([3]), 1.5)


def test_share_rows_take_the_counts_of_each_class() -> None:
    rows = np.array([10, 11, 12, 13, 14, 15])
    labels = np.array([0, 1, 0, 0, 1, 2])
    picked = share_rows(rows, labels, np.array([2, 1, 0]), np.random.default_rng(0))
    assert picked.size == 3
    assert set(picked[:2].tolist()) <= {10, 12, 13} and picked[2] in (11, 14)
    with pytest.raises(ValueError, match="class 2"):
        share_rows(rows, labels, np.array([0, 0, 2]), np.random.default_rng(0))


def test_shared_data_sizes_and_rows_per_device() -> None:
    parts = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([8, 9])]
    labels = np.array([0, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    shared = SharedData((0, 1), ((1, 1), (0, 2)), seed=5)
    assert shared.total == 4 and shared.own(0) == 2 and shared.own(2) == 0
    assert shared.extra_for(0) == 2 and shared.extra_for(1) == 2 and shared.extra_for(2) == 4
    assert shared.histogram(3).tolist() == [1, 3, 0]
    # device 2 gets both shares, device 0 only device 1's (its own is among its rows already)
    both = shared_rows_for(shared, 2, parts, labels)
    assert both.size == 4 and both[0] in (0, 1) and both[1] in (2, 3) and set(both[2:].tolist()) <= {5, 6, 7}
    assert np.array_equal(shared_rows_for(shared, 0, parts, labels), both[2:])
    assert np.array_equal(shared_rows_for(shared, 2, parts, labels), both)  # the same draw every time
    # a job of device 0 trains on its 4 rows plus 2; device 2 on 2 + 4
    spec = TrainSpec(epochs=1, shared=shared)
    assert job_samples(4, 0, spec) == 6 and job_samples(2, 2, spec) == 6 and job_samples(2, 2, TrainSpec()) == 2
    with pytest.raises(ValueError, match="do not combine"):
        TrainSpec(epochs=1, shared=shared, revealed=3)
    with pytest.raises(ValueError, match="sorted"):
        SharedData((1, 0), ((1,), (1,)), seed=0)


def test_shared_rows_join_a_devices_rows_with_the_other_shares() -> None:
    parts = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([8, 9])]
    labels = np.array([0, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    shared = SharedData((0, 1), ((1, 1), (0, 2)), seed=5)
    cache = SharedRows(parts, labels)
    share0, share1 = (shared_rows_for(shared, 9, parts, labels, only=d) for d in (0, 1))
    assert share0.size == 2 and share1.size == 2
    assert np.array_equal(cache.rows(shared, 0), np.concatenate([parts[0], share1]))
    assert np.array_equal(cache.rows(shared, 1), np.concatenate([parts[1], share0]))
    assert np.array_equal(cache.rows(shared, 2), np.concatenate([parts[2], share0, share1]))


def test_malicious_shares_carry_flipped_labels() -> None:
    parts = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([8, 9])]
    labels = np.array([0, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    shared = SharedData((0, 1), ((1, 1), (0, 2)), seed=5, flipped=(1,))
    # as shared, device 1's two class-1 samples count as class C − 1 − 1 = 0 (C = 2)
    assert shared.histogram(2).tolist() == [1 + 2, 1 + 0]
    cache = SharedRows(parts, labels, num_classes=2)
    share1 = shared_rows_for(shared, 9, parts, labels, only=1)
    y = cache.y_for(shared, 0)
    assert y[share1].tolist() == [0, 0]                    # flipped: C − 1 − 1
    others = np.setdiff1d(np.arange(10), share1)
    assert np.array_equal(y[others], labels[others])       # every other label as it was
    assert cache.y_for(shared, 1) is labels                # the malicious sharer trains on its true labels
    assert cache.y_for(SharedData((0, 1), ((1, 1), (0, 2)), seed=5), 0) is labels  # nobody flips: no copy
    with pytest.raises(ValueError, match="flipped"):
        SharedData((0, 1), ((1,), (1,)), seed=0, flipped=(2,))
