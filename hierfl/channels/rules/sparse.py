"""Sparsifying channels with error feedback: ``topk_ef``, ``randk_ef`` (Stich, Cordonnier, Jaggi, "Sparsified SGD
with Memory", NeurIPS 2018) and ``dgc`` (Lin, Han, Mao, Wang, Dally, "Deep Gradient Compression", ICLR 2018).

Each keeps ``k = ⌈ratio·m⌉`` values (at least one) of the message's ``m``; the wire formats are in
:mod:`hierfl.channels.math.codec`. ``k`` is taken over the whole message (the channel sees one flat vector, not the
model's tensors) [D].
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat

from hierfl.channels.math.codec import (kept, randk_bytes, randk_decode, randk_encode, sparse_bytes, sparse_decode,
                                   sparse_encode, top_indices)
from hierfl.channels.rules.compressor import Compressor, ErrorFeedback
from hierfl.channels.rules import CHANNELS

__all__ = ["TopkEfChannel", "RandkEfChannel", "DgcChannel"]


class _Sparse(Compressor):
    """Shared knobs: the ratio kept, the values' precision; decoding costs ``decode_ops`` per kept value."""

    ratio: PositiveFloat = Field(default=0.01, le=1.0, description="fraction of the values sent, k = ⌈ratio·m⌉ "
                                 "(at least 1) [D: 1 %]")
    values: Literal["fp32", "fp16"] = Field(default="fp32", description="precision of the values sent (4 or 2 bytes "
                                            "each) [D: fp32]")

    @property
    def value_bytes(self) -> int:
        """Bytes of one sent value."""
        return 2 if self.values == "fp16" else 4

    def decode_flops(self, elements: int) -> float:
        """``decode_ops`` per kept value."""
        return float(self.decode_ops) * kept(elements, self.ratio)

    def field_refusal(self) -> str:
        """Each sender keeps its own positions and float values: their masked sum has no meaning."""
        return "each sender sends its own k positions with float values: the sum would add values at different places"


class _TopSparse(_Sparse):
    """Top-k messages: the index scheme, the format."""

    indices: Literal["auto", "int32", "bitmap"] = Field(
        default="auto", description="how the kept indices travel: 32-bit absolute indices (4k bytes), a bitmap "
        "(⌈m/8⌉ bytes), or auto, the smaller of the two for the message's shape [D: auto]")
    exact_bytes: bool = Field(
        default=False, description="send the indices as varint gaps where that is shorter on the actual index "
        "set, and charge the measured length: bytes and times then depend on the model's values (timing-only "
        "runs charge the fixed length, an upper bound) [D: false]")

    def encoded_bytes(self, elements: int) -> int:
        """A 1-byte tag, the indices, ``k`` values (with ``exact_bytes``: the most a message takes)."""
        return sparse_bytes(elements, kept(elements, self.ratio), self.indices, self.value_bytes)

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """The ``k`` largest magnitudes of ``p``."""
        return sparse_encode(p, top_indices(p, kept(p.size, self.ratio)), self.indices, self.value_bytes,
                             self.exact_bytes)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """The dense vector, zero where nothing was sent."""
        return sparse_decode(message, elements, kept(elements, self.ratio), self.value_bytes)


@CHANNELS.register
class TopkEfChannel(_TopSparse, ErrorFeedback):
    """``topk_ef``: top-k sparsification with error feedback (MEM-SGD, Stich et al. 2018).

    ``p = v + e``; the ``k`` largest ``|p|`` are sent with their indices; ``e ← p − sent``. Bytes:
    ``1 + min(4k, ⌈m/8⌉) + k·4`` (``indices: auto``, fp32 values).
    """

    name: Literal["topk_ef"] = "topk_ef"
    encode_ops: NonNegativeFloat = Field(default=10.0, description="FLOP equivalents of encoding per value (8 for "
                                         "the selection, 2 for error feedback) [D]")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of decoding per kept value [D]")


