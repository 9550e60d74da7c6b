"""``channels:``: the transfer channel on each link direction (:mod:`hierfl.channels`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hierfl.channels.math import DIRECTIONS
from hierfl.channels.rules import CHANNELS, Channel
from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem

__all__ = ["ChannelsSection"]


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

    uplink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of every uplink direction the protocol honours, unless its own key is "
        "set (none, fp16, bf16, …)")
    downlink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of every downlink direction the protocol honours, unless its own key is set")
    device_uplink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of device → server model messages (null: uplink's, else none)")
    device_downlink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of server → device model messages (null: downlink's, else none)")
    edge_uplink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of edge server → cloud model messages (null: uplink's, else none)")
    edge_downlink: CHANNELS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="channel of cloud → edge server model messages (null: downlink's, else none)")

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
                elif not ch.identity:
                    problems.extend(self._placement(f"channels.{way}", way, ch, honoured))
        for direction in DIRECTIONS:
            ch = getattr(self, direction)
            if ch is None:
                continue
            key = f"channels.{direction}"
            problems.extend(ch.problems(key))
            if ch.identity:
                continue
            problems.extend(self._placement(key, direction, ch, honoured))
            if direction not in honoured:
                problems.append(self._refusal(key, ch, protocol, honoured))
            elif direction in edges and num_edges == 0:
                problems.append(Problem(key, "no edge servers: no edge ↔ cloud messages to encode; allowed: none",
                                        ch.name, refused=True))
        return problems

    @staticmethod
    def _placement(key: str, direction: str, ch: Channel, honoured: tuple[str, ...]) -> list[Problem]:
        """A channel that keeps per-sender state only on an uplink (a broadcast's receivers would share the
        sender's one residual); ``applies_to: update`` on an uplink only where the protocol hands the senders
        their models through the matching downlink (the reference both ends must know)."""
        out: list[Problem] = []
        if ch.keeps_state and direction.endswith("downlink"):
            out.append(Problem(key, f"channel {ch.name!r} keeps per-sender state (error feedback): a server's "
                               "broadcast to many receivers would share one; allowed on downlinks: a stateless "
                               "channel (none, fp16, bf16, qsgd)", ch.name, refused=True))
        if ch.measures_bytes and direction.endswith("downlink"):
            out.append(Problem(key, f"channel {ch.name!r} measures its bytes on the encoded message (exact_bytes), "
                               "but a download is coded when it arrives, after its bytes were charged; allowed on "
                               "downlinks: a channel of fixed length", ch.name, refused=True))
        if ch.applies_to == "update" and direction.endswith("uplink"):
            pairs = [d.replace("uplink", "downlink") for d in DIRECTIONS if d.endswith("uplink")
                     and (direction == "uplink" or d == direction) and d in honoured]
            missing = [d for d in pairs if d not in honoured]
            if missing:
                out.append(Problem(f"{key}.applies_to", "the protocol does not hand the senders their models "
                                   f"through {', '.join(missing)}: no reference model to take the update from; "
                                   "allowed: model", ch.applies_to, refused=True))
        return out

    @staticmethod
    def _refusal(key: str, ch: Channel, protocol: Any, honoured: tuple[str, ...]) -> Problem:
        why = ("its devices exchange no model with a server" if getattr(protocol, "serverless", False)
               or getattr(protocol, "exchanges", "weights") != "weights" else
               "it does not hand its receivers the decoded model of such messages")
        where = f"; it honours channels on {', '.join(honoured)}" if honoured else ""
        return Problem(key, f"protocol {protocol.name!r} cannot honour a transfer channel here ({why}); "
                       f"allowed: none{where}", ch.name, refused=True)
