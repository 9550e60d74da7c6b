"""The `gaussian_sizes` partitioner (FedCH INFOCOM'21's IID labels with Gaussian-skewed sizes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.data import DataError, Dataset, GaussianSizesConfig
from hierfl.config.errors import ConfigError
from hierfl.scenario import validate_raw

PROPS = settings(max_examples=40, deadline=None, derandomize=True)


def labelled(n: int, num_classes: int = 10, seed: int = 0) -> Dataset:
    labels = np.random.default_rng(seed).integers(0, num_classes, n)
    return Dataset(np.zeros((n, 1), np.float32), labels.astype(np.int64), np.zeros((1, 1), np.float32),
                   np.zeros(1, np.int64), num_classes, (1,))


@PROPS
@given(n=st.integers(3, 400), data=st.data(), seed=st.integers(0, 2**32 - 1),
       sigma=st.floats(0.0, 3.0), min_size=st.integers(1, 3))
def test_covers_every_index_once_with_min_size(n: int, data: st.DataObject, seed: int, sigma: float,
                                               min_size: int) -> None:
    devices = data.draw(st.integers(1, n // min_size))
    parts = GaussianSizesConfig(sigma=sigma, min_size=min_size).split(labelled(n), devices,
                                                                      np.random.default_rng(seed))
    assert len(parts) == devices and all(p.dtype == np.int64 for p in parts)
    assert min(len(p) for p in parts) >= min_size
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_sizes_follow_the_drawn_gaussian_shares() -> None:
    """Hand-check: the sizes are min_size + the largest-remainder split of the clipped N(1, σ²) draw."""
    n, devices, sigma = 1000, 7, 0.5
    parts = GaussianSizesConfig(sigma=sigma, min_size=10).split(labelled(n), devices, np.random.default_rng(3))
    share = np.maximum(np.random.default_rng(3).normal(1.0, sigma, devices), 0.05)
    exact = (n - 70) * share / share.sum()
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == n
    assert np.all(np.abs(sizes - 10 - exact) < 1.0)        # every size within one sample of its exact share
    assert np.argmax(sizes) == np.argmax(share) and np.argmin(sizes) == np.argmin(share)


def test_sigma_zero_is_an_equal_split_and_sigma_skews() -> None:
    ds = labelled(1200)
    equal = GaussianSizesConfig(sigma=0.0).split(ds, 12, np.random.default_rng(1))
    assert sorted(len(p) for p in equal) == [100] * 12
    skewed = [len(p) for p in GaussianSizesConfig(sigma=0.8).split(ds, 12, np.random.default_rng(1))]
    assert np.std(skewed) / np.mean(skewed) > 0.3
    # labels stay IID: a large device's label histogram is close to the global one
    big = labelled(50_000)
    parts = GaussianSizesConfig(sigma=0.5).split(big, 5, np.random.default_rng(2))
    glob = np.bincount(big.y_train, minlength=10) / len(big.y_train)
    for p in (p for p in parts if len(p) >= 5000):   # large parts: sampling noise below 0.02
        assert np.abs(np.bincount(big.y_train[p], minlength=10) / len(p) - glob).max() < 0.02


def test_deterministic() -> None:
    a = GaussianSizesConfig().split(labelled(500), 9, np.random.default_rng(7))
    b = GaussianSizesConfig().split(labelled(500), 9, np.random.default_rng(7))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_too_large_min_size_names_the_key() -> None:
    with pytest.raises(DataError, match="min_size 20 x 10 devices = 200 exceeds the 100"):
        GaussianSizesConfig(min_size=20).split(labelled(100), 10, np.random.default_rng(0))


@pytest.mark.parametrize("bad, key", [({"sigma": -1}, "sigma"), ({"floor": 0}, "floor"), ({"floor": 2}, "floor")])
def test_bad_config_is_a_key_path_error(bad: dict, key: str) -> None:
    doc = {"name": "x", "data": {"dataset": {"name": "blobs"}, "partition": {"name": "gaussian_sizes", **bad}},
           "model": {"name": "logreg"}, "devices": {"count": 4}, "protocol": {"name": "fedavg"},
           "stop": {"rounds": 1}}
    with pytest.raises(ConfigError) as err:
        validate_raw(doc)
    assert f"data.partition.gaussian_sizes.{key}" in str(err.value) or f"data.partition.{key}" in str(err.value)
