"""Public-data subsets and sizes, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.public import public_bytes, public_subset
from hierfl.core.rng import stream


def test_stratified_subset_gives_each_class_its_share():
    # 10 samples: class 0 ×5, class 1 ×3, class 2 ×2; size 5 → quotas 2.5, 1.5, 1.0 → floors 2, 1, 1,
    # one left for the largest remainder (0.5, a tie between classes 0 and 1: class 0 first)
    labels = np.array([0, 1, 0, 2, 0, 1, 0, 2, 1, 0])
    rows = public_subset(labels, 5, stream(1, "public_subset", 0), stratified=True)
    assert rows.tolist() == sorted(rows.tolist()) and len(set(rows.tolist())) == 5
    assert np.bincount(labels[rows], minlength=3).tolist() == [3, 1, 1]


def test_plain_subset_and_whole_pool():
    labels = np.zeros(8, dtype=np.int64)
    a = public_subset(labels, 3, stream(1, "public_subset", 4), stratified=False)
    b = public_subset(labels, 3, stream(1, "public_subset", 4), stratified=False)
    assert a.tolist() == b.tolist() and len(a) == 3  # the same stream gives the same subset at both ends
    assert public_subset(labels, 8, stream(1, "x"), stratified=True).tolist() == list(range(8))
    with pytest.raises(ValueError, match="size >= 1"):
        public_subset(labels, 0, stream(1, "x"), stratified=False)


def test_public_bytes():
    assert public_bytes(100, 64, labelled=True) == 4 * 100 * 65
    assert public_bytes(100, 64, labelled=False) == 25600


def test_data_public_is_carved_out_disjoint_from_private_and_test():
    from hierfl.assemble import build
    from tests.conftest import tiny

    built = build(tiny(data={"public": {"size": 40}}, protocol={"name": "fedmd"}))
    rows = built.public_rows
    assert rows is not None and rows.tolist() == list(range(200, 240))  # 240 training samples, public last
    private = np.concatenate(built.parts)
    assert sorted(private.tolist()) == list(range(200))  # every private sample once, none public
    plain = build(tiny())
    # the same 240 samples, re-ordered: the public ones are a seeded draw of 40 of them
    key = lambda x: x.tobytes()
    assert sorted(map(key, built.dataset.x_train)) == sorted(map(key, plain.dataset.x_train))
    assert built.dataset.x_test.tobytes() == plain.dataset.x_test.tobytes()


def test_a_public_split_that_leaves_no_private_data_is_refused(tmp_path, capsys):
    from tests.badinput import assert_refused
    from tests.conftest import TINY

    fedmd = {**TINY, "protocol": {"name": "fedmd"}}
    assert_refused(tmp_path, capsys, {**fedmd, "data": {**TINY["data"], "public": {"size": 240}}}, "data.public.size")
    assert_refused(tmp_path, capsys, {**fedmd, "data": {**TINY["data"], "public": {"size": 10, "placement": "cloud"}}},
                   "data.public.placement")
    # a public split no protocol uses is refused, naming the protocols that use one
    assert_refused(tmp_path, capsys, {**TINY, "data": {**TINY["data"], "public": {"size": 10}}}, "data.public")
