"""Public (proxy) data: the per-round subsets methods draw from it and what shipping it costs (pure).

Output-exchange methods (model distillation through class scores, Li and Wang, 2019, arXiv
1910.03581, and its successors) let devices compare predictions on a dataset everyone holds.
Each round uses a fresh subset ``A_t`` of it; both ends derive the subset from the same seeded
stream, so its indices are never sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PublicData", "public_bytes", "public_subset"]


@dataclass(frozen=True)
class PublicData:
    """The run's public split as protocols see it (``env.world.public``).

    ``rows``: its ``[start, stop)`` rows in the device hosts' training arrays; ``labels``: the
    public samples' labels (to stratify subsets); ``labelled``: whether a method may train on
    them; ``placement``: ``preinstalled``, ``download_once`` or ``server_only``; ``download_bytes``:
    one device's download of the whole split.
    """

    rows: tuple[int, int]
    labels: np.ndarray
    labelled: bool
    placement: str
    download_bytes: int

    @property
    def size(self) -> int:
        """Public samples."""
        return self.rows[1] - self.rows[0]


def public_subset(labels: np.ndarray, size: int, rng: np.random.Generator, stratified: bool) -> np.ndarray:
    """Positions (sorted, into ``labels``) of a random subset of ``size`` public samples.

    ``stratified``: every class gets its share of ``size`` by the largest-remainder rule on the
    class frequencies (ties: smaller class label first), drawn without replacement inside the
    class, as a distillation method's alignment set; else a plain draw without replacement. ``size`` at least the
    pool's size returns the whole pool.
    """
    n = int(labels.shape[0])
    if size < 1:
        raise ValueError(f"a public subset needs size >= 1, got {size}")
    if n == 0:
        raise ValueError("the public pool is empty")
    if size >= n:
        return np.arange(n, dtype=np.int64)
    if not stratified:
        return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)
    classes, counts = np.unique(labels, return_counts=True)
    quotas = counts * (size / n)
    take = np.floor(quotas).astype(np.int64)
    order = sorted(range(len(classes)), key=lambda k: (-(quotas[k] - take[k]), k))
    for k in order[: size - int(take.sum())]:
        take[k] += 1
    chosen = [rng.choice(np.flatnonzero(labels == c), size=int(t), replace=False)
              for c, t in zip(classes, take) if t > 0]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def public_bytes(samples: int, features: int, labelled: bool) -> int:
    """Bytes of shipping ``samples`` public samples: float32 features, plus a 4-byte label each if labelled."""
    return 4 * int(samples) * (int(features) + (1 if labelled else 0))
