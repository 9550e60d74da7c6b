"""Transfer channels' arithmetic: the link directions and the 16-bit casts (numpy only).

Half precision is IEEE binary16 (numpy's cast rounds to nearest, ties to even); bfloat16 is the top half of a
float32's bits, rounded to nearest, ties to even, computed on the bits (Kalamkar et al., "A Study of BFLOAT16
for Deep Learning Training", arXiv 1905.12322, describe the format and this rounding).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DIRECTIONS", "direction_of", "FP16_MAX", "fp16_round", "bf16_round", "bf16_to_float32"]

DIRECTIONS: tuple[str, ...] = ("device_uplink", "device_downlink", "edge_uplink", "edge_downlink")
"""The link directions a channel can be placed on (``channels.<direction>``)."""

FP16_MAX = 65504.0
"""The largest finite IEEE half-precision value."""


def direction_of(kind: str, sender: str) -> str | None:
    """The channel direction of a transfer over a route of ``kind`` sent by an end of type ``sender``
    (:mod:`hierfl.driver.routes` kinds); None: no channel applies (device ↔ device)."""
    if kind in ("device_edge", "device_cloud"):
        return "device_uplink" if sender == "device" else "device_downlink"
    if kind == "edge_cloud":
        return "edge_uplink" if sender == "edge" else "edge_downlink"
    return None


def fp16_round(vector: np.ndarray) -> np.ndarray:
    """IEEE half precision (numpy's round-to-nearest-even cast), values beyond ±65 504 saturated first."""
    x = np.asarray(vector, dtype=np.float32)
    return np.clip(x, -FP16_MAX, FP16_MAX).astype(np.float16)


def bf16_round(vector: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of a float32 vector: its top 16 bits, rounded to nearest, ties to even.

    ``bits + 0x7FFF + (bit 16 of bits)``, then the low half dropped (what torch's ``.to(torch.bfloat16)``
    does, bit for bit); a NaN becomes the quiet NaN ``0x7FC0``, so rounding never turns it into an infinity
    (torch's own NaN payload may differ: a NaN stays a NaN either way). Values that round past bfloat16's
    largest finite value become ±inf, as in torch.
    """
    bits = np.ascontiguousarray(vector, dtype=np.float32).view(np.uint32)
    rounded = (bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(np.asarray(vector, dtype=np.float32))
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bits (exact: the low half of each float32 is zero)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
