"""Dataset generators: blobs, Synthetic(α, β) of FedProx, teacher; config validation; DataError."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from hierfl.data import (
    DATASETS,
    BlobsConfig,
    DataError,
    Dataset,
    SyntheticConfig,
    SyntheticUsers,
    TeacherConfig,
    generate_synthetic,
)


def assert_same(a: Dataset, b: Dataset) -> None:
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def assert_well_formed(ds: Dataset) -> None:
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert ds.y_train.min() >= 0 and ds.y_train.max() < ds.num_classes
    assert int(np.prod(ds.input_shape)) == ds.x_train.shape[1] == ds.x_test.shape[1]


def test_registry_names() -> None:
    assert all(DATASETS.get(n).model_fields["name"].default == n for n in DATASETS.names())
    assert DATASETS.get("synthetic") is SyntheticConfig


def test_data_error_keeps_key_and_message() -> None:
    err = DataError("partition.min_require_size", "too large")
    assert isinstance(err, ValueError)
    assert str(err) == "partition.min_require_size: too large"
    assert err.key == "partition.min_require_size" and err.message == "too large"


def test_dataset_rejects_inconsistent_shapes() -> None:
    x, y = np.zeros((4, 6), np.float32), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="input_shape"):
        Dataset(x, y, x, y, 2, (5,))
    with pytest.raises(ValueError, match="train"):
        Dataset(x, y[:3], x, y, 2, (6,))


# ---------------------------------------------------------------- blobs


def test_blobs_nearest_centroid_separates_classes() -> None:
    ds = BlobsConfig(separation=3.0, num_features=20).build(10, np.random.default_rng(0))
    assert_well_formed(ds)
    assert ds.x_train.shape == (10000, 20) and ds.x_test.shape == (2000, 20)
    assert ds.input_shape == (20,) and ds.num_classes == 10 and ds.natural_groups is None
    centroids = np.stack([ds.x_train[ds.y_train == k].mean(axis=0) for k in range(10)])
    dists = ((ds.x_test[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    accuracy = float(np.mean(dists.argmin(axis=1) == ds.y_test))
    assert accuracy > 0.9


def test_blobs_labels_roughly_uniform_and_noise_unit_variance() -> None:
    ds = BlobsConfig(num_samples=20000, num_classes=4).build(1, np.random.default_rng(1))
    counts = np.bincount(ds.y_train, minlength=4)
    assert np.all(np.abs(counts / 20000 - 0.25) < 0.02)
    within = ds.x_train[ds.y_train == 0]
    assert abs(float(within.var(axis=0).mean()) - 1.0) < 0.05


def test_blobs_shape() -> None:
    cfg = BlobsConfig(shape=[1, 28, 28], num_samples=50, test_samples=10)
    assert cfg.num_features == 784
    ds = cfg.build(1, np.random.default_rng(0))
    assert ds.input_shape == (1, 28, 28)
    assert ds.x_train.shape == (50, 784)
    assert BlobsConfig(shape=[1, 28, 28], num_features=784).num_features == 784
    # A dumped config validates again (num_features is filled in from shape).
    assert BlobsConfig.model_validate(cfg.model_dump()) == cfg


def test_blobs_validation() -> None:
    with pytest.raises(ValidationError, match="prod\\(shape\\) = 784"):
        BlobsConfig(shape=[1, 28, 28], num_features=100)
    with pytest.raises(ValidationError):
        BlobsConfig(num_classes=1)
    with pytest.raises(ValidationError):
        BlobsConfig(separation=0.0)
    with pytest.raises(ValidationError):
        BlobsConfig(shape=[1, 0, 28])
    with pytest.raises(ValidationError):
        BlobsConfig(num_sample=10)  # type: ignore[call-arg]


def test_blobs_deterministic() -> None:
    cfg = BlobsConfig(num_samples=200, test_samples=50)
    assert_same(cfg.build(1, np.random.default_rng(5)), cfg.build(1, np.random.default_rng(5)))
    other = cfg.build(1, np.random.default_rng(6))
    assert not np.array_equal(cfg.build(1, np.random.default_rng(5)).x_train, other.x_train)


# ---------------------------------------------------------------- synthetic


def test_synthetic_sizes_follow_lognormal_and_split_90_10() -> None:
    seed, users = 11, 30
    ds = SyntheticConfig().build(users, np.random.default_rng(seed))
    assert_well_formed(ds)
    # The first draw of the stream is the per-user sample count.
    n_k = np.random.default_rng(seed).lognormal(4, 2, users).astype(np.int64) + 50
    assert n_k.min() >= 50
    n_train = (0.9 * n_k).astype(np.int64)
    assert ds.natural_groups is not None and len(ds.natural_groups) == users
    np.testing.assert_array_equal([len(g) for g in ds.natural_groups], n_train)
    assert len(ds.y_train) == n_train.sum()
    assert len(ds.y_test) == (n_k - n_train).sum()
    assert ds.x_train.shape[1] == 60 and ds.input_shape == (60,) and ds.num_classes == 10
    np.testing.assert_array_equal(np.concatenate(ds.natural_groups), np.arange(len(ds.y_train)))


def replica_synthetic(seed: int, users: int, alpha: float, beta: float) -> tuple[list[np.ndarray], ...]:
    """The reference generator's loops, step by step, in the documented draw order."""
    rng = np.random.default_rng(seed)
    n_k = rng.lognormal(4, 2, users).astype(int) + 50
    mean_w = rng.normal(0, alpha, users)
    big_b = rng.normal(0, beta, users)
    mean_x = np.zeros((users, 60))
    for i in range(users):
        mean_x[i] = rng.normal(big_b[i], 1, 60)
    cov_diag = np.array([(j + 1) ** -1.2 for j in range(60)])
    xs, ys, ws, bs = [], [], [], []
    for i in range(users):
        w = rng.normal(mean_w[i], 1, (60, 10))
        b = rng.normal(mean_w[i], 1, 10)
        x = (mean_x[i] + rng.standard_normal((n_k[i], 60)) * np.sqrt(cov_diag)).astype(np.float32)
        ys.append(np.array([np.argmax(row.astype(np.float64) @ w + b) for row in x]))
        xs.append(x)
        ws.append(w)
        bs.append(b)
    return xs, ys, ws, bs


