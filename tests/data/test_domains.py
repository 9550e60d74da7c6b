"""Domain-heterogeneous digits (``digits_domains``), the ``domains`` partition and the refusals around them."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tests.conftest import skip_unless_installed

skip_unless_installed("sklearn")

from hierfl.assemble import build
from hierfl.data import (
    DATASETS,
    PARTITIONERS,
    DigitsConfig,
    DigitsDomainsConfig,
    DomainsConfig,
)
from hierfl.data.datasets import DataError, digit_domain
from hierfl.scenario.loader import validate_raw
from tests.badinput import assert_refused
from tests.conftest import TINY


def test_each_domain_transform_by_hand():
    img = np.zeros((1, 64), dtype=np.float32)
    img[0, 0] = 1.0   # pixel (0, 0)
    img[0, 9] = 0.5   # pixel (1, 1)
    rng = np.random.default_rng(0)
    assert np.array_equal(digit_domain("plain", img, rng, 0.3), img)
    inv = digit_domain("inverted", img, rng, 0.3).reshape(8, 8)
    assert inv[0, 0] == 0.0 and inv[1, 1] == 0.5 and inv[7, 7] == 1.0
    sh = digit_domain("shifted", img, rng, 0.3).reshape(8, 8)  # one pixel right and down, at 0.6
    assert sh[1, 1] == pytest.approx(0.6) and sh[2, 2] == pytest.approx(0.3) and sh[0, 0] == 0.0 and sh.sum() == pytest.approx(0.9)
    rot = digit_domain("rotated", img, rng, 0.3).reshape(8, 8)  # 90° counter-clockwise: (r, c) → (7 − c, r)
    assert rot[7, 0] == 1.0 and rot[6, 1] == 0.5
    noisy = digit_domain("noisy", img, np.random.default_rng(1), 0.3)
    assert noisy.min() >= 0.0 and noisy.max() <= 1.0 and not np.array_equal(noisy, img)
    with pytest.raises(DataError, match="allowed: plain"):
        digit_domain("sepia", img, rng, 0.3)


def test_domains_dataset_structure():
    assert DATASETS.get("digits_domains") is DigitsDomainsConfig
    cfg = DigitsDomainsConfig(domains=["plain", "inverted", "rotated"])
    ds = cfg.build(4, np.random.default_rng(3))
    plain = DigitsConfig().build(4, np.random.default_rng(3))
    n_train, n_test = plain.y_train.size, plain.y_test.size
    assert ds.x_train.shape == (n_train, 64) and ds.x_test.shape == (3 * n_test, 64)
    assert ds.domains == ("plain", "inverted", "rotated")
    assert np.bincount(ds.train_domain).tolist() == [len(p) for p in np.array_split(np.arange(n_train), 3)]
    assert ds.test_ranges() == ((0, n_test), (n_test, 2 * n_test), (2 * n_test, 3 * n_test))
    # every domain tests on the whole test split, through its own transform; training images are disjoint
    assert np.array_equal(ds.x_test[:n_test], plain.x_test)
    assert np.array_equal(ds.x_test[n_test:2 * n_test], 1.0 - plain.x_test)
    assert np.array_equal(ds.y_test, np.tile(plain.y_test, 3))
    k = np.flatnonzero(ds.train_domain == 1)[0]
    assert np.array_equal(ds.x_train[k], 1.0 - plain.x_train[k])
    with pytest.raises(ValueError, match="distinct"):
        DigitsDomainsConfig(domains=["plain", "plain"])


def test_domains_partition_gives_each_device_one_domain():
    ds = DigitsDomainsConfig().build(6, np.random.default_rng(0))
    assert PARTITIONERS.get("domains") is DomainsConfig
    parts = DomainsConfig().split(ds, 6, np.random.default_rng(1))
    # device i draws from domain i mod 4; domains 0 and 1 are shared by two devices each, in halves
    assert [set(ds.train_domain[p].tolist()) for p in parts] == [{0}, {1}, {2}, {3}, {0}, {1}]
    assert len(parts[0]) + len(parts[4]) == int((ds.train_domain == 0).sum())
    assert len(set(np.concatenate(parts).tolist())) == sum(len(p) for p in parts)
    capped = DomainsConfig(samples_per_device=50).split(ds, 6, np.random.default_rng(1))
    assert [len(p) for p in capped] == [50] * 6
    plain = DigitsConfig().build(4, np.random.default_rng(0))
    with pytest.raises(DataError, match="no source domains"):
        DomainsConfig().split(plain, 4, np.random.default_rng(0))


def _raw():
    raw = copy.deepcopy(TINY)
    raw["data"] = {"dataset": {"name": "digits_domains", "domains": ["plain", "inverted"]},
                   "partition": {"name": "domains", "samples_per_device": 40},
                   "public": {"size": 100, "labelled": False}}
    raw["devices"]["count"] = 3
    raw["protocol"] = {"name": "fccl", "public_size": 40, "public_batch_size": 20, "pretrain_epochs": 1}
    del raw["training"]["lr"]  # fccl steps Adam at protocol.lr: a training.lr would be refused
    return raw


def test_the_world_knows_each_devices_domain_and_the_test_blocks():
    built = build(validate_raw(_raw()))
    assert built.world.device_domain.tolist() == [0, 1, 0]
    n = built.dataset.y_test.size // 2
    assert built.world.test_domains == ((0, n), (n, 2 * n))
    # the public split is carved out with each sample's domain kept alongside
    assert built.dataset.train_domain.size == built.dataset.y_train.size


def test_party_evaluation_reports_own_and_other_domain_accuracy(tmp_path):
    import json

    from hierfl.driver import run_scenario

    raw = _raw()
    raw["stop"] = {"rounds": 1}
    raw["training"] = {"epochs": 1, "batch_size": 20}
    out = tmp_path / "run"
    run_scenario(validate_raw(raw), out)
    final = [x for x in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if x["event"] == "eval"][-1]
    # with two domains of equal test size, the mean over domains is the mean of own and other
    assert final["accuracy"] == pytest.approx((final["own_domain_accuracy"] + final["other_domain_accuracy"]) / 2)
    assert 0.0 <= final["party_accuracy_min"] <= final["accuracy"] <= final["party_accuracy_max"] <= 1.0


def test_a_domains_partition_of_a_plain_dataset_is_refused(tmp_path, capsys):
    raw = copy.deepcopy(TINY)
    raw["data"]["partition"] = {"name": "domains"}
    assert_refused(tmp_path, capsys, raw, "data.partition.name")
