"""In-memory datasets generated from a seed: Gaussian blobs, Synthetic(α, β) and a teacher task.

Every generator is pure numpy and takes an explicit ``np.random.Generator``; the same
generator state always yields bit-identical arrays, on every machine: labels of linear
models (teacher, Synthetic) come from float64 logits summed feature by feature in a fixed
order with elementwise operations (:func:`_linear_argmax`), never from BLAS, whose result
depends on the kernel OpenBLAS picks for the CPU; other float steps are exactly rounded
(no SIMD ``np.power``/``np.exp``/``np.log``). Features are stored flattened as ``float32``
(``x.reshape(n, *input_shape)`` recovers the per-sample shape), labels as ``int64``.

References
----------
Synthetic(α, β): T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar, V. Smith,
"Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv 1812.06127;
reference generator (the paper's code, ``data/synthetic_*/generate_synthetic.py``) and
``data/synthetic_iid/generate_iid.py``. See docs/explanation/algorithms.md §6.3.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

__all__ = [
    "DATASETS",
    "BlobsConfig",
    "DataError",
    "Dataset",
    "DatasetConfig",
    "DigitsConfig",
    "DigitsDomainsConfig",
    "SyntheticConfig",
    "SyntheticUsers",
    "TeacherConfig",
    "generate_synthetic",
]

DATASETS: Registry = Registry("dataset")


class DataError(ValueError):
    """Bad data configuration; ``key`` is the path under the scenario's ``data:`` section.

    Parameters
    ----------
    key
        Dotted key path, e.g. ``"partition.min_require_size"``.
    message
        What is wrong and what to change.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True, eq=False)
class Dataset:
    """A generated dataset: flattened float32 features, int64 labels, optional natural user split.

    Attributes
    ----------
    x_train, y_train
        Training features ``(n, d)`` and labels ``(n,)``.
    x_test, y_test
        Test features ``(m, d)`` and labels ``(m,)``.
    num_classes
        Labels lie in ``[0, num_classes)``.
    input_shape
        Per-sample shape before flattening; ``prod(input_shape) == d``.
    natural_groups
        For datasets with a natural per-user split: one int64 index array into ``x_train`` per user.
    name
        Registered name of the generator (used in error messages), if known.
    vocab_size
        For token datasets: features are integer indices in ``[0, vocab_size)`` stored as float32.
    domains
        For datasets drawn from several source domains (``digits_domains``): the domains' names.
    train_domain, test_domain
        Each training / test sample's domain (int64 indices into ``domains``); the test samples of
        one domain are contiguous, in the order of ``domains``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    natural_groups: tuple[np.ndarray, ...] | None = None
    name: str | None = None
    vocab_size: int | None = None  # token datasets (features are indices into a vocabulary), e.g. shakespeare
    domains: tuple[str, ...] | None = None  # domain-heterogeneous datasets: the source domains' names
    train_domain: np.ndarray | None = None
    test_domain: np.ndarray | None = None

    def __post_init__(self) -> None:
        for split, x, y in (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test)):
            if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"{split}: need x of shape (n, d) and y of shape (n,), got {x.shape} and {y.shape}"
                )
        d = self.x_train.shape[1]
        if self.x_test.shape[1] != d or math.prod(self.input_shape) != d:
            raise ValueError(
                f"feature count mismatch: x_train has {d}, x_test has {self.x_test.shape[1]}, "
                f"input_shape {self.input_shape} has {math.prod(self.input_shape)}"
            )

    def test_ranges(self) -> tuple[tuple[int, int], ...] | None:
        """Each domain's ``[start, stop)`` rows of the test set (None without domains)."""
        if self.domains is None or self.test_domain is None:
            return None
        bounds = np.searchsorted(self.test_domain, np.arange(len(self.domains) + 1))
        return tuple((int(bounds[k]), int(bounds[k + 1])) for k in range(len(self.domains)))

    @property
    def num_features(self) -> int:
        """Flattened feature count ``d``."""
        return int(self.x_train.shape[1])