@CHANNELS.register
class RandkEfChannel(_Sparse, ErrorFeedback):
    """``randk_ef``: random-k sparsification with error feedback (Stich et al. 2018).

    The sender draws a seed from the message's stream; ``k`` distinct indices follow from it on both ends, so
    the message is the 8-byte seed and ``k`` values (no index bytes). ``rescale`` multiplies the values by
    ``m/k`` (the unbiased variant; MEM-SGD leaves them unscaled [D: false]).
    """

    name: Literal["randk_ef"] = "randk_ef"
    rescale: bool = Field(default=False, description="send m/k × the values (unbiased without error feedback) [D]")
    encode_ops: NonNegativeFloat = Field(default=2.0, description="FLOP equivalents of encoding per value [D]")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of decoding per kept value [D]")
    rng_ops: NonNegativeFloat = Field(default=4.0, description="FLOP equivalents of one random draw per kept "
                                      "value, at each end (both draw the indices) [D]")

    def encode_flops(self, elements: int) -> float:
        """``encode_ops`` per value and a draw per kept value."""
        return float(self.encode_ops) * int(elements) + float(self.rng_ops) * kept(elements, self.ratio)

    def decode_flops(self, elements: int) -> float:
        """``decode_ops`` and a draw per kept value."""
        return (float(self.decode_ops) + float(self.rng_ops)) * kept(elements, self.ratio)

    def encoded_bytes(self, elements: int) -> int:
        """The seed and ``k`` values."""
        return randk_bytes(kept(elements, self.ratio), self.value_bytes)

    def _scale(self, elements: int) -> float:
        return elements / kept(elements, self.ratio) if self.rescale else 1.0

    def pack(self, p: np.ndarray, rng: np.random.Generator) -> bytes:
        """A seed and ``p`` at the indices it draws."""
        return randk_encode(p, kept(p.size, self.ratio), self.value_bytes, self._scale(p.size), rng)

    def unpack(self, message: bytes, elements: int) -> np.ndarray:
        """The dense vector, zero where nothing was sent."""
        return randk_decode(message, elements, kept(elements, self.ratio), self.value_bytes)


@CHANNELS.register
class DgcChannel(_TopSparse):
    """``dgc``: Deep Gradient Compression's sparsification with momentum correction and factor masking (Lin et al.
    2018): ``u ← μu + v``; ``w ← w + u``; the top-k of ``w`` are sent; ``w`` and ``u`` are zeroed where sent.

    The reference keeps 0.1 % (``ratio: 0.001``); the threshold is the exact top-k (the reference estimates it on
    a 1 % sample, whose count varies with the values: the charged work is that of the sampled estimate, the
    length that of exactly ``k``) [D]. No warm-up of the ratio and no local clipping [D]. ``u`` and ``w`` are the
    sender's state, saved in checkpoints.
    """

    name: Literal["dgc"] = "dgc"
    keeps_state: ClassVar[bool] = True
    ratio: PositiveFloat = Field(default=0.001, le=1.0, description="fraction of the values sent (at least 1) "
                                 "[D: 0.1 %, the reference's compress_ratio]")
    momentum: float = Field(default=0.9, ge=0.0, lt=1.0, description="momentum μ of the correction [D]")
    reset_on_migration: bool = Field(default=False, description="clear the sender's accumulators when its messages "
                                     "go to another receiver than its last [D: false]")
    encode_ops: NonNegativeFloat = Field(default=4.08, description="FLOP equivalents of encoding per value "
                                         "(2 + 0.01·8 sampled threshold + 2 accumulation) [D]")
    decode_ops: NonNegativeFloat = Field(default=1.0, description="FLOP equivalents of decoding per kept value [D]")

    @property
    def resets_on_migration(self) -> bool:
        """``reset_on_migration``."""
        return bool(self.reset_on_migration)

    def encode(self, vector: Any, state: dict[str, Any], rng: np.random.Generator) -> Any:
        """Accumulate with momentum correction, send the top-k of the accumulator, mask both where sent."""
        g = np.asarray(vector, dtype=np.float32).reshape(-1)
        u, w = state.get("momentum"), state.get("accumulated")
        if u is None or u.shape != g.shape:
            u, w = np.zeros_like(g), np.zeros_like(g)
        u = (np.float32(self.momentum) * u + g).astype(np.float32)
        w = (w + u).astype(np.float32)
        idx = top_indices(w, kept(g.size, self.ratio))
        message = sparse_encode(w, idx, self.indices, self.value_bytes, self.exact_bytes)
        w[idx] = 0.0
        u[idx] = 0.0
        state["momentum"], state["accumulated"] = u, w
        return message
