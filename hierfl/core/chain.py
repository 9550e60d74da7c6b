"""A consensus (blockchain) delay model in virtual time: pure math, with the random draws injected.

For protocols that write to a ledger (a blockchain-based shared-data stage: Lian et al., "Blockchain-Based
Two-Stage Federated Learning With Non-IID Data in IoMT System", IEEE TCSS 2023): how long until
what a node submits is in a block and confirmed. Proof of work finds blocks one after another at
exponential intervals (Nakamoto, 2008) with mean ``2^difficulty / hash_rate`` (difficulty in bits of
leading zeros, hash rate in hashes per second) or a given block time. Each block carries at most
``block_bytes``; submissions enter blocks first come, first served, and one larger than the room
left spans as many blocks as it needs. A submission is *included* when its last byte is in a
block, *confirmed* ``k_conf`` blocks later, and *known to everyone* ``propagation_s`` after that
(the block's transfer to the farthest committee member, computed by the caller).
docs/explanation/algorithms.md §5.13.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Chain", "ChainParams", "FixedInterval", "Receipt", "pow_block_mean_s"]


def pow_block_mean_s(difficulty_bits: float, hash_rate_hps: float) -> float:
    """Mean proof-of-work block time ``2^difficulty / hash_rate`` seconds."""
    if hash_rate_hps <= 0 or difficulty_bits < 0:
        raise ValueError(f"need difficulty_bits >= 0 and hash_rate_hps > 0, got {difficulty_bits}, {hash_rate_hps}")
    return 2.0 ** difficulty_bits / hash_rate_hps


class ExponentialSource(Protocol):
    """What the chain draws block intervals from (a ``numpy.random.Generator`` is one)."""

    def exponential(self, scale: float) -> float:
        """One draw of mean ``scale``."""


class FixedInterval:
    """Block intervals of exactly the mean (a permissioned chain that seals a block every ``block_time_s``,
    and the hand-calculated cases of the tests): a drop-in for the exponential source."""

    def exponential(self, scale: float) -> float:
        """``scale`` itself."""
        return float(scale)


@dataclass(frozen=True)
class ChainParams:
    """Block time (mean, s), block capacity (bytes), confirmation depth, propagation (s)."""

    block_time_s: float
    block_bytes: int
    k_conf: int = 1
    propagation_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.block_time_s > 0 and self.block_bytes >= 1 and self.k_conf >= 0 and self.propagation_s >= 0):
            raise ValueError(f"chain parameters out of range: {self}")


@dataclass(frozen=True)
class Receipt:
    """Where a submission landed: its first and last block, when it was included and confirmed."""

    first_block: int
    last_block: int
    included_at: float
    confirmed_at: float


class Chain:
    """Blocks found at exponential intervals from ``start``; submissions fill them in order of arrival.

    Block ``b`` (0, 1, …) is found at ``start + Σ_{k ≤ b} X_k``, ``X_k`` drawn from ``source`` as
    needed (so the blocks are the same however far a run looks ahead). Submissions must come in
    non-decreasing time, as virtual-time events do.
    """

    def __init__(self, params: ChainParams, source: ExponentialSource, start: float = 0.0) -> None:
        self.params = params
        self.source = source
        self.found: list[float] = []   # found[b]: when block b was found
        self._start = start
        self._block = 0                # the block being filled
        self._used = 0                 # bytes already in it
        self._last_t = start

    def block_time(self, b: int) -> float:
        """When block ``b`` is found (drawing intervals as needed)."""
        while len(self.found) <= b:
            prev = self.found[-1] if self.found else self._start
            self.found.append(prev + float(self.source.exponential(self.params.block_time_s)))
        return self.found[b]

    def submit(self, t: float, size_bytes: int) -> Receipt:
        """Put ``size_bytes`` submitted at ``t`` into the chain; where and when it lands."""
        if t < self._last_t:
            raise ValueError(f"submissions must come in time order: {t} after {self._last_t}")
        if size_bytes < 1:
            raise ValueError(f"a submission has at least one byte, got {size_bytes}")
        self._last_t = t
        cap = self.params.block_bytes
        while self.block_time(self._block) <= t:  # blocks found before the submission cannot hold it
            self._block, self._used = self._block + 1, 0
        if self._used >= cap:
            self._block, self._used = self._block + 1, 0
        first = self._block
        left = size_bytes
        while True:
            room = cap - self._used
            if left <= room:
                self._used += left
                break
            left -= room
            self._block, self._used = self._block + 1, 0
        last = self._block
        included = self.block_time(last)
        confirmed = self.block_time(last + self.params.k_conf) + self.params.propagation_s
        return Receipt(first, last, included, confirmed)