class DatasetConfig(ConfigModel):
    """Base class of dataset configs: ``build`` generates the arrays."""

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Generate the dataset; ``num_devices`` sizes datasets with a natural per-user split."""
        raise NotImplementedError


@DATASETS.register
class BlobsConfig(DatasetConfig):
    """Well-separated isotropic Gaussian classes (quickstart workload).

    Class centres are drawn ``c_k ~ N(0, separation² I)``; a sample of class ``k`` is
    ``c_k + N(0, I)``; labels are uniform over classes. Train and test share the centres.
    Draw order: centres ``(C, d)``, train labels, train noise, test labels, test noise.
    """

    name: Literal["blobs"] = "blobs"
    num_samples: PositiveInt = Field(10000, description="training samples")
    test_samples: PositiveInt = Field(2000, description="test samples")
    num_features: PositiveInt = Field(
        20, description="flattened feature count (= prod(shape) if shape is given)"
    )
    num_classes: int = Field(10, ge=2, description="number of classes")
    separation: PositiveFloat = Field(3.0, description="std of the class centres around the origin")
    shape: list[PositiveInt] | None = Field(
        None, description="optional per-sample shape, e.g. [1, 28, 28] for a CNN; prod(shape) features"
    )

    @model_validator(mode="before")
    @classmethod
    def _features_from_shape(cls, data: Any) -> Any:
        # Fill num_features from shape so a dumped config round-trips through validation.
        if isinstance(data, dict) and "num_features" not in data:
            shape = data.get("shape")
            positive_ints = isinstance(shape, (list, tuple)) and all(isinstance(s, int) and s > 0 for s in shape)
            if shape and positive_ints:
                data = {**data, "num_features": math.prod(shape)}
        return data

    @model_validator(mode="after")
    def _shape_matches_features(self) -> BlobsConfig:
        if self.shape is not None and math.prod(self.shape) != self.num_features:
            raise ValueError(
                f"num_features ({self.num_features}) must equal prod(shape) = {math.prod(self.shape)} "
                f"when shape {self.shape} is given; omit num_features"
            )
        return self

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Generate train and test blobs (``num_devices`` is unused)."""
        d, c = self.num_features, self.num_classes
        centres = rng.standard_normal((c, d), dtype=np.float32) * np.float32(self.separation)

        def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
            y = rng.integers(0, c, size=n, dtype=np.int64)
            x = rng.standard_normal((n, d), dtype=np.float32)
            # In blocks: a full (n, d) gather temporary doubles peak memory and time.
            for start in range(0, n, 1024):
                x[start : start + 1024] += centres[y[start : start + 1024]]
            return x, y

        x_train, y_train = draw(self.num_samples)
        x_test, y_test = draw(self.test_samples)
        shape = tuple(self.shape) if self.shape is not None else (d,)
        return Dataset(x_train, y_train, x_test, y_test, c, shape, name=self.name)


@dataclass(frozen=True, eq=False)
class SyntheticUsers:
    """Raw per-user output of :func:`generate_synthetic`, before the train/test split.

    Attributes
    ----------
    x
        Per user, features ``(n_k, d)`` as float32 (labels are computed from these exact values).
    y
        Per user, int64 labels ``argmax(x.astype(float64) @ w[k] + b[k])``, the logits summed
        feature by feature in float64 (:func:`_linear_argmax`).
    w, b
        Per-user label models ``(U, d, C)`` and ``(U, C)``; identical rows in the IID variant.
    """

    x: list[np.ndarray]
    y: list[np.ndarray]
    w: np.ndarray
    b: np.ndarray


