"""A shared dataset built at run time from samples the devices give up (pure numpy).

A data-sharing stage counters label skew (Lian, Zeng, Wang, Gadekallu, Su, "Blockchain-Based Two-Stage
Federated Learning With Non-IID Data in IoMT System", IEEE TCSS 10(4), 2023): a few clients (the
*sharers*) each give a fraction α of their samples; the pooled samples, a shared dataset ``D_g``, go
to every client, which then trains on ``D_i ∪ D_g``. docs/explanation/algorithms.md §5.15.

The paper keeps the sharers' "most representative" samples without saying how; this module draws a
class-stratified random α-fraction (design default):

* :func:`share_counts` — how many samples of each class a sharer gives, from its label histogram
  alone (so the aggregator knows ``D_g``'s histogram without seeing a sample): ``round(α·n)`` in all,
  split over the classes by largest remainder;
* :func:`share_rows` — which rows those are, drawn from a seeded stream on the host that holds them;
* :class:`SharedData` — the shared set as a job sees it (hashable: it travels in a ``TrainSpec``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SharedData", "SharedRows", "share_counts", "share_rows", "shared_rows_for"]


def share_counts(hist: np.ndarray, alpha: float) -> np.ndarray:
    """Per-class counts of a sharer's share: ``⌊α·n + ½⌋`` samples in all, class-stratified.

    Each class ``c`` first gets ``⌊α·n_c⌋``; the samples still missing go one each to the classes with
    the largest remainders ``α·n_c − ⌊α·n_c⌋`` (ties: the lower class), never above ``n_c``.
    Example: ``n = (7, 3, 0)``, ``α = 0.25``: total ``⌊2.5 + ½⌋ = 3``; floors ``(1, 0, 0)``,
    remainders ``(0.75, 0.75, 0)``: the two missing go to classes 0 and 1, giving ``(2, 1, 0)``.
    """
    hist = np.asarray(hist, dtype=np.int64)
    if hist.ndim != 1 or (hist < 0).any():
        raise ValueError(f"share_counts: a histogram is a 1-D array of counts >= 0, got {hist!r}")
    if not (math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"share_counts: alpha must be in [0, 1], got {alpha!r}")
    total = min(math.floor(alpha * int(hist.sum()) + 0.5), int(hist.sum()))
    exact = alpha * hist.astype(np.float64)
    counts = np.minimum(np.floor(exact).astype(np.int64), hist)
    missing = total - int(counts.sum())
    if missing > 0:
        room = counts < hist
        order = sorted((c for c in range(hist.size) if room[c]), key=lambda c: (-(exact[c] - math.floor(exact[c])), c))
        for c in order[:missing]:
            counts[c] += 1
    return counts


def share_rows(rows: np.ndarray, labels: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The rows a sharer gives: ``counts[c]`` of its rows of class ``c``, drawn without replacement,
    classes in order, each class's draw sorted (``labels``: the labels of ``rows``, in order)."""
    rows, labels = np.asarray(rows, dtype=np.int64), np.asarray(labels)
    picked = []
    for c, k in enumerate(np.asarray(counts, dtype=np.int64).tolist()):
        if k <= 0:
            continue
        of_c = rows[labels == c]
        if of_c.size < k:
            raise ValueError(f"share_rows: class {c} has {of_c.size} rows, {k} asked for")
        picked.append(np.sort(rng.choice(of_c, size=k, replace=False)))
    return np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class SharedData:
    """The shared set ``D_g``: which devices gave how many samples of each class, and the seed their rows
    are drawn with (sharer ``d`` draws from ``(seed, d)``). A device trains on its own rows plus every
    *other* sharer's share (its own share is already among its rows: ``D_i ∪ D_g``)."""

    sharers: tuple[int, ...]
    counts: tuple[tuple[int, ...], ...]  # per sharer, its share's per-class counts (true labels)
    seed: int
    # malicious sharers: their shares carry flipped labels C − 1 − y (the data-sharing threat model); their own jobs
    # keep the true labels
    flipped: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.sharers) != len(self.counts) or list(self.sharers) != sorted(set(self.sharers)):
            raise ValueError(f"SharedData: sharers must be sorted, distinct and match counts, got {self.sharers}")
        if not set(self.flipped) <= set(self.sharers) or list(self.flipped) != sorted(set(self.flipped)):
            raise ValueError(f"SharedData: flipped sharers must be sorted sharers, got {self.flipped}")

    @property
    def total(self) -> int:
        """``|D_g|``."""
        return sum(sum(c) for c in self.counts)

    def own(self, device: int) -> int:
        """How many of ``D_g``'s samples ``device`` gave itself (0 unless it is a sharer)."""
        for d, c in zip(self.sharers, self.counts):
            if d == device:
                return sum(c)
        return 0

    def extra_for(self, device: int) -> int:
        """Samples ``D_g`` adds to ``device``'s own: ``|D_g|`` minus its own share."""
        return self.total - self.own(device)

    def histogram(self, num_classes: int) -> np.ndarray:
        """``D_g``'s label histogram as shared, ``(num_classes,)``: a flipped share's class ``c`` counts as
        class ``C − 1 − c``."""
        out = np.zeros(num_classes, dtype=np.int64)
        for d, c in zip(self.sharers, self.counts):
            counts = np.zeros(num_classes, dtype=np.int64)
            counts[: len(c)] = np.asarray(c, dtype=np.int64)
            out += counts[::-1] if d in self.flipped else counts
        return out


