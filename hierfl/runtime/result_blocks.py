"""Result arrays of batched groups, reused across rounds once nothing refers to them any more.

A group of ``K`` jobs writes its results into the rows of one ``(K, P)`` float32 array; the jobs' results
are views of it, held by the executor, the protocol and the aggregators for as long as they are needed
(an asynchronous protocol may keep one for many rounds). A fresh array each round costs its page faults
(hundreds of MB a round for the CIFAR-10 recipe's 50 jobs of 2.2 M parameters); reusing a fixed one would
overwrite results still held. So an array is reused only when nothing but this pool refers to it: every
view of it (a job's row, a slice of rows) holds a reference to it, so its reference count tells, exactly,
whether any result of its last group is still alive. Reuse changes no value a run computes: the group
writes every row before anyone reads it.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["ResultBlocks"]


class ResultBlocks:
    """Up to ``keep`` arrays per shape; :meth:`take` returns a free one, or a fresh one."""

    def __init__(self, keep: int = 2) -> None:
        self.keep = int(keep)
        self._blocks: dict[tuple[int, int], list[np.ndarray]] = {}
        self.reused = 0  # how many takes found a free array (tests and benchmarks read it)

    def take(self, rows: int, width: int) -> np.ndarray:
        """A C-contiguous float32 ``(rows, width)`` array that no one else refers to (contents undefined)."""
        pool = self._blocks.setdefault((int(rows), int(width)), [])
        for block in pool:
            # references: the pool's list, this loop's variable and getrefcount's argument; any view or
            # holder elsewhere adds one
            if sys.getrefcount(block) <= 3:
                self.reused += 1
                return block
        block = np.empty((rows, width), dtype=np.float32)
        if len(pool) < self.keep:
            pool.append(block)
        return block