def generate_synthetic(
    num_users: int,
    alpha: float,
    beta: float,
    iid: bool,
    dimension: int,
    num_classes: int,
    rng: np.random.Generator,
) -> SyntheticUsers:
    """Draw the Synthetic(α, β) users of Li et al. 2020, docs/explanation/algorithms.md §6.3.

    Follows the paper's code, ``generate_synthetic.py`` / ``generate_iid.py`` step by step,
    with ``rng`` in place of the global numpy state. Draw order:

    1. ``n_k = int(rng.lognormal(4, 2, U)) + 50``;
    2. non-IID: ``u = rng.normal(0, alpha, U)``, ``B = rng.normal(0, beta, U)``,
       ``v = rng.normal(B[:, None], 1, (U, d))`` (row k equals the reference's per-user draw);
       IID: one shared ``W = rng.normal(0, 1, (d, C))``, ``b = rng.normal(0, 1, C)``, ``v = 0``;
    3. per user k in order: non-IID ``W_k = rng.normal(u_k, 1, (d, C))``, ``b_k = rng.normal(u_k, 1, C)``;
       then ``x = v_k + rng.standard_normal((n_k, d)) * sqrt(diag Σ)`` with ``Σ = diag(j^-1.2)``.

    Step 3 samples ``N(v_k, Σ)`` directly from its diagonal instead of via
    ``multivariate_normal`` (same distribution, not the same bits). α and β are standard
    deviations, as in the reference code; the IID variant ignores them.
    """
    u_count, d, c = num_users, dimension, num_classes
    n_per_user = rng.lognormal(4.0, 2.0, u_count).astype(np.int64) + 50
    if iid:
        shared_w = rng.normal(0.0, 1.0, (d, c))
        shared_b = rng.normal(0.0, 1.0, c)
        mean_w = np.zeros(u_count)
        mean_x = np.zeros((u_count, d))
    else:
        mean_w = rng.normal(0.0, alpha, u_count)
        big_b = rng.normal(0.0, beta, u_count)
        mean_x = rng.normal(big_b[:, None], 1.0, (u_count, d))
    std_x = _power_law_std(d)

    w_all = np.empty((u_count, d, c))
    b_all = np.empty((u_count, c))
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for k in range(u_count):
        if iid:
            w_k, b_k = shared_w, shared_b
        else:
            w_k = rng.normal(mean_w[k], 1.0, (d, c))
            b_k = rng.normal(mean_w[k], 1.0, c)
        x = (mean_x[k] + rng.standard_normal((int(n_per_user[k]), d)) * std_x).astype(np.float32)
        # Labels from the stored float32 features, so they can be recomputed exactly.
        y = _linear_argmax(x, w_k, b_k)
        w_all[k], b_all[k] = w_k, b_k
        xs.append(x)
        ys.append(y)
    return SyntheticUsers(xs, ys, w_all, b_all)


