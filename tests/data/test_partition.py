"""Partitioners: coverage properties, label skew, shard structure, natural split, error messages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hierfl.data import (
    PARTITIONERS,
    BlobsConfig,
    DataError,
    Dataset,
    DirichletConfig,
    IIDConfig,
    NaturalConfig,
    ShardsConfig,
    SyntheticConfig,
    label_distribution,
)

PROPS = settings(max_examples=40, deadline=None, derandomize=True)


def labelled(labels: np.ndarray, num_classes: int, name: str | None = None) -> Dataset:
    """A dataset with the given training labels and one dummy feature."""
    n = len(labels)
    return Dataset(
        np.zeros((n, 1), np.float32),
        np.asarray(labels, dtype=np.int64),
        np.zeros((1, 1), np.float32),
        np.zeros(1, np.int64),
        num_classes,
        (1,),
        name=name,
    )


def random_labels(n: int, num_classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_classes, n)


def assert_exact_cover(parts: list[np.ndarray], n: int, num_devices: int) -> None:
    assert len(parts) == num_devices
    assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_registry_names() -> None:
    assert all(PARTITIONERS.get(n).model_fields["name"].default == n for n in PARTITIONERS.names())
    assert PARTITIONERS.get("dirichlet") is DirichletConfig


@PROPS
@given(n=st.integers(1, 400), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_iid_covers_every_index_once(n: int, data: st.DataObject, seed: int) -> None:
    num_devices = data.draw(st.integers(1, n))
    parts = IIDConfig().split(labelled(np.zeros(n), 1), num_devices, np.random.default_rng(seed))
    assert_exact_cover(parts, n, num_devices)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@PROPS
@given(
    n=st.integers(50, 600),
    num_classes=st.integers(2, 10),
    alpha=st.floats(0.3, 100.0),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_covers_every_index_once(
    n: int, num_classes: int, alpha: float, data: st.DataObject, seed: int
) -> None:
    num_devices = data.draw(st.integers(1, min(15, n // 10)))
    cfg = DirichletConfig(alpha=alpha, min_require_size=2)
    ds = labelled(random_labels(n, num_classes, seed), num_classes)
    parts = cfg.split(ds, num_devices, np.random.default_rng(seed))
    assert_exact_cover(parts, n, num_devices)
    assert min(len(p) for p in parts) >= 2


def test_dirichlet_respects_min_require_size_and_balancing() -> None:
    y = random_labels(6000, 10, 3)
    cfg = DirichletConfig(alpha=0.1, min_require_size=50)
    parts = cfg.split(labelled(y, 10), 20, np.random.default_rng(3))
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 50
    # Balancing trick: a device stops receiving once it holds >= n/P, so it can overshoot
    # the cap by at most one class's worth of samples.
    assert sizes.max() < 6000 / 20 + np.bincount(y).max()


@pytest.mark.parametrize("seed", range(8))
def test_dirichlet_tiny_alpha_balances_whole_classes(seed: int) -> None:
    # alpha -> 0: each class goes whole to one device; a device holding n/P = 200 gets no more,
    # and when the draw's only mass lands on a full device, p falls back to the open one.
    y = np.repeat(np.arange(4), 100)
    cfg = DirichletConfig(alpha=1e-6, min_require_size=1)
    parts = cfg.split(labelled(y, 4), 2, np.random.default_rng(seed))
    counts = sorted(np.bincount(y[p], minlength=4).tolist() for p in parts)
    assert [len(p) for p in parts] == [200, 200]
    assert all(sorted(c) == [0, 0, 100, 100] for c in counts)


def test_dirichlet_shuffles_each_client_list() -> None:
    y = np.repeat(np.arange(4), 250)
    parts = DirichletConfig(alpha=1.0).split(labelled(y, 4), 5, np.random.default_rng(0))
    # Without the final shuffle every list would be sorted by class, then by index order.
    assert any(not np.all(np.diff(y[p]) >= 0) for p in parts)


def test_dirichlet_empty_classes_fall_back_to_uniform() -> None:
    # Classes 2..4 are empty and every device is already full: p would be all zero.
    y = random_labels(200, 2, 1)
    parts = DirichletConfig(alpha=0.5, min_require_size=5).split(labelled(y, 5), 4, np.random.default_rng(1))
    assert_exact_cover(parts, 200, 4)


def mean_tv_to_global(alpha: float, seeds: range) -> float:
    tvs = []
    for seed in seeds:
        y = random_labels(6000, 10, seed)
        parts = DirichletConfig(alpha=alpha).split(labelled(y, 10), 20, np.random.default_rng(seed))
        dist = label_distribution(y, parts, 10)
        global_dist = np.bincount(y, minlength=10) / len(y)
        tvs.append(0.5 * np.abs(dist - global_dist).sum(axis=1).mean())
    return float(np.mean(tvs))


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    tv = {a: mean_tv_to_global(a, range(4)) for a in (0.1, 1.0, 100.0)}
    assert tv[0.1] > tv[1.0] > tv[100.0]
    assert tv[0.1] > 0.6  # extreme skew: most of a device's mass on a few labels
    assert 0.25 < tv[1.0] < 0.5
    assert tv[100.0] < 0.06  # close to IID


def test_dirichlet_is_deterministic() -> None:
    ds = labelled(random_labels(1000, 10, 0), 10)
    a = DirichletConfig().split(ds, 10, np.random.default_rng(7))
    b = DirichletConfig().split(ds, 10, np.random.default_rng(7))
    c = DirichletConfig().split(ds, 10, np.random.default_rng(8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a, c))


def test_dirichlet_min_require_size_too_large() -> None:
    with pytest.raises(DataError) as info:
        DirichletConfig(min_require_size=10).split(labelled(np.zeros(50), 1), 10, np.random.default_rng(0))
    assert info.value.key == "partition.min_require_size"
    assert str(info.value).startswith("partition.min_require_size: ")
    assert "100" in str(info.value) and "50" in str(info.value)


def test_dirichlet_gives_up_after_max_retries() -> None:
    cfg = DirichletConfig(alpha=0.001, min_require_size=15, max_retries=3)
    with pytest.raises(DataError) as info:
        cfg.split(labelled(random_labels(1000, 10, 0), 10), 50, np.random.default_rng(0))
    assert info.value.key == "partition.alpha"
    assert "after 3 draws" in str(info.value) and "raise alpha" in str(info.value)


@pytest.mark.parametrize("cfg", [IIDConfig(), DirichletConfig(), ShardsConfig()])
def test_more_devices_than_samples(cfg: IIDConfig | DirichletConfig | ShardsConfig) -> None:
    with pytest.raises(DataError, match=r"^partition: 500 devices but only 300 training samples$"):
        cfg.split(labelled(np.zeros(300), 1), 500, np.random.default_rng(0))


def test_partition_configs_validate() -> None:
    with pytest.raises(ValidationError):
        DirichletConfig(alpha=0.0)
    with pytest.raises(ValidationError):
        DirichletConfig(alpah=0.1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ShardsConfig(shards_per_client=0)


@PROPS
@given(n=st.integers(4, 500), spc=st.integers(1, 4), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_shards_structure(n: int, spc: int, data: st.DataObject, seed: int) -> None:
    num_devices = data.draw(st.integers(1, n // spc))
    y = random_labels(n, 5, seed)
    cfg = ShardsConfig(shards_per_client=spc)
    parts = cfg.split(labelled(y, 5), num_devices, np.random.default_rng(seed))
    shard_size = n // (num_devices * spc)
    assert len(parts) == num_devices
    assert all(p.dtype == np.int64 and len(p) == spc * shard_size for p in parts)
    kept = np.concatenate(parts)
    assert len(np.unique(kept)) == len(kept)  # disjoint
    order = np.argsort(y, kind="stable")
    np.testing.assert_array_equal(np.sort(kept), np.sort(order[: num_devices * spc * shard_size]))


def test_shards_drop_remainder_at_end_of_sorted_order() -> None:
    y = np.array([2, 0, 1, 0, 2, 1, 0])
    # Stable sort by label: [1, 3, 6, 2, 5, 0, 4]; 3 shards of 7 // 3 = 2; index 4 is dropped.
    parts = ShardsConfig(shards_per_client=1).split(labelled(y, 3), 3, np.random.default_rng(0))
    assert sorted(p.tolist() for p in parts) == [[1, 3], [5, 0], [6, 2]]


def test_shards_two_per_client_gives_few_labels() -> None:
    y = random_labels(6000, 10, 0)  # ~600 per class, shards of 30
    parts = ShardsConfig(shards_per_client=2).split(labelled(y, 10), 100, np.random.default_rng(0))
    labels_per_client = np.array([len(np.unique(y[p])) for p in parts])
    assert np.mean(labels_per_client <= 2) >= 0.8
    assert labels_per_client.max() <= 4  # each shard of 30 spans at most two classes


def test_shards_zero_shard_size() -> None:
    with pytest.raises(DataError) as info:
        ShardsConfig(shards_per_client=3).split(labelled(np.zeros(10), 1), 5, np.random.default_rng(0))
    assert info.value.key == "partition.shards_per_client"
    assert "15 shards" in str(info.value) and "10 training samples" in str(info.value)


def test_natural_returns_the_groups() -> None:
    ds = SyntheticConfig(num_users=6).build(6, np.random.default_rng(0))
    parts = NaturalConfig().split(ds, 6, np.random.default_rng(0))
    assert ds.natural_groups is not None
    assert len(parts) == 6
    for part, group in zip(parts, ds.natural_groups):
        np.testing.assert_array_equal(part, group)
    assert_exact_cover(parts, len(ds.y_train), 6)


def test_natural_without_groups() -> None:
    ds = BlobsConfig(num_samples=100, test_samples=10).build(4, np.random.default_rng(0))
    with pytest.raises(DataError) as info:
        NaturalConfig().split(ds, 4, np.random.default_rng(0))
    assert info.value.key == "partition.name"
    assert str(info.value) == (
        "partition.name: dataset 'blobs' has no natural per-user split; use iid, dirichlet or shards"
    )


def test_natural_count_mismatch() -> None:
    ds = SyntheticConfig(num_users=5).build(8, np.random.default_rng(0))
    with pytest.raises(DataError) as info:
        NaturalConfig().split(ds, 8, np.random.default_rng(0))
    msg = str(info.value)
    assert msg.startswith("partition.name: ")
    assert "5 natural users" in msg and "8 devices" in msg and "num_users defaults to devices.count" in msg


def test_label_distribution_hand_computed() -> None:
    y = np.array([0, 0, 1, 2, 2, 2])
    dist = label_distribution(y, [np.array([0, 1, 2]), np.array([3, 4]), np.array([5, 2])], 4)
    expected = np.array(
        [
            [2 / 3, 1 / 3, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.5, 0.5, 0.0],
        ]
    )
    np.testing.assert_allclose(dist, expected)
    with pytest.raises(ValueError, match="part 1 is empty"):
        label_distribution(y, [np.array([0]), np.array([], dtype=np.int64)], 3)
