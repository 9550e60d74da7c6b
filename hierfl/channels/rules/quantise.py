"""Quantising channels: ``qsgd`` (stochastic k-bit quantisation), ``sign_ef`` (scaled sign with error feedback) and
``polyline`` (the polyline encoding of Chai et al., SC 2021).

Wire formats and arithmetic in :mod:`hierfl.channels.math.codec`; the shared knobs in
:mod:`hierfl.channels.rules.compressor`.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hierfl.channels.math.codec import (level_bits, pack_bits, qsgd_bytes, qsgd_decode, qsgd_decode_exact,
                                        qsgd_encode, qsgd_encode_exact, polyline_decode, polyline_encode, sign_bytes,
                                        sign_decode, sign_encode, unpack_bits)
from hierfl.channels.math.field import grid_bytes, grid_decode, grid_encode, grid_levels, grid_quantise, grid_value
from hierfl.channels.rules.compressor import Compressor, ErrorFeedback
from hierfl.channels.rules import CHANNELS
from hierfl.config.errors import Problem

__all__ = ["QsgdChannel", "SignEfChannel", "PolylineChannel"]


@CHANNELS.register
class QsgdChannel(Compressor):
    """``qsgd``: QSGD's unbiased stochastic quantiser (Alistarh, Grubic, Li, Tomioka, Vojnovic, NeurIPS 2017).

    Per bucket of ``bucket`` values: its L2 norm (float32), then per value a sign bit and a level ``0..levels``
    rounded up or down at random so that the decoded value is the input in expectation. Bytes:
    ``4·⌈m/bucket⌉ + ⌈m·(1 + ⌈log₂(levels+1)⌉)/8⌉`` (fixed-length fields; the paper's Elias coding, whose
    length depends on the values, is not used [D]). The random draws come from the message's seed stream.
    With ``levels: 16`` (the default [D]) each value takes 6 bits: about 5.3× fewer bytes than float32.

    ``exact_bytes: true`` sends the paper's variable-length coding instead (Elias-γ of the run of zeros before
    each non-zero level, its sign bit, Elias-γ of the level; the count of non-zero levels first) and the driver
    charges its measured length, which then depends on the values; its Elias coding costs ``elias_ops`` more
    per value (every value: the count of non-zero levels is not known in advance) [D]. Timing-only runs charge
    the fixed length.

    ``shared_scale: c`` replaces the buckets' norms by one public scale every sender uses: a value becomes a
    level ``−s … s`` of ``c/s`` (rounded at random, unbiased for ``|v| ≤ c``, clipped beyond), sent as a sign bit
    and ``⌈log₂(s+1)⌉`` bits, no norms: ``⌈m·(1 + ⌈log₂(s+1)⌉)/8⌉`` bytes. The senders' levels are then in the
    same units and add up, which secure aggregation needs (quantise, then mask: :mod:`hierfl.channels.math.field`);
    with DP clipping at ``S``, ``c = S`` never clips (``|v_i| ≤ ‖v‖₂ ≤ S``) [D].
    """

    name: Literal["qsgd"] = "qsgd"
    levels: PositiveInt = Field(default=16, le=2**20, description="quantisation levels s (16: about 4 bits) [D]")
    bucket: PositiveInt = Field(default=512, description="values per bucket, one float32 norm each [D]")
    encode_ops: NonNegativeFloat = Field(default=10.0, description="FLOP equivalents of encoding per value (norm, "
                                         "scale, floor, compare, a random draw as 4) [D]")
    decode_ops: NonNegativeFloat = Field(default=3.0, description="FLOP equivalents of decoding per value [D]")
    exact_bytes: bool = Field(default=False, description="Elias-coded levels and runs, the measured length "
                              "charged: bytes and times then depend on the model's values [D: false]")
    elias_ops: NonNegativeFloat = Field(default=10.0, description="FLOP equivalents per value of the Elias "
                                        "coding, each way, with exact_bytes [D]")
    shared_scale: PositiveFloat | None = Field(default=None, description="c: one public scale for every sender in "
                                               "place of the buckets' norms (levels of c/levels, clipped at ±c): "
                                               "summable under secure aggregation; null: each bucket's L2 norm")

    def encode_flops(self, elements: int) -> float:
        """``encode_ops`` per value (and ``elias_ops`` with ``exact_bytes``)."""
        return (float(self.encode_ops) + (float(self.elias_ops) if self.exact_bytes else 0.0)) * int(elements)

    def decode_flops(self, elements: int) -> float:
        """``decode_ops`` per value (and ``elias_ops`` with ``exact_bytes``)."""
        return (float(self.decode_ops) + (float(self.elias_ops) if self.exact_bytes else 0.0)) * int(elements)

    def encoded_bytes(self, elements: int) -> int:
        """The norms, then a sign bit and a level per value (with ``exact_bytes``: what timing-only runs charge;
        with ``shared_scale``: no norms)."""
        if self.shared_scale is not None:
            return grid_bytes(elements, self.levels)
        return qsgd_bytes(elements, self.levels, self.bucket)

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """Quantise ``p``."""
        if self.shared_scale is not None:
            level = grid_quantise(p, self.levels, float(self.shared_scale), rng)
            return pack_bits(grid_encode(level), 1 + level_bits(self.levels))
        encode = qsgd_encode_exact if self.exact_bytes else qsgd_encode
        return encode(p, self.levels, self.bucket, rng)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """``norm · sign · level / levels`` per value (``shared_scale`` in place of the norm)."""
        if self.shared_scale is not None:
            return grid_value(self.levels_of(message, elements), self.levels, float(self.shared_scale))
        decode = qsgd_decode_exact if self.exact_bytes else qsgd_decode
        return decode(message, elements, self.levels, self.bucket)

    def levels_of(self, message: bytes, elements: int) -> np.ndarray:
        """The signed integer levels (int64) of a ``shared_scale`` message: what a sender adds into the field."""
        return grid_decode(unpack_bits(message, elements, 1 + level_bits(self.levels)))

    def field_levels(self) -> int | None:
        """With ``shared_scale``: the ``2s + 1`` levels ``−s … s``; else none (per-bucket norms)."""
        return grid_levels(self.levels) if self.shared_scale is not None and not self.exact_bytes else None

    def field_refusal(self) -> str:
        """Per-bucket norms, or a variable-length code."""
        if self.exact_bytes:
            return "exact_bytes is a variable-length code, but a masked vector is uniformly random at the field width"
        return "each sender scales its levels by its own bucket norms: set shared_scale, one public scale for all"

    def problems(self, key: str) -> list[Problem]:
        """``shared_scale`` has no buckets: a ``bucket`` set with it would be ignored; nor a variable-length code."""
        out = []
        if self.shared_scale is not None and "bucket" in self.model_fields_set:
            out.append(Problem(f"{key}.bucket", "shared_scale replaces the buckets' norms: bucket would be "
                               "ignored; allowed: unset", self.bucket))
        if self.shared_scale is not None and self.exact_bytes:
            out.append(Problem(f"{key}.exact_bytes", "the Elias coding is not defined with shared_scale; allowed: "
                               "false", True))
        return out


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

    def field_refusal(self) -> str:
        """A scale of the sender's own."""
        return "each sender sends its own scale with its signs: the sum of signs in different units means nothing"