@DATASETS.register
class SyntheticConfig(DatasetConfig):
    """Synthetic(α, β) of Li et al. 2020: per-user linear-softmax tasks, power-law sizes.

    Each user k gets ``n_k = int(LogNormal(4, 2)) + 50`` samples ``x ~ N(v_k, diag(j^-1.2))``
    labelled by its own model ``argmax(x W_k + b_k)``; α controls how much the models differ,
    β how much the inputs differ (see :func:`generate_synthetic` and docs/explanation/algorithms.md §6.3).
    Each user's samples are shuffled and split: the first ``int(train_fraction · n_k)`` go to
    training (one ``natural_groups`` entry per user), the rest to the common test set.

    References
    ----------
    T. Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020 (arXiv 1812.06127);
    generator of the paper's code, ``data/synthetic_*/generate_synthetic.py``.
    """

    name: Literal["synthetic"] = "synthetic"
    alpha: NonNegativeFloat = Field(1.0, description="std of the per-user model mean u_k (model skew)")
    beta: NonNegativeFloat = Field(1.0, description="std of the per-user input mean B_k (input skew)")
    iid: bool = Field(False, description="Synthetic-IID: one shared model, v_k = 0 (alpha, beta ignored)")
    num_users: PositiveInt | None = Field(None, description="number of users; default: devices.count")
    dimension: PositiveInt = Field(60, description="feature dimension d")
    num_classes: int = Field(10, ge=2, description="number of classes")
    train_fraction: float = Field(0.9, gt=0.0, lt=1.0, description="per-user share of samples for training")

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Generate the users, shuffle each, split train/test; ``num_users`` defaults to ``num_devices``."""
        num_users = self.num_users if self.num_users is not None else num_devices
        if num_users < 1:
            raise DataError("dataset.num_users", f"need at least one user, got {num_users}")
        users = generate_synthetic(
            num_users, self.alpha, self.beta, self.iid, self.dimension, self.num_classes, rng
        )
        x_tr, y_tr, x_te, y_te, groups = [], [], [], [], []
        offset = 0
        for x, y in zip(users.x, users.y):
            perm = rng.permutation(len(y))
            n_train = int(self.train_fraction * len(y))
            x_tr.append(x[perm[:n_train]])
            y_tr.append(y[perm[:n_train]])
            x_te.append(x[perm[n_train:]])
            y_te.append(y[perm[n_train:]])
            groups.append(np.arange(offset, offset + n_train, dtype=np.int64))
            offset += n_train
        return Dataset(
            np.concatenate(x_tr),
            np.concatenate(y_tr),
            np.concatenate(x_te),
            np.concatenate(y_te),
            self.num_classes,
            (self.dimension,),
            natural_groups=tuple(groups),
            name=self.name,
        )


@DATASETS.register
class TeacherConfig(DatasetConfig):
    """Benchmark workload: ``x ~ N(0, I)``, label ``argmax(x · T)`` for a random teacher ``T ~ N(0, 1)``.

    Draw order (all float32): ``T (d, C)``, ``x_train (n, d)``, ``x_test (m, d)``; labels are
    ``argmax(x @ T)`` with float64 logits summed feature by feature (:func:`_linear_argmax`,
    the same bits on every CPU), so the task is linearly separable.
    """

    name: Literal["teacher"] = "teacher"
    num_samples: PositiveInt = Field(60000, description="training samples")
    test_samples: PositiveInt = Field(10000, description="test samples")
    num_features: PositiveInt = Field(784, description="feature count d")
    num_classes: int = Field(10, ge=2, description="number of classes")

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Generate the teacher and the labelled samples (``num_devices`` is unused)."""
        d, c = self.num_features, self.num_classes
        teacher = rng.standard_normal((d, c), dtype=np.float32)
        x_train = rng.standard_normal((self.num_samples, d), dtype=np.float32)
        x_test = rng.standard_normal((self.test_samples, d), dtype=np.float32)
        y_train = _teacher_labels(x_train, teacher)
        y_test = _teacher_labels(x_test, teacher)
        return Dataset(x_train, y_train, x_test, y_test, c, (d,), name=self.name)