def test_synthetic_matches_step_by_step_replica() -> None:
    raw = generate_synthetic(6, 0.5, 0.5, False, 60, 10, np.random.default_rng(17))
    xs, ys, ws, bs = replica_synthetic(17, 6, 0.5, 0.5)
    for k in range(6):
        np.testing.assert_array_equal(raw.w[k], ws[k])
        np.testing.assert_array_equal(raw.b[k], bs[k])
        np.testing.assert_array_equal(raw.x[k], xs[k])  # bit-identical
        np.testing.assert_array_equal(raw.y[k], ys[k])


def test_synthetic_labels_are_argmax_of_each_users_model() -> None:
    seed, users = 3, 8
    raw = generate_synthetic(users, 1.0, 1.0, False, 60, 10, np.random.default_rng(seed))
    ds = SyntheticConfig(num_users=users).build(users, np.random.default_rng(seed))
    assert ds.natural_groups is not None
    for k in range(users):
        x, y = ds.x_train[ds.natural_groups[k]], ds.y_train[ds.natural_groups[k]]
        recomputed = np.argmax(x.astype(np.float64) @ raw.w[k] + raw.b[k], axis=1)
        np.testing.assert_array_equal(recomputed, y)
        # The train part is a subset of the user's raw samples.
        assert len(y) == int(0.9 * len(raw.y[k]))
    # Per-user models differ in the non-IID variant.
    assert not np.allclose(raw.w[0], raw.w[1])


def test_synthetic_iid_uses_one_shared_model() -> None:
    raw = generate_synthetic(5, 1.0, 1.0, True, 60, 10, np.random.default_rng(0))
    for k in range(1, 5):
        np.testing.assert_array_equal(raw.w[k], raw.w[0])
        np.testing.assert_array_equal(raw.b[k], raw.b[0])
    ds = SyntheticConfig(iid=True, num_users=5).build(5, np.random.default_rng(0))
    logits = ds.x_train.astype(np.float64) @ raw.w[0] + raw.b[0]
    np.testing.assert_array_equal(np.argmax(logits, axis=1), ds.y_train)
    # v_k = 0: every user's inputs are centred at the origin.
    assert np.abs(ds.x_train.mean(axis=0)).max() < 0.15