@CHANNELS.register
class PolylineChannel(Compressor):
    """``polyline``: the compression of asynchronous tiers' uploads in Chai et al. (SC 2021), Google's Encoded Polyline Algorithm on the
    flattened vector: each value rounded to ``precision`` decimals, the difference from the previous one
    zig-zagged and sent in 5-bit groups, one ASCII byte each (1 byte for a step of at most 15 units, 2 up to
    511, 3 up to 16 383, …).

    Its length depends on the values, so it needs ``exact_bytes: true``: the driver charges the measured
    length (bytes and times then depend on the model's values); timing-only runs charge
    ``expected_bytes_per_value`` per value [D]. The paper's own precision and whether it encodes weights or their
    change are not stated: ``precision: 4`` on the model itself by default [D].
    """

    name: Literal["polyline"] = "polyline"
    applies_to: Literal["model", "update"] = Field(default="model", description="what is encoded: the model "
                                                   "(its weights in flattened order) or the update [D: model]")
    precision: int = Field(default=4, ge=0, le=9, description="decimals kept (the polyline algorithm's p) [D: 4]")
    exact_bytes: bool = Field(default=False, description="charge the measured length (required: a polyline's "
                              "length depends on the values)")
    expected_bytes_per_value: PositiveFloat = Field(default=3.0, description="bytes a value takes in timing-only "
                                                    "runs (3: steps of 512 to 16 383 units) [D]")
    encode_ops: NonNegativeFloat = Field(default=6.0, description="FLOP equivalents of encoding per value [D]")
    decode_ops: NonNegativeFloat = Field(default=6.0, description="FLOP equivalents of decoding per value [D]")

    def encoded_bytes(self, elements: int) -> int:
        """``expected_bytes_per_value`` per value (what timing-only runs charge)."""
        return math.ceil(float(self.expected_bytes_per_value) * int(elements))

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """The polyline string of ``p``."""
        return polyline_encode(p, self.precision)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """The rounded values."""
        return polyline_decode(message, elements, self.precision)

    def field_refusal(self) -> str:
        """A variable-length, difference-coded string."""
        return "a variable-length string of differences of rounded values, not integers a field can add"

    def problems(self, key: str) -> list[Problem]:
        """A polyline without ``exact_bytes`` would charge a length it does not send."""
        if not self.exact_bytes:
            return [Problem(f"{key}.exact_bytes", "a polyline's length depends on the values: it is charged as "
                            "measured, which makes bytes and times depend on the model; allowed: true", False)]
        return []
