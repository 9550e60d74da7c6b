"""Split a dataset's training samples among devices: IID, Gaussian-skewed sizes, Dirichlet label skew, shards, natural users.

Each partitioner returns exactly ``num_devices`` non-empty int64 index arrays into
``dataset.x_train``. All randomness comes from the ``np.random.Generator`` passed in.

References
----------
Dirichlet ("noniid-labeldir"): Q. Li, Y. Diao, Q. Chen, B. He, "Federated Learning on Non-IID
Data Silos: An Experimental Study" (NIID-Bench), ICDE 2022; ``Xtra-Computing/NIID-Bench``
``partition.py``. Shards: H. B. McMahan et al., "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017; ``shaoxiongji/federated-learning``
``utils/sampling.py``. See docs/explanation/algorithms.md §6.1–6.2.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.data.datasets import DataError, Dataset

__all__ = [
    "PARTITIONERS",
    "DirichletConfig",
    "DomainsConfig",
    "IIDConfig",
    "NaturalConfig",
    "PartitionConfig",
    "ShardsConfig",
    "GaussianSizesConfig",
    "label_distribution",
]

PARTITIONERS: Registry = Registry("partition")


def _check_sizes(num_samples: int, num_devices: int) -> None:
    if num_devices < 1:
        raise DataError("partition", f"need at least one device, got {num_devices}")
    if num_devices > num_samples:
        raise DataError("partition", f"{num_devices} devices but only {num_samples} training samples")


class PartitionConfig(ConfigModel):
    """Base class of partition configs: ``split`` assigns training indices to devices."""

    covers_all: ClassVar[bool] = True
    """Every training sample goes to some device (``shards`` drops a remainder smaller than one shard per part)."""

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Return ``num_devices`` non-empty int64 index arrays into ``dataset.x_train``.

        Raises
        ------
        DataError
            If the split is impossible (too few samples, no natural split, retries exhausted).
        """
        raise NotImplementedError


@PARTITIONERS.register
class IIDConfig(PartitionConfig):
    """IID split: shuffle, then cut into ``num_devices`` near-equal parts (NIID-Bench "homo")."""

    name: Literal["iid"] = "iid"

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Shuffle all training indices and ``np.array_split`` them."""
        n = len(dataset.y_train)
        _check_sizes(n, num_devices)
        perm = rng.permutation(n).astype(np.int64)
        return list(np.array_split(perm, num_devices))


@PARTITIONERS.register
class DirichletConfig(PartitionConfig):
    """Label skew by per-class Dirichlet proportions (NIID-Bench "noniid-labeldir", §6.1).

    For each class, proportions ``p ~ Dir(alpha · 1_P)`` split that class's shuffled samples
    among devices; devices already holding ``>= n / P`` samples get ``p_j = 0`` (balancing).
    If that leaves no mass, ``p`` falls back to uniform over the devices not yet full (over all
    devices if every one is full). The draw is repeated until every device has
    ``min_require_size`` samples; each device's list is then shuffled. Small alpha gives
    extreme skew (0.1), 0.5 is moderate, ``>= 10`` is close to IID.
    """

    name: Literal["dirichlet"] = "dirichlet"
    alpha: PositiveFloat = Field(0.5, description="Dirichlet concentration; smaller = more label skew")
    min_require_size: PositiveInt = Field(10, description="every device must get at least this many samples")
    max_retries: PositiveInt = Field(1000, description="redraws allowed before giving up")

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Run the NIID-Bench procedure; redraw until every device is large enough."""
        labels = dataset.y_train
        n, p_count = len(labels), num_devices
        _check_sizes(n, p_count)
        if self.min_require_size * p_count > n:
            raise DataError(
                "partition.min_require_size",
                f"min_require_size {self.min_require_size} x {p_count} devices = "
                f"{self.min_require_size * p_count} exceeds the {n} training samples; "
                "lower min_require_size or use fewer devices",
            )
        class_ids = [np.flatnonzero(labels == c) for c in range(dataset.num_classes)]
        smallest = 0
        for _ in range(self.max_retries):
            batches, sizes = self._draw(class_ids, n, p_count, rng)
            smallest = int(sizes.min())
            if smallest >= self.min_require_size:
                parts = []
                for pieces in batches:
                    idx = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
                    parts.append(rng.permutation(idx).astype(np.int64))
                return parts
        raise DataError(
            "partition.alpha",
            f"after {self.max_retries} draws with alpha={self.alpha} some device still had fewer than "
            f"{self.min_require_size} samples (smallest: {smallest}); raise alpha, lower "
            "partition.min_require_size, use fewer devices or raise partition.max_retries",
        )

    def _draw(
        self, class_ids: list[np.ndarray], n: int, p_count: int, rng: np.random.Generator
    ) -> tuple[list[list[np.ndarray]], np.ndarray]:
        """One attempt: per class, shuffle, draw proportions, balance, cut."""
        batches: list[list[np.ndarray]] = [[] for _ in range(p_count)]
        sizes = np.zeros(p_count, dtype=np.int64)
        cap = n / p_count
        for ids in class_ids:
            idx_c = rng.permutation(ids)
            p = rng.dirichlet(np.full(p_count, self.alpha))
            open_ = sizes < cap
            p = np.where(open_, p, 0.0)  # balancing trick: full devices get no more
            total = math.fsum(p)  # exactly rounded: no summation order to depend on
            if total <= 0:
                # Every device full: uniform. With tiny alpha the Dirichlet draw can also put
                # all its mass (exactly, in float64) on full devices: uniform over the open ones.
                p = open_ / open_.sum() if open_.any() else np.full(p_count, 1.0 / p_count)
            else:
                p = p / total
            cuts = (np.cumsum(p) * len(idx_c)).astype(np.int64)[:-1]
            for j, piece in enumerate(np.split(idx_c, cuts)):
                if len(piece):
                    batches[j].append(piece)
            sizes += np.diff(np.concatenate(([0], cuts, [len(idx_c)])))
        return batches, sizes


