"""Transfer channels: what a model message becomes on a link (``channels:``).

A *channel* sits on one link direction of one tier. The sender encodes the message's vector, the
encoded message crosses the link, the receiver decodes it; the receiver's model is the decoded vector
(a lossy channel's error is really applied, so learning sees it). A channel declares, for a message
of ``m`` elements:

* :meth:`Channel.encoded_bytes` — its size on the wire, a function of ``m`` and the channel's settings
  only: emulated time never depends on model values (virtual time is the only clock);
* :meth:`Channel.encode_flops` / :meth:`Channel.decode_flops` — the work of encoding and decoding,
  charged in emulated time at the sender's and the receiver's compute speed (a device's FLOP/s,
  an edge server's or the cloud's ``servers:`` figure), divided by ``efficiency`` (vector ops are
  memory-bound: a fraction of a processor's training FLOP/s);
* :meth:`Channel.encode` / :meth:`Channel.decode` — the vector to the message and back (numpy arrays
  today; the signatures do not fix the array type);
* ``keeps_state`` — whether it keeps per-sender state across messages (an error-feedback residual).
  Such state is a dictionary of arrays per (link direction, sender), kept beside the servers' task
  state and saved in checkpoints, like a job method's per-device state.

The link directions (:data:`DIRECTIONS`) follow the scenario's tier vocabulary (``bytes_device_tier``,
``bytes_edge_tier``): ``device_uplink`` (a device to its edge server, or to the cloud where there are
no edge servers), ``device_downlink`` (back), ``edge_uplink`` (an edge server to the cloud) and
``edge_downlink`` (back). Device ↔ device hops carry no channel.

A channel is a plug-in like the others: a config model registered in :data:`CHANNELS` under the name
used in YAML (``hierfl.plugin`` exports both). This package ships ``none`` (the identity: today's
bytes and bits), ``fp16`` and ``bf16``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry

__all__ = ["CHANNELS", "Channel", "NoChannel", "Fp16Channel", "Bf16Channel", "ChannelsSection", "DIRECTIONS",
           "direction_of", "bf16_round", "fp16_round", "FP16_MAX"]

CHANNELS: Registry = Registry("transfer channel")

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

    @property
    def identity(self) -> bool:
        """True for the channel that changes nothing (today's bytes and bits)."""
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


@CHANNELS.register
class NoChannel(Channel):
    """``none``: the model travels as it is (float32, 4 bytes per parameter; no encoding work)."""

    name: Literal["none"] = "none"

    @property
    def identity(self) -> bool:
        """The identity."""
        return True


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


def fp16_round(vector: np.ndarray) -> np.ndarray:
    """IEEE half precision (numpy's round-to-nearest-even cast), values beyond ±65 504 saturated first."""
    x = np.asarray(vector, dtype=np.float32)
    return np.clip(x, -FP16_MAX, FP16_MAX).astype(np.float16)


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


def bf16_round(vector: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of a float32 vector: its top 16 bits, rounded to nearest, ties to even.

    ``bits + 0x7FFF + (bit 16 of bits)``, then the low half dropped (what torch's ``.to(torch.bfloat16)``
    does, bit for bit); a NaN becomes the quiet NaN ``0x7FC0``, so rounding never turns it into an infinity
    (torch's own NaN payload may differ: a NaN stays a NaN either way). Values that round past bfloat16's largest finite value become ±inf, as in torch.
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


class ChannelsSection(ConfigModel):
    """``channels: {device_uplink: fp16, edge_uplink: bf16, downlink: none, …}``.

    The channel on each link direction: ``device_uplink`` (a device to its edge server, or to the cloud
    without edge servers), ``device_downlink`` (back), ``edge_uplink`` (an edge server to the cloud),
    ``edge_downlink`` (back). ``uplink`` / ``downlink`` set every direction of that way the protocol
    honours, where no tier key of its own is given. Unset: ``none`` (models travel as float32: today's bytes
    and bits). A channel applies to model messages (a transfer sized by the model); messages a protocol
    sizes itself (class scores, a control message) are not encoded. The protocol declares the directions it
    honours (``ProtocolConfig.channel_links``); a tier key elsewhere is refused.
    """

    uplink: CHANNELS.union() | None = Field(default=None, description="channel of every uplink direction the "  # type: ignore[valid-type]
                                            "protocol honours, unless its own key is set (none, fp16, bf16, …)")
    downlink: CHANNELS.union() | None = Field(default=None, description="channel of every downlink direction the "  # type: ignore[valid-type]
                                              "protocol honours, unless its own key is set")
    device_uplink: CHANNELS.union() | None = Field(default=None, description="channel of device → server model "  # type: ignore[valid-type]
                                                   "messages (null: uplink's, else none)")
    device_downlink: CHANNELS.union() | None = Field(default=None, description="channel of server → device "  # type: ignore[valid-type]
                                                     "model messages (null: downlink's, else none)")
    edge_uplink: CHANNELS.union() | None = Field(default=None, description="channel of edge server → cloud "  # type: ignore[valid-type]
                                                 "model messages (null: uplink's, else none)")
    edge_downlink: CHANNELS.union() | None = Field(default=None, description="channel of cloud → edge server "  # type: ignore[valid-type]
                                                   "model messages (null: downlink's, else none)")

    def resolved(self, honoured: tuple[str, ...]) -> dict[str, Channel]:
        """The channel of each direction, other than the identity: a tier's own key, else (where the protocol
        honours the direction) its way's shorthand."""
        out: dict[str, Channel] = {}
        for direction in DIRECTIONS:
            ch = getattr(self, direction)
            if ch is None and direction in honoured:
                ch = getattr(self, direction.split("_")[1])
            if ch is not None and not ch.identity:
                out[direction] = ch
        return out

    @property
    def default(self) -> bool:
        """No channel anywhere (today's transfers)."""
        return all(getattr(self, k) is None or getattr(self, k).identity for k in ("uplink", "downlink", *DIRECTIONS))

    def problems(self, protocol: Any, num_edges: int) -> list[Problem]:
        """Channels only where the protocol honours them (its ``channel_links``) and where the tier exists."""
        problems: list[Problem] = []
        honoured = tuple(getattr(protocol, "channel_links", ()))
        edges = ("edge_uplink", "edge_downlink")
        for way in ("uplink", "downlink"):
            ch = getattr(self, way)
            if ch is not None:
                problems.extend(ch.problems(f"channels.{way}"))
                if not ch.identity and not any(d.endswith(way) and (d not in edges or num_edges) for d in honoured):
                    problems.append(self._refusal(f"channels.{way}", ch, protocol, honoured))
        for direction in DIRECTIONS:
            ch = getattr(self, direction)
            if ch is None or ch.identity:
                continue
            key = f"channels.{direction}"
            problems.extend(ch.problems(key))
            if direction not in honoured:
                problems.append(self._refusal(key, ch, protocol, honoured))
            elif direction in edges and num_edges == 0:
                problems.append(Problem(key, "no edge servers: no edge ↔ cloud messages to encode; allowed: none",
                                        ch.name, refused=True))
        return problems

    @staticmethod
    def _refusal(key: str, ch: Channel, protocol: Any, honoured: tuple[str, ...]) -> Problem:
        why = ("its devices exchange no model with a server" if getattr(protocol, "serverless", False)
               or getattr(protocol, "exchanges", "weights") != "weights" else
               "it does not hand its receivers the decoded model of such messages")
        where = f"; it honours channels on {', '.join(honoured)}" if honoured else ""
        return Problem(key, f"protocol {protocol.name!r} cannot honour a transfer channel here ({why}); "
                       f"allowed: none{where}", ch.name, refused=True)
