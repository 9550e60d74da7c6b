"""The consensus delay model against hand calculations (block intervals injected)."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.chain import Chain, ChainParams, FixedInterval, Receipt, pow_block_mean_s


class Fixed:
    """Block intervals from a list; records the means asked for."""

    def __init__(self, intervals: list[float]) -> None:
        self.intervals = list(intervals)
        self.scales: list[float] = []

    def exponential(self, scale: float) -> float:
        self.scales.append(scale)
        return self.intervals.pop(0)


def test_submissions_fill_blocks_in_order_by_hand() -> None:
    # blocks found at 10, 15, 35, 43, 50, 54; 100 bytes a block; confirmed one block later, +0.5 s
    source = Fixed([10, 5, 20, 8, 7, 4])
    chain = Chain(ChainParams(block_time_s=10.0, block_bytes=100, k_conf=1, propagation_s=0.5), source)
    assert chain.submit(2.0, 60) == Receipt(0, 0, 10.0, 15.5)       # 60 of block 0
    assert chain.submit(3.0, 70) == Receipt(0, 1, 15.0, 35.5)       # 40 left in block 0, 30 in block 1
    assert chain.submit(16.0, 10) == Receipt(2, 2, 35.0, 43.5)      # block 1 was found at 15: too late
    assert chain.submit(20.0, 250) == Receipt(2, 4, 50.0, 54.5)     # 90 + 100 + 60
    assert source.scales == [10.0] * 6 and chain.found == [10, 15, 35, 43, 50, 54]


def test_a_full_block_and_no_confirmation_depth() -> None:
    chain = Chain(ChainParams(block_time_s=1.0, block_bytes=100, k_conf=0), Fixed([2, 3, 4]), start=1.0)
    assert chain.submit(0.5 + 1.0, 100) == Receipt(0, 0, 3.0, 3.0)  # exactly one block; included = confirmed
    assert chain.submit(1.5, 1) == Receipt(1, 1, 6.0, 6.0)          # block 0 is full: the next one


def test_bad_use_is_refused() -> None:
    chain = Chain(ChainParams(block_time_s=1.0, block_bytes=10), Fixed([1.0] * 10))
    chain.submit(5.0, 1)
    with pytest.raises(ValueError, match="time order"):
        chain.submit(4.0, 1)
    with pytest.raises(ValueError, match="at least one byte"):
        chain.submit(6.0, 0)
    with pytest.raises(ValueError, match="out of range"):
        ChainParams(block_time_s=0.0, block_bytes=10)


def test_pow_mean_and_seeded_draws() -> None:
    assert pow_block_mean_s(10, 1024.0) == 1.0
    with pytest.raises(ValueError):
        pow_block_mean_s(10, 0.0)
    a = Chain(ChainParams(block_time_s=10.0, block_bytes=1000), np.random.default_rng(3))
    b = Chain(ChainParams(block_time_s=10.0, block_bytes=1000), np.random.default_rng(3))
    assert [a.block_time(k) for k in range(50)] == [b.block_time(k) for k in range(50)]
    gaps = np.diff([0.0, *[a.block_time(k) for k in range(2000)]])
    assert gaps.mean() == pytest.approx(10.0, rel=0.1)  # exponential with the given mean


def test_fixed_block_time_capacity_and_confirmation_depth_by_hand() -> None:
    # a block exactly every 10 s (10, 20, 30, …); 100 bytes a block; confirmed 2 blocks later, +0.25 s
    chain = Chain(ChainParams(block_time_s=10.0, block_bytes=100, k_conf=2, propagation_s=0.25), FixedInterval())
    assert chain.submit(3.0, 150) == Receipt(0, 1, 20.0, 40.25)   # 100 in block 0, 50 in block 1; block 3 at 40
    assert chain.submit(12.0, 50) == Receipt(1, 1, 20.0, 40.25)   # block 0 was found at 10: block 1's last 50
    assert chain.submit(15.0, 1) == Receipt(2, 2, 30.0, 50.25)    # block 1 is full
    assert chain.found == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert FixedInterval().exponential(2.5) == 2.5
