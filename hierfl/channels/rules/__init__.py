"""Transfer channels as plug-ins (``channels.<direction>: {name: …}``): the base class and the shipped casts.

A channel is a config model registered in :data:`CHANNELS` (``hierfl.plugin`` exports both); the overview,
the link directions and what the driver charges are in :mod:`hierfl.channels`. The update compressors live in
the modules of this package, registered when it is imported: :mod:`~hierfl.channels.rules.compressor` (their
bases: shared knobs, error feedback), :mod:`~hierfl.channels.rules.quantise` (``qsgd``, ``sign_ef``, ``polyline``) and
:mod:`~hierfl.channels.rules.sparse` (``topk_ef``, ``randk_ef``, ``dgc``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, field_validator

from hierfl.channels.math import bf16_round, bf16_to_float32, fp16_round
from hierfl.channels.math.field import FP16_LEVELS
from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry

__all__ = ["CHANNELS", "Channel", "NoChannel", "Fp16Channel", "Bf16Channel"]

CHANNELS: Registry = Registry("transfer channel")


class Channel(ConfigModel):
    """Base of every transfer channel (``channels.<direction>: {name: …, …}``).

    A subclass sets ``name: Literal["…"] = "…"``, its knobs as fields, and overrides the methods below.
    The defaults describe the identity (``none``): the raw float32 vector, no work, no state.
    """

    name: str
    # whether the channel keeps per-sender state across messages (error feedback): ``encode`` then gets
    # the sender's state dictionary (arrays, saved in checkpoints); a stateless channel gets an empty one
    keeps_state: ClassVar[bool] = False

    efficiency: PositiveFloat = Field(
        default=0.25, le=1.0, description="fraction of a processor's FLOP/s that encoding and decoding reach "
        "(memory-bound vector work) [D]: time = flops / (FLOP/s × efficiency)")
    applies_to: Literal["model", "update"] = Field(
        default="model", description="what is encoded: the model itself, or its difference from the model the "
        "lower end (the device, or the edge server) last received on this tier, the receiver adding it back "
        "(update: both ends know that reference model)")

    @property
    def identity(self) -> bool:
        """True for the channel that changes nothing (today's bytes and bits)."""
        return False

    @property
    def measures_bytes(self) -> bool:
        """Whether its message's length depends on the values (opt-in ``exact_bytes``): the driver then charges
        the length measured on the encoded message, and ``encoded_bytes`` is the length timing-only runs
        charge. A channel with an ``exact_bytes`` setting measures when it is on; otherwise the length is fixed
        by the shape and the settings."""
        return bool(getattr(self, "exact_bytes", False))

    @property
    def resets_on_migration(self) -> bool:
        """Whether the sender's kept state is cleared when its messages go to another receiver than its last
        (a device moved to another edge server); False by default."""
        return False

    def encoded_bytes(self, elements: int) -> int:
        """Bytes of one message of ``elements`` values on the wire (from the shape and settings only)."""
        return 4 * int(elements)

    def encode_flops(self, elements: int) -> float:
        """Work of encoding one message of ``elements`` values, in FLOP equivalents."""
        return 0.0

    def decode_flops(self, elements: int) -> float:
        """Work of decoding one message of ``elements`` values, in FLOP equivalents."""
        return 0.0

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """The message for ``vector`` (``state``: the sender's kept arrays on this direction, updated in
        place by a channel that keeps state; ``rng``: a stream of the run's seed for this message)."""
        return vector

    def decode(self, message: Any, elements: int) -> Any:
        """The receiver's vector (float32, ``elements`` long) from ``message``."""
        return message

    def problems(self, key: str) -> list[Problem]:
        """Load-time problems of this channel's settings at ``key`` (none by default)."""
        return []

    # -- under secure aggregation (hierfl.channels.math.field) ---------------------------------------------------
    def field_levels(self) -> int | None:
        """How many integers one value of the message is, when the channel maps every sender's values onto one
        integer grid they all share, so that secure aggregation's sum of the senders' integers in its finite
        field decodes to the sum of their values (quantise, then mask): the field then needs ``⌈log₂(n·L)⌉``
        bits for ``n`` senders. None (the default): its messages cannot be summed under masking
        (:meth:`field_refusal` says why)."""
        return None

    def field_refusal(self) -> str:
        """Why this channel's messages cannot be summed under secure aggregation (when :meth:`field_levels` is
        None)."""
        return "its messages are not integers on a grid every sender shares"


@CHANNELS.register
class NoChannel(Channel):
    """``none``: the model travels as it is (float32, 4 bytes per parameter; no encoding work)."""

    name: Literal["none"] = "none"

    @property
    def identity(self) -> bool:
        """The identity."""
        return True

    @field_validator("applies_to")
    @classmethod
    def _model_only(cls, value: str) -> str:
        """The identity has no reference model to differ from: ``applies_to: update`` would be ignored."""
        if value != "model":
            raise ValueError("channel 'none' sends the model as it is; allowed: model")
        return value


class _Cast(Channel):
    """A 16-bit cast: 2 bytes per value plus ``header_bytes``, ``ops_per_element`` each way."""

    header_bytes: NonNegativeInt = Field(default=0, description="bytes added to each message (framing of your "
                                         "own; 0: the receiver knows the layout, a cast needs no header) [D]")
    encode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents per value to encode (one "
                                         "conversion) [D]")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents per value to decode [D]")

    def encoded_bytes(self, elements: int) -> int:
        """2 bytes per value, plus the header."""
        return 2 * int(elements) + int(self.header_bytes)

    def encode_flops(self, elements: int) -> float:
        """``encode_ops`` per value."""
        return float(self.encode_ops) * int(elements)

    def decode_flops(self, elements: int) -> float:
        """``decode_ops`` per value."""
        return float(self.decode_ops) * int(elements)


@CHANNELS.register
class Fp16Channel(_Cast):
    """``fp16``: IEEE half precision (5 exponent bits, 10 mantissa bits), rounded to nearest even.

    Values beyond half precision's range (±65 504) saturate at its largest value rather than becoming
    infinite (a plain cast would turn the model into NaNs at the next step) [D]; NaN stays NaN.
    """

    name: Literal["fp16"] = "fp16"

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """The vector as float16."""
        return fp16_round(vector)

    def decode(self, message: Any, elements: int) -> Any:
        """Back to float32 (exact)."""
        return np.asarray(message, dtype=np.float32)

    def field_levels(self) -> int | None:
        """Every finite fp16 value is an integer multiple of 2^−24 within ±65 504: an exact fixed-point grid of
        ``2^41 − 2^30 + 1`` integers (the sum in the field is the exact sum, at 41 + log₂ n bits a value)."""
        return FP16_LEVELS


@CHANNELS.register
class Bf16Channel(_Cast):
    """``bf16``: bfloat16 (float32's 8 exponent bits, 7 mantissa bits), rounded to nearest even.

    Computed in numpy on the float32 bits (:func:`bf16_round`); the same values as torch's cast.
    """

    name: Literal["bf16"] = "bf16"

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """The bfloat16 bits as uint16."""
        return bf16_round(vector)

    def decode(self, message: Any, elements: int) -> Any:
        """Back to float32 (exact)."""
        return bf16_to_float32(message)

    def field_refusal(self) -> str:
        """Float32's exponent range: no fixed-point grid of its values fits a 62-bit field."""
        return "bfloat16 keeps the float32 exponent range: as fixed point its values need about 270 bits, above 62"


# the update compressors register themselves (they subclass Channel: imported once it is defined)
from hierfl.channels.rules import quantise, sparse  # noqa: E402,F401