def shared_rows_for(shared: SharedData, device: int, parts: list[np.ndarray], labels: np.ndarray,
                    only: int | None = None) -> np.ndarray:
    """The rows of ``D_g`` that ``device`` adds to its own (the other sharers' shares, by sharer id), each
    drawn by :func:`share_rows` from the stream ``(shared.seed, sharer)``; ``only``: just that sharer's
    share (whoever asks)."""
    out = []
    for d, counts in zip(shared.sharers, shared.counts):
        if (only is None and d == device) or (only is not None and d != only):
            continue
        rows = parts[d]
        rng = np.random.default_rng([shared.seed, d])
        out.append(share_rows(rows, labels[rows], np.asarray(counts), rng))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class SharedRows:
    """A device's training rows with a shared set added, for the host that holds the samples: each sharer's
    share is drawn once per shared set and joined to a device's own rows per job (``D_i ∪ D_g``)."""

    def __init__(self, parts: list[np.ndarray], labels: np.ndarray, num_classes: int = 0) -> None:
        self.parts, self.labels, self.num_classes = parts, labels, int(num_classes)
        self._shares: dict[SharedData, dict[int, np.ndarray]] = {}
        self._flipped: dict[SharedData, np.ndarray] = {}  # the labels with the malicious shares flipped

    def rows(self, shared: SharedData, device: int) -> np.ndarray:
        """``device``'s own rows, then every other sharer's share in sharer order."""
        shares = self._shares.get(shared)
        if shares is None:
            shares = {d: shared_rows_for(shared, d, self.parts, self.labels, only=d) for d in shared.sharers}
            self._shares[shared] = shares
        return np.concatenate([self.parts[device], *(shares[d] for d in shared.sharers if d != device)])

    def y_for(self, shared: SharedData | None, device: int) -> np.ndarray:
        """The labels ``device``'s job reads: the true ones, or with the malicious sharers' shares flipped to
        ``C − 1 − y`` (a malicious sharer's own job keeps its true labels)."""
        if shared is None or not shared.flipped or device in shared.flipped:
            return self.labels
        y = self._flipped.get(shared)
        if y is None:
            self.rows(shared, -1)  # (draws the shares)
            y = self.labels.copy()
            for d in shared.flipped:
                rows = self._shares[shared][d]
                y[rows] = (self.num_classes - 1 - self.labels[rows]).astype(y.dtype)
            self._flipped[shared] = y
        return y
