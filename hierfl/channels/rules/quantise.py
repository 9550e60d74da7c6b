"""Quantising channels: ``qsgd`` (stochastic k-bit quantisation) and ``sign_ef`` (scaled sign with error feedback).

Wire formats and arithmetic in :mod:`hierfl.channels.math.codec`; the shared knobs in
:mod:`hierfl.channels.rules.compressor`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveInt

from hierfl.channels.math.codec import qsgd_bytes, qsgd_decode, qsgd_encode, sign_bytes, sign_decode, sign_encode
from hierfl.channels.rules.compressor import Compressor, ErrorFeedback
from hierfl.channels.rules import CHANNELS

__all__ = ["QsgdChannel", "SignEfChannel"]


@CHANNELS.register
class QsgdChannel(Compressor):
    """``qsgd``: QSGD's unbiased stochastic quantiser (Alistarh, Grubic, Li, Tomioka, Vojnovic, NeurIPS 2017).

    Per bucket of ``bucket`` values: its L2 norm (float32), then per value a sign bit and a level ``0..levels``
    rounded up or down at random so that the decoded value is the input in expectation. Bytes:
    ``4·⌈m/bucket⌉ + ⌈m·(1 + ⌈log₂(levels+1)⌉)/8⌉`` (fixed-length fields; the paper's Elias coding, whose
    length depends on the values, is not used [D]). The random draws come from the message's seed stream.
    With ``levels: 16`` (the default [D]) each value takes 6 bits: about 5.3× fewer bytes than float32.
    """

    name: Literal["qsgd"] = "qsgd"
    levels: PositiveInt = Field(default=16, le=2**20, description="quantisation levels s (16: about 4 bits) [D]")
    bucket: PositiveInt = Field(default=512, description="values per bucket, one float32 norm each [D]")
    encode_ops: NonNegativeFloat = Field(default=10.0, description="FLOP equivalents of encoding per value (norm, "
                                         "scale, floor, compare, a random draw as 4) [D]")
    decode_ops: NonNegativeFloat = Field(default=3.0, description="FLOP equivalents of decoding per value [D]")

    def encoded_bytes(self, elements: int) -> int:
        """The norms, then a sign bit and a level per value."""
        return qsgd_bytes(elements, self.levels, self.bucket)

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """Quantise ``p``."""
        return qsgd_encode(p, self.levels, self.bucket, rng)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """``norm · sign · level / levels`` per value."""
        return qsgd_decode(message, elements, self.levels, self.bucket)


@CHANNELS.register
class SignEfChannel(ErrorFeedback):
    """``sign_ef``: scaled sign with error feedback, EF-SignSGD (Karimireddy, Rebjock, Stich, Jaggi, ICML 2019).

    ``p = v + e``; the message is ``(‖p‖₁/d) · sign(p)`` (one float32 scale for the whole message, one bit per
    value: ``4 + ⌈m/8⌉`` bytes); the sender keeps ``e ← p − message``. Zero is sent as positive.
    """

    name: Literal["sign_ef"] = "sign_ef"
    encode_ops: NonNegativeFloat = Field(default=4.0, description="FLOP equivalents of encoding per value (‖p‖₁, "
                                         "sign and pack, residual update) [D]")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of decoding per value [D]")

    def encoded_bytes(self, elements: int) -> int:
        """The scale and one sign bit per value."""
        return sign_bytes(elements)

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """The scale and the signs of ``p``."""
        return sign_encode(p)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """``±scale`` per value."""
        return sign_decode(message, elements)
