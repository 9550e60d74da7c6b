"""Bases of the update compressors (``qsgd``, ``sign_ef``, ``topk_ef``, ``randk_ef``, ``dgc``): their shared knobs
and error feedback.

A compressor is a :class:`~hierfl.channels.rules.Channel` whose message is a real byte string (the wire formats of
:mod:`hierfl.channels.math.codec`), whose length the driver charges, and which by default encodes the model's update
(``applies_to: update``: the difference from the model the lower end last received on this tier, as compressors
are meant to be used [D]). Encoding and decoding cost ``encode_ops`` / ``decode_ops`` FLOP equivalents per value
(or per kept value), with the defaults of the specification's compute table [D].
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat

from hierfl.channels.rules import Channel

__all__ = ["Compressor", "ErrorFeedback"]


class Compressor(Channel):
    """A channel whose message is an encoder's byte string, applied by default to the update."""

    applies_to: Literal["model", "update"] = Field(
        default="update", description="what is encoded: the update (the model minus the model the lower end last "
        "received on this tier, added back by the receiver) or the model itself [D: update]")
    encode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of encoding per value")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of decoding per value")

    def encode_flops(self, elements: int) -> float:
        """``encode_ops`` per value."""
        return float(self.encode_ops) * int(elements)

    def decode_flops(self, elements: int) -> float:
        """``decode_ops`` per value."""
        return float(self.decode_ops) * int(elements)

    # the wire format: subclasses implement these two on the vector to send (after error feedback)
    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """The message for ``p``."""
        raise NotImplementedError

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """The float32 vector a receiver decodes from ``message``."""
        raise NotImplementedError

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """The encoder's byte string for ``vector``."""
        return self.pack(np.asarray(vector, dtype=np.float32).reshape(-1), rng)

    def decode(self, message: Any, elements: int) -> Any:
        """The receiver's float32 vector."""
        return self.unpack(message, elements)


class ErrorFeedback(Compressor):
    """A compressor with error feedback (Stich, Cordonnier, Jaggi, NeurIPS 2018; Karimireddy et al., ICML 2019):
    the sender sends ``C(v + e)`` and keeps ``e ← (v + e) − C(v + e)``, the mass not delivered, for its next message.

    The residual ``e`` is the sender's state (``state["residual"]``, float32, one per link direction and sender),
    saved in checkpoints; a sender not sampled keeps it. ``reset_on_migration`` clears it when the sender's
    messages go to another receiver than its last (a device moved to another edge server).
    """

    keeps_state: ClassVar[bool] = True
    reset_on_migration: bool = Field(
        default=False, description="clear the sender's error-feedback residual when its messages go to another "
        "receiver than its last (a device moved to another edge server) [D: false: the device keeps it]")

    @property
    def resets_on_migration(self) -> bool:
        """``reset_on_migration``."""
        return bool(self.reset_on_migration)

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """``C(v + e)``; the residual becomes what the receiver will not get (``p − decode(message)``)."""
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        residual = state.get("residual")
        p = v if residual is None or residual.shape != v.shape else (v + residual).astype(np.float32)
        message = self.pack(p, rng)
        state["residual"] = (p - self.unpack(message, p.size)).astype(np.float32)
        return message