def test_synthetic_feature_covariance_is_j_pow_minus_1_2() -> None:
    # Σ = diag(j^-1.2): variance ≈ 1 for j = 1 and ≈ 0.0074 for j = 60 (IID variant: v_k = 0).
    raw = generate_synthetic(40, 0.0, 0.0, True, 60, 10, np.random.default_rng(2))
    var = np.concatenate(raw.x).astype(np.float64).var(axis=0)
    expected = np.arange(1, 61, dtype=np.float64) ** -1.2
    np.testing.assert_allclose(var, expected, rtol=0.15)


def test_synthetic_beta_moves_user_means() -> None:
    same = generate_synthetic(10, 0.0, 0.0, False, 60, 10, np.random.default_rng(4))
    spread = generate_synthetic(10, 0.0, 5.0, False, 60, 10, np.random.default_rng(4))

    def spread_of_means(raw: SyntheticUsers) -> float:
        means = np.stack([x.mean(axis=0) for x in raw.x])
        return float(means.mean(axis=1).std())

    # v_k ~ N(B_k, 1) with B_k ~ N(0, beta): the per-user average feature tracks B_k.
    assert spread_of_means(spread) > 2.0 > spread_of_means(same)


def test_synthetic_num_users_overrides_devices_and_determinism() -> None:
    cfg = SyntheticConfig(alpha=0.5, beta=0.5, num_users=7)
    a = cfg.build(100, np.random.default_rng(9))
    assert a.natural_groups is not None and len(a.natural_groups) == 7
    assert_same(a, cfg.build(100, np.random.default_rng(9)))
    b = cfg.build(100, np.random.default_rng(10))
    assert a.x_train.shape != b.x_train.shape or not np.array_equal(a.x_train, b.x_train)


def test_synthetic_validation() -> None:
    with pytest.raises(ValidationError):
        SyntheticConfig(alpha=-1.0)
    with pytest.raises(ValidationError):
        SyntheticConfig(train_fraction=1.0)
    with pytest.raises(ValidationError):
        SyntheticConfig(num_users=0)
    with pytest.raises(ValidationError):
        SyntheticConfig(num_classes=1)


# ---------------------------------------------------------------- teacher


def test_teacher_labels_are_argmax_of_teacher() -> None:
    cfg = TeacherConfig(num_samples=500, test_samples=100, num_features=30, num_classes=5)
    ds = cfg.build(1, np.random.default_rng(21))
    assert_well_formed(ds)
    # Replica of the documented draw order: T, x_train, x_test (float32).
    rng = np.random.default_rng(21)
    teacher = rng.standard_normal((30, 5), dtype=np.float32)
    x_train = rng.standard_normal((500, 30), dtype=np.float32)
    x_test = rng.standard_normal((100, 30), dtype=np.float32)
    np.testing.assert_array_equal(ds.x_train, x_train)
    np.testing.assert_array_equal(ds.x_test, x_test)
    np.testing.assert_array_equal(ds.y_train, np.argmax(x_train.astype(np.float64) @ teacher.astype(np.float64), axis=1))
    np.testing.assert_array_equal(ds.y_test, np.argmax(x_test.astype(np.float64) @ teacher.astype(np.float64), axis=1))
    # Every class occurs: the task is not degenerate.
    assert np.bincount(ds.y_train, minlength=5).min() > 50


def test_teacher_defaults_shape() -> None:
    cfg = TeacherConfig(num_samples=100, test_samples=20)
    ds = cfg.build(1, np.random.default_rng(0))
    assert ds.x_train.shape == (100, 784) and ds.input_shape == (784,) and ds.num_classes == 10
    assert_same(ds, cfg.build(1, np.random.default_rng(0)))
