"""Quantised messages that secure aggregation can sum: integer grids every sender shares (numpy only).

Secure aggregation (Bonawitz et al., CCS 2017) adds the senders' masked vectors in ``Z_R``, ``R = 2^b``: the
server learns ``Σ x_u mod R``. For that sum to mean the sum of the senders' values, each sender must first map
its values onto **one integer grid all senders share** (quantise before masking), and the field must be wide
enough that the sum never wraps around: ``n`` senders whose values each take one of ``L`` integers
``0 … L−1`` (after a shift) sum to at most ``n·(L−1) < n·L ≤ 2^b``, so ``b = ⌈log₂(n·L)⌉`` bits suffice
(the spec's ``b = ⌈log₂(n·Q)⌉`` with ``Q = L``) [D].

Two such grids here:

* **A shared-scale stochastic quantiser** (QSGD's rounding, Alistarh et al., NeurIPS 2017, with one public
  scale ``c`` in place of each bucket's own norm [D]): ``ℓ_i = sign(v_i) · ξ_i``, ``ξ_i`` the integer below or
  above ``s·min(|v_i|, c)/c`` chosen at random so that ``E[c·ℓ_i/s] = v_i`` for ``|v_i| ≤ c``. Levels
  ``−s … s``: ``L = 2s + 1``. With per-bucket norms (plain QSGD) the senders' levels are in different units and
  their sum means nothing; a public scale fixes that, as Flower's SecAgg+ does with its ``clipping_range``.
* **fp16 as fixed point**: every finite IEEE half-precision value is an integer multiple of ``2^−24`` (the
  smallest subnormal) of magnitude at most ``65 504``, so ``v · 2^24`` is an exact integer in
  ``±(2^40 − 2^29)``: ``L = 2^41 − 2^30 + 1``. The sum in the field is then the exact sum of the fp16 values —
  at ``41 + log₂ n`` bits per element. bfloat16 has no such grid within a 62-bit field (float32's exponent range).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FP16_STEP_BITS", "FP16_LEVELS", "MAX_FIELD_BITS", "field_bits", "grid_levels", "grid_quantise",
           "grid_value", "grid_bytes", "grid_encode", "grid_decode", "fp16_to_grid", "grid_to_fp16_sum"]

FP16_STEP_BITS = 24                                   # fp16's smallest step is 2^−24
FP16_LEVELS = 2 * (65504 << FP16_STEP_BITS) + 1        # integers −65504·2^24 … 65504·2^24
MAX_FIELD_BITS = 62                                    # the production encoding's largest modulus, 2^62 [V]


def field_bits(senders: int, levels: int) -> int:
    """``⌈log₂(n·L)⌉``: bits of a field in which ``n`` senders' values of ``L`` integers each sum without
    wrapping around (exact integer arithmetic: no float rounding at 2^62)."""
    product = max(int(senders), 1) * int(levels)
    return max(1, (product - 1).bit_length())


def grid_levels(levels: int) -> int:
    """``L = 2s + 1``: the integers ``−s … s`` one value of the shared-scale quantiser takes."""
    return 2 * int(levels) + 1


def grid_quantise(vector: np.ndarray, levels: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """The integer levels ``ℓ ∈ −s … s`` (int64) of ``vector`` on the grid of step ``c/s``, rounded at random
    (unbiased for ``|v| ≤ c``; a value beyond ``±c`` is clipped to it)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1).astype(np.float64)
    s = int(levels)
    r = s * np.minimum(np.abs(v), float(scale)) / float(scale)
    low = np.floor(r)
    mag = np.minimum(low + (rng.random(v.size) < (r - low)), s).astype(np.int64)
    return np.where(v < 0, -mag, mag)


def grid_value(level: np.ndarray, levels: int, scale: float) -> np.ndarray:
    """The float32 values ``c·ℓ/s`` of integer levels (or of a sum of levels: the decoded sum)."""
    return (np.asarray(level, dtype=np.float64) * (float(scale) / int(levels))).astype(np.float32)


def grid_bytes(elements: int, levels: int) -> int:
    """``⌈m·(1 + ⌈log₂(s+1)⌉)/8⌉``: a sign bit and a magnitude per value, no norms."""
    return math.ceil(int(elements) * (1 + max(1, math.ceil(math.log2(int(levels) + 1)))) / 8)


def grid_encode(level: np.ndarray) -> np.ndarray:
    """The fields of :func:`grid_bytes` as integers: ``|ℓ| << 1 | (ℓ < 0)`` (packed by the caller)."""
    lv = np.asarray(level, dtype=np.int64)
    return ((np.abs(lv) << 1) | (lv < 0)).astype(np.uint32)


def grid_decode(codes: np.ndarray) -> np.ndarray:
    """The signed levels (int64) of :func:`grid_encode`'s fields."""
    c = np.asarray(codes, dtype=np.int64)
    mag = c >> 1
    return np.where(c & 1, -mag, mag)


def fp16_to_grid(vector: np.ndarray) -> np.ndarray:
    """fp16 values as exact integers of ``2^−24`` (int64)."""
    x = np.asarray(vector, dtype=np.float16).astype(np.float64)
    return np.round(x * float(1 << FP16_STEP_BITS)).astype(np.int64)


def grid_to_fp16_sum(total: np.ndarray) -> np.ndarray:
    """A sum of :func:`fp16_to_grid` integers back in value units (float64: exact while it has ≤ 53 bits)."""
    return np.asarray(total, dtype=np.int64).astype(np.float64) / float(1 << FP16_STEP_BITS)
