"""A set of integer ids in ``[0, n)`` with O(log n) insert, remove, rank and k-th smallest (pure).

A Fenwick (binary indexed) tree of 0/1 counts. Asynchronous protocols keep their idle devices
in one so that "the k-th idle device in id order" — what a seeded uniform pick over the sorted
idle list needs — costs O(log N) instead of sorting the pool on every dispatch (STYLE.md 18).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["RankedSet"]


class RankedSet:
    """Ids ``0 ≤ i < n`` kept in order; ``kth(k)`` is the ``k``-th smallest (0-based)."""

    def __init__(self, n: int, ids: Iterable[int] = ()) -> None:
        if n < 0:
            raise ValueError(f"size must be >= 0, got {n}")
        self.n = n
        self._tree = [0] * (n + 1)
        self._member = bytearray(n)
        self._size = 0
        self._top = 1 << max(n.bit_length() - 1, 0) if n else 0
        members = sorted(set(int(i) for i in ids))
        for i in members:  # linear-time build: counts, then each node pushes into its parent
            self._check(i)
            self._member[i] = 1
            self._tree[i + 1] += 1
        for j in range(1, n + 1):
            parent = j + (j & -j)
            if parent <= n:
                self._tree[parent] += self._tree[j]
        self._size = len(members)

    def _check(self, i: int) -> None:
        if not 0 <= i < self.n:
            raise IndexError(f"id {i} outside [0, {self.n})")

    def __len__(self) -> int:
        return self._size

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and 0 <= i < self.n and bool(self._member[i])

    def __iter__(self) -> Iterator[int]:
        return (i for i in range(self.n) if self._member[i])

    def _update(self, i: int, delta: int) -> None:
        j = i + 1
        tree, n = self._tree, self.n
        while j <= n:
            tree[j] += delta
            j += j & -j

    def add(self, i: int) -> None:
        """Insert ``i`` (no-op if present)."""
        self._check(i)
        if not self._member[i]:
            self._member[i] = 1
            self._size += 1
            self._update(i, 1)

    def discard(self, i: int) -> None:
        """Remove ``i`` (no-op if absent)."""
        self._check(i)
        if self._member[i]:
            self._member[i] = 0
            self._size -= 1
            self._update(i, -1)

    def rank(self, i: int) -> int:
        """How many members are smaller than ``i``."""
        j, total = min(max(i, 0), self.n), 0
        tree = self._tree
        while j > 0:
            total += tree[j]
            j -= j & -j
        return total

    def kth(self, k: int) -> int:
        """The ``k``-th smallest member (0-based); IndexError when ``k`` is out of range."""
        if not 0 <= k < self._size:
            raise IndexError(f"k={k} outside [0, {self._size})")
        pos, step, tree = 0, self._top, self._tree
        while step:
            nxt = pos + step
            if nxt <= self.n and tree[nxt] <= k:
                pos = nxt
                k -= tree[nxt]
            step >>= 1
        return pos

    def kth_excluding(self, k: int, excluded: list[int]) -> int:
        """The ``k``-th smallest member not in ``excluded`` (a short list of members), O(|excluded| log n)."""
        skip = sorted(e for e in set(excluded) if e in self)
        j = k
        while True:
            x = self.kth(j)
            c = sum(1 for e in skip if e <= x)  # excluded members at or below x
            if j - c == k and x not in skip:
                return x
            j = k + c