@PARTITIONERS.register
class ShardsConfig(PartitionConfig):
    """Pathological non-IID shards of McMahan et al. (§6.2), generalised to any P.

    Training indices are stably sorted by label (ties by index) and cut into
    ``P · shards_per_client`` shards of ``n // (P · shards_per_client)`` samples (the
    remainder at the end of the sorted order is dropped); each device gets
    ``shards_per_client`` shards drawn without replacement.
    """

    covers_all: ClassVar[bool] = False

    name: Literal["shards"] = "shards"
    shards_per_client: PositiveInt = Field(2, description="shards per device (2: most see two labels)")

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Sort by label, cut into equal shards, deal shards to devices at random."""
        labels = dataset.y_train
        n = len(labels)
        _check_sizes(n, num_devices)
        num_shards = num_devices * self.shards_per_client
        shard_size = n // num_shards
        if shard_size == 0:
            raise DataError(
                "partition.shards_per_client",
                f"{num_devices} devices x {self.shards_per_client} shards = {num_shards} shards but only "
                f"{n} training samples; lower shards_per_client or use fewer devices",
            )
        order = np.argsort(labels, kind="stable").astype(np.int64)
        shards = order[: num_shards * shard_size].reshape(num_shards, shard_size)
        dealt = rng.permutation(num_shards).reshape(num_devices, self.shards_per_client)
        return [shards[row].reshape(-1) for row in dealt]


@PARTITIONERS.register
class NaturalConfig(PartitionConfig):
    """Use the dataset's own per-user split (e.g. Synthetic(α, β) users), one user per device."""

    name: Literal["natural"] = "natural"

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Return ``dataset.natural_groups`` as a list; their count must equal ``num_devices``."""
        label = f"dataset {dataset.name!r}" if dataset.name else "this dataset"
        groups = dataset.natural_groups
        if groups is None:
            raise DataError(
                "partition.name",
                f"{label} has no natural per-user split; use iid, dirichlet or shards",
            )
        if len(groups) != num_devices:
            raise DataError(
                "partition.name",
                f"{label} has {len(groups)} natural users but there are {num_devices} devices; "
                "they must match (for `synthetic`, num_users defaults to devices.count)",
            )
        parts = [np.asarray(g, dtype=np.int64) for g in groups]
        empty = [i for i, g in enumerate(parts) if len(g) == 0]
        if empty:
            raise DataError("partition.name", f"natural users {empty} have no training samples")
        return parts


@PARTITIONERS.register
class DomainsConfig(PartitionConfig):
    """One source domain per device: device ``i`` draws from domain ``i mod D`` (a domain-heterogeneous
    dataset such as ``digits_domains``), the domain's samples shuffled and cut evenly among its devices."""

    name: Literal["domains"] = "domains"
    covers_all: ClassVar[bool] = False
    samples_per_device: PositiveInt | None = Field(
        default=None, description="this many samples per device, the rest of its share unused (design default "
                                  "null: the whole share; heterogeneous-domain benchmarks give their parties 80 to "
                                  "5,000); more than the smallest device's share is refused")

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Each device's share of its domain's samples (in a seeded random order)."""
        if dataset.domains is None or dataset.train_domain is None:
            label = f"dataset {dataset.name!r}" if dataset.name else "this dataset"
            raise DataError("partition.name", f"{label} has no source domains; use a domain-heterogeneous "
                                              "dataset (digits_domains) or another partition")
        _check_sizes(len(dataset.y_train), num_devices)
        d = len(dataset.domains)
        parts: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * num_devices
        for k in range(d):
            devices = list(range(k, num_devices, d))
            if not devices:
                continue
            rows = rng.permutation(np.flatnonzero(dataset.train_domain == k)).astype(np.int64)
            if rows.size < len(devices):
                raise DataError("partition", f"domain {dataset.domains[k]!r} has {rows.size} samples for "
                                             f"{len(devices)} devices")
            for dev, share in zip(devices, np.array_split(rows, len(devices))):
                parts[dev] = share
        cap = self.samples_per_device
        if cap is None:
            return parts
        smallest = min(range(num_devices), key=lambda dev: (parts[dev].size, dev))
        if cap > parts[smallest].size:  # a cap no share reaches would silently give fewer samples than asked
            domain = dataset.domains[smallest % d]
            raise DataError("partition.samples_per_device",
                            f"{cap} is more than device {smallest}'s share of domain {domain!r} "
                            f"({parts[smallest].size} samples), so it would be capped; allowed: "
                            f"1..{parts[smallest].size}, or null (each device's whole share)")
        return [share[:cap] for share in parts]


@PARTITIONERS.register
class GaussianSizesConfig(PartitionConfig):
    """IID labels, Gaussian-skewed data sizes (the non-uniform setting of Wang et al., INFOCOM 2021).

    Wang et al. (INFOCOM 2021, docs/explanation/algorithms.md §2.7) train on IID
    data whose per-device sizes follow a Gaussian; the mean and spread are not published, so both
    are knobs [D]. Device i draws a relative size ``s_i = max(N(1, sigma²), floor)``; every device
    gets ``min_size`` samples and the remaining ``n − P·min_size`` are dealt in proportion to
    ``s_i`` (largest remainder, ties to the lower id). The shuffled training indices are then cut
    at those sizes, so labels stay IID and only the sizes are skewed. ``sigma = 0`` is the equal
    split of ``iid`` (up to the order of the cuts).
    """

    name: Literal["gaussian_sizes"] = "gaussian_sizes"
    sigma: float = Field(0.5, ge=0.0, description="std of the relative data size (mean 1); 0 = equal sizes")
    floor: float = Field(0.05, gt=0.0, le=1.0, description="smallest relative size a draw is clipped to")
    min_size: PositiveInt = Field(1, description="every device gets at least this many samples")

    def split(self, dataset: Dataset, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Draw relative sizes, deal the samples by largest remainder, cut a random permutation."""
        n = len(dataset.y_train)
        _check_sizes(n, num_devices)
        if self.min_size * num_devices > n:
            raise DataError(
                "partition.min_size",
                f"min_size {self.min_size} x {num_devices} devices = {self.min_size * num_devices} exceeds "
                f"the {n} training samples; lower min_size or use fewer devices",
            )
        share = np.maximum(rng.normal(1.0, self.sigma, num_devices), self.floor)
        spare = n - self.min_size * num_devices
        exact = spare * share / math.fsum(share)  # exactly rounded sum, the same on every machine
        sizes = np.floor(exact).astype(np.int64)
        # Largest remainder: the samples that flooring left over go to the largest fractions
        # (stable sort, so ties go to the lower device id) — the sizes sum to n exactly.
        left = int(spare - sizes.sum())
        order = np.argsort(-(exact - sizes), kind="stable")
        sizes[order[:left]] += 1
        sizes += self.min_size
        perm = rng.permutation(n).astype(np.int64)
        return list(np.split(perm, np.cumsum(sizes)[:-1]))


def label_distribution(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Per-part label histogram, row-normalised: a ``(len(parts), num_classes)`` array.

    Raises
    ------
    ValueError
        If a part is empty (its distribution is undefined).
    """
    out = np.zeros((len(parts), num_classes), dtype=np.float64)
    for i, idx in enumerate(parts):
        if len(idx) == 0:
            raise ValueError(f"part {i} is empty; its label distribution is undefined")
        out[i] = np.bincount(labels[idx], minlength=num_classes)[:num_classes]
    return out / out.sum(axis=1, keepdims=True)