@DATASETS.register
class DigitsConfig(DatasetConfig):
    """Real handwritten digits that ship offline: scikit-learn's ``load_digits``.

    The UCI "Optical Recognition of Handwritten Digits" test set: 1,797 images of 8 x 8 pixels
    (counts 0–16 of a 4 x 4 downsampled 32 x 32 bitmap), 10 classes, about 180 per class. It
    ships inside the scikit-learn wheel, so no download is needed (scikit-learn is imported on
    build). Features are ``pixel / 16`` as float32 in ``[0, 1]``, ``input_shape = (1, 8, 8)`` so
    a CNN sees images. Split: one plain seeded permutation (not stratified) of all 1,797 samples;
    the first ``round(test_fraction · 1797)`` go to the test set, the rest, in that order, to
    training.

    References
    ----------
    E. Alpaydin, C. Kaynak, "Optical Recognition of Handwritten Digits", UCI Machine Learning
    Repository, 1998, doi:10.24432/C50P49.
    """

    name: Literal["digits"] = "digits"
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of the 1,797 images held out for testing")

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Load the images, scale to [0, 1], split by one permutation (``num_devices`` is unused)."""
        try:
            from sklearn.datasets import load_digits
        except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
            raise DataError("dataset.name", "the digits dataset needs scikit-learn (pip install scikit-learn)") from exc
        bunch = load_digits()
        # Pixel counts 0..16 divided by 16: exact in float32.
        x = (np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)).reshape(len(bunch.target), 64)
        y = np.asarray(bunch.target, dtype=np.int64)
        n = len(y)
        n_test = int(round(self.test_fraction * n))
        if not 0 < n_test < n:
            raise DataError("dataset.test_fraction", f"{self.test_fraction} leaves an empty train or test set of {n} images")
        perm = rng.permutation(n)
        test, train = perm[:n_test], perm[n_test:]
        return Dataset(
            np.ascontiguousarray(x[train]), y[train], np.ascontiguousarray(x[test]), y[test],
            10, (1, 8, 8), name=self.name,
        )


_LABEL_ROWS = 4096  # rows per block in _linear_argmax
_LABEL_FEATURES = 64  # features per transposed chunk in _linear_argmax (4096 x 64 float64: 2 MB)


def _linear_argmax(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``argmax(x @ w + b, axis=1)`` as int64, with the same bits on every machine.

    The logits are float64, accumulated feature by feature in a fixed order (features
    ``0, 1, …, d−1``, then the bias) with elementwise numpy multiply and add: each operation is
    IEEE correctly rounded whatever the SIMD width, so no BLAS kernel, summation tree or fused
    multiply-add can change a bit (a float32 x float32 product is even exact in float64).
    Ties go to the lowest class index. Rows are processed in blocks of :data:`_LABEL_ROWS`,
    features in transposed chunks of :data:`_LABEL_FEATURES`, so the work arrays stay near 3 MB.
    """
    n, d = x.shape
    c = w.shape[1]
    w64 = np.asarray(w, dtype=np.float64)
    b64 = None if b is None else np.asarray(b, dtype=np.float64)[:, None]
    rows = min(_LABEL_ROWS, max(n, 1))
    acc = np.empty((c, rows))
    tmp = np.empty((c, rows))
    chunk = np.empty((min(_LABEL_FEATURES, max(d, 1)), rows))
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, rows):
        m = min(rows, n - a)
        logits, prod = acc[:, :m], tmp[:, :m]
        logits[...] = 0.0
        for f in range(0, d, _LABEL_FEATURES):
            g = min(d, f + _LABEL_FEATURES)
            xt = chunk[: g - f, :m]
            xt[...] = x[a : a + m, f:g].T
            for j in range(f, g):
                np.multiply(w64[j][:, None], xt[j - f], out=prod)
                np.add(logits, prod, out=logits)
        if b64 is not None:
            np.add(logits, b64, out=logits)
        out[a : a + m] = np.argmax(logits, axis=0)
    return out


def _teacher_labels(x: np.ndarray, teacher: np.ndarray) -> np.ndarray:
    """``argmax(x @ teacher, axis=1)`` as int64, machine-independent (:func:`_linear_argmax`)."""
    return _linear_argmax(x, teacher)


def _power_law_std(d: int) -> np.ndarray:
    """``sqrt(j^-1.2) = j^-0.6`` for ``j = 1..d`` as float64, the same bits on every machine.

    Computed in decimal arithmetic (software, 40 digits) and rounded once to float64, instead
    of ``np.power``, whose vectorised paths may differ in the last bit between CPUs.
    """
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        exponent = decimal.Decimal("-0.6")
        return np.array([float(decimal.Decimal(j) ** exponent) for j in range(1, d + 1)], dtype=np.float64)


DIGIT_DOMAINS: tuple[str, ...] = ("plain", "shifted", "inverted", "noisy", "rotated")


