"""Label noise per device: the flip rules by hand, and where the build applies them."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.labelnoise import flip_labels
from hierfl.core.rng import stream


def test_pair_flip_moves_each_corrupted_label_to_the_next_class():
    y = np.array([0, 1, 2, 2, 1, 0])
    assert flip_labels(y, 1.0, "pair_flip", 3, stream(1, "t")).tolist() == [1, 2, 0, 0, 2, 1]
    assert flip_labels(y, 0.0, "pair_flip", 3, stream(1, "t")).tolist() == y.tolist()


def test_symmetric_noise_never_keeps_a_corrupted_label_and_hits_every_other_class():
    y = np.zeros(3000, dtype=np.int64)
    noisy = flip_labels(y, 1.0, "symmetric", 4, stream(2, "t"))
    assert (noisy != 0).all()
    counts = np.bincount(noisy, minlength=4)[1:]
    assert counts.sum() == 3000 and counts.min() > 900  # about 1000 each of classes 1, 2, 3
    half = flip_labels(y, 0.3, "symmetric", 4, stream(2, "t"))
    assert 0.25 < (half != 0).mean() < 0.35
    with pytest.raises(ValueError, match="allowed|one of"):
        flip_labels(y, 0.3, "random", 4, stream(2, "t"))


def test_the_build_corrupts_only_the_devices_rows():
    from hierfl.assemble import build
    from tests.conftest import tiny

    clean = build(tiny())
    noisy = build(tiny(data={"label_noise": {"kind": "pair_flip", "rate": 1.0}}))
    assert noisy.clean_labels is not None
    assert noisy.clean_labels.tolist() == clean.dataset.y_train.tolist()
    rows = np.concatenate(noisy.parts)
    assert ((noisy.dataset.y_train[rows] - clean.dataset.y_train[rows]) % 3 == 1).all()
    assert noisy.dataset.y_test.tolist() == clean.dataset.y_test.tolist()  # the test set stays clean
    rates = build(tiny(data={"label_noise": {"kind": "symmetric", "rate": 0.0, "rate_high": 0.5}}))
    changed = [(rates.dataset.y_train[p] != clean.dataset.y_train[p]).mean() for p in rates.parts]
    assert len(set(changed)) > 1 and max(changed) < 0.6  # a rate per device from U(0, 0.5)


def test_bad_label_noise_names_its_key(tmp_path, capsys):
    from tests.badinput import assert_refused
    from tests.conftest import TINY

    raw = {**TINY, "data": {**TINY["data"], "label_noise": {"kind": "pair_flip", "rate": 0.5, "rate_high": 0.2}}}
    assert_refused(tmp_path, capsys, raw, "data.label_noise")
    raw = {**TINY, "data": {**TINY["data"], "label_noise": {"kind": "flip", "rate": 0.5}}}
    assert_refused(tmp_path, capsys, raw, "data.label_noise.kind")
