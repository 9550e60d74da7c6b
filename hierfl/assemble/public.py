"""``data.public``: carve a public split out of the training samples, disjoint from private and test data.

The public samples are drawn at random (stream ``data.public``) and moved behind the private ones
in the training arrays, so the device hosts, which hold the training arrays already, reach them as
one range of rows, and the partition sees only the private part.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hierfl.data import DataError, Dataset

__all__ = ["carve_public"]


def carve_public(dataset: Dataset, size: int, rng: np.random.Generator) -> tuple[Dataset, Dataset, np.ndarray]:
    """``(whole, private, public_rows)``: ``whole`` holds the private samples first, in their original order,
    then the public ones; ``private`` is its private part only (what the partition splits);
    ``public_rows`` the public samples' rows in ``whole``.

    Raises :class:`~hierfl.data.DataError` (key ``public.size``) if too few samples would stay
    private, or (key ``public``) for a dataset with a natural per-user split, whose users' samples
    the carve would break up.
    """
    n = int(dataset.x_train.shape[0])
    if dataset.natural_groups is not None:
        raise DataError("public", f"dataset {dataset.name} comes split by user; a public split would take samples "
                                  "out of users' data; use a dataset without a natural split")
    if size >= n:
        raise DataError("public.size", f"{size} public samples leave no private ones (the dataset has {n} "
                                       f"training samples); allowed: 1..{n - 1}")
    public = np.sort(rng.permutation(n)[:size])
    private = np.setdiff1d(np.arange(n), public, assume_unique=True)
    order = np.concatenate([private, public])
    domain = dataset.train_domain  # a domain-heterogeneous dataset: each sample's domain moves with it
    whole = dataclasses.replace(dataset, x_train=np.ascontiguousarray(dataset.x_train[order]),
                                y_train=dataset.y_train[order], train_domain=None if domain is None else domain[order])
    private_part = dataclasses.replace(whole, x_train=whole.x_train[: private.size],
                                       y_train=whole.y_train[: private.size],
                                       train_domain=None if domain is None else whole.train_domain[: private.size])
    return whole, private_part, np.arange(private.size, n, dtype=np.int64)