def digit_domain(name: str, images: np.ndarray, rng: np.random.Generator, noise_std: float) -> np.ndarray:
    """``images`` (``(n, 64)`` in ``[0, 1]``, 8 x 8) as seen in domain ``name``.

    ``plain``: unchanged; ``shifted``: moved one pixel right and down (zeros enter) at 0.6 of the
    intensity; ``inverted``: ``1 − x``; ``noisy``: plus Gaussian noise of std ``noise_std``, clipped to
    ``[0, 1]`` (drawn from ``rng``); ``rotated``: turned by 90° counter-clockwise.
    """
    img = images.reshape(-1, 8, 8)
    if name == "plain":
        out = img
    elif name == "shifted":
        out = np.zeros_like(img)
        out[:, 1:, 1:] = img[:, :-1, :-1] * np.float32(0.6)
    elif name == "inverted":
        out = np.float32(1.0) - img
    elif name == "noisy":
        out = np.clip(img + rng.normal(0.0, noise_std, size=img.shape).astype(np.float32), 0.0, 1.0)
    elif name == "rotated":
        out = np.rot90(img, k=1, axes=(1, 2))
    else:
        raise DataError("dataset.domains", f"unknown digit domain {name!r}; allowed: {', '.join(DIGIT_DOMAINS)}")
    return np.ascontiguousarray(out, dtype=np.float32).reshape(-1, 64)


@DATASETS.register
class DigitsDomainsConfig(DatasetConfig):
    """Domain-heterogeneous digits: scikit-learn's ``load_digits`` seen through several named domains.

    A stand-in, built offline, for the Digits benchmark of heterogeneous-domain methods (MNIST,
    USPS, SVHN, SYN), whose images cannot be fetched here. The 1,797 images are split by one
    seeded permutation into test (``test_fraction``) and training images; the training images are cut
    into one disjoint, near-equal part per domain (each domain has its own images, as the real
    datasets do), each seen through its domain's transform (:func:`digit_domain`). Every domain's
    test set is the whole test split through that domain's transform, so the test set holds
    ``len(domains)`` blocks, one per domain, in order (``Dataset.test_ranges``). Pair it with
    ``partition: {name: domains}`` to give each device one domain.
    """

    name: Literal["digits_domains"] = "digits_domains"
    domains: list[Literal["plain", "shifted", "inverted", "noisy", "rotated"]] = Field(
        default_factory=lambda: ["plain", "shifted", "inverted", "noisy"], min_length=2,
        description="the source domains, each a transform of the digit images: plain, shifted (one pixel right "
                    "and down at 0.6 intensity), inverted (1 − x), noisy (Gaussian noise, clipped), rotated (90°); "
                    "design default: plain, shifted, inverted, noisy, standing in for MNIST, USPS, SVHN and SYN")
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of the 1,797 images held out for testing "
                                                                  "(each domain tests on all of them)")
    noise_std: PositiveFloat = Field(0.3, description="standard deviation of the noisy domain's Gaussian noise")

    @model_validator(mode="after")
    def _distinct(self) -> DigitsDomainsConfig:
        if len(set(self.domains)) != len(self.domains):
            raise ValueError(f"domains must be distinct, got {self.domains}")
        return self

    def build(self, num_devices: int, rng: np.random.Generator) -> Dataset:
        """Load, split, cut the training images by domain and transform (``num_devices`` is unused)."""
        plain = DigitsConfig(test_fraction=self.test_fraction).build(num_devices, rng)
        parts = np.array_split(np.arange(plain.y_train.size), len(self.domains))
        xs, ys, doms, xt, yt, dt = [], [], [], [], [], []
        for k, (name, rows) in enumerate(zip(self.domains, parts)):
            xs.append(digit_domain(name, plain.x_train[rows], rng, self.noise_std))
            ys.append(plain.y_train[rows])
            doms.append(np.full(rows.size, k, dtype=np.int64))
            xt.append(digit_domain(name, plain.x_test, rng, self.noise_std))
            yt.append(plain.y_test)
            dt.append(np.full(plain.y_test.size, k, dtype=np.int64))
        return Dataset(np.concatenate(xs), np.concatenate(ys), np.concatenate(xt), np.concatenate(yt), 10, (1, 8, 8),
                       name=self.name, domains=tuple(self.domains), train_domain=np.concatenate(doms),
                       test_domain=np.concatenate(dt))
