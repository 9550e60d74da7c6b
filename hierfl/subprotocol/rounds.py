"""``rounds``: a configurable sub-protocol — a list of message rounds with their bytes and compute.

It emulates the cost of any extra exchange between an aggregator and its senders before it
aggregates — a key agreement, a masking exchange, a consistency check — without running its
cryptography: each round says what every sender receives and sends (a constant, plus a part per
other participant still taking part, plus a share of the model's size) and the work each sender and
the aggregator does. For example, the key-sharing round of secure aggregation sends one encrypted
share per other participant (Bonawitz et al., CCS 2017: about 106 bytes each), so
``{up_bytes: 0, up_per_peer_bytes: 106}``.

``threshold``: fewest participants that must be left after every round, ``max(min_survivors,
⌈min_fraction · N⌉)`` with N the participants it started with; below it the aggregation point
aggregates nothing this round.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.subprotocol.config import SUBPROTOCOLS, RoundView, SubProtocolConfig, SubRound, fraction_threshold

__all__ = ["RoundSpec", "RoundsSubProtocol"]


class RoundSpec(ConfigModel):
    """One round of ``rounds``: bytes per sender each way, per-sender and aggregator compute."""

    name: str | None = Field(default=None, description="the round's name in the trace (default r<index>)")
    down_bytes: NonNegativeInt = Field(default=0, description="aggregator → each sender: constant bytes")
    down_per_peer_bytes: NonNegativeInt = Field(
        default=0, description="aggregator → each sender: bytes per other participant still taking part (N − 1)")
    down_model_fraction: NonNegativeFloat = Field(default=0.0, description="aggregator → each sender: this share "
                                                  "of one model message's bytes")
    up_bytes: NonNegativeInt = Field(default=0, description="each sender → aggregator: constant bytes")
    up_per_peer_bytes: NonNegativeInt = Field(
        default=0, description="each sender → aggregator: bytes per other participant still taking part (N − 1)")
    up_model_fraction: NonNegativeFloat = Field(default=0.0, description="each sender → aggregator: this share of "
                                                "one model message's bytes")
    sender_flops: NonNegativeFloat = Field(default=0.0, description="FLOPs each sender computes after the "
                                           "download (at its FLOP/s)")
    sender_flops_per_peer: NonNegativeFloat = Field(default=0.0, description="FLOPs each sender computes per "
                                                    "other participant still taking part")
    server_flops: NonNegativeFloat = Field(default=0.0, description="FLOPs the aggregator computes once every "
                                           "sender is in (at servers.<tier>'s FLOP/s)")
    server_flops_per_sender: NonNegativeFloat = Field(default=0.0, description="FLOPs the aggregator computes "
                                                      "per sender still taking part")
    keeps_lost_inputs: bool = Field(default=False, description="a participant lost during this round keeps its "
                                    "input in the aggregate (an unmasking round recovers it)")


@SUBPROTOCOLS.register
class RoundsSubProtocol(SubProtocolConfig):
    """``{name: rounds, rounds: [{up_bytes: 74, down_per_peer_bytes: 72}, …], min_survivors: 2}``."""

    name: Literal["rounds"] = "rounds"
    rounds: list[RoundSpec] = Field(min_length=1, description="the message rounds, in order")
    min_survivors: PositiveInt = Field(default=1, description="fewest participants left after every round")
    min_fraction: float = Field(default=0.0, ge=0.0, le=1.0, description="fewest participants left after every "
                                "round, as a share of those it started with")

    @classmethod
    def example(cls) -> RoundsSubProtocol:
        """A minimal valid config: one round of 64 bytes each way."""
        return cls(rounds=[RoundSpec(down_bytes=64, up_bytes=64)])

    def plan(self, view: RoundView) -> SubRound | None:
        """Round ``view.round`` with its bytes and work for ``view.alive`` participants."""
        if view.round >= len(self.rounds):
            return None
        r = self.rounds[view.round]
        peers = view.peers
        return SubRound(
            name=r.name or f"r{view.round}",
            down_bytes=int(r.down_bytes + r.down_per_peer_bytes * peers + round(r.down_model_fraction * view.model_bytes)),
            up_bytes=int(r.up_bytes + r.up_per_peer_bytes * peers + round(r.up_model_fraction * view.model_bytes)),
            sender_flops=r.sender_flops + r.sender_flops_per_peer * peers,
            server_flops=r.server_flops + r.server_flops_per_sender * view.alive,
            keeps_lost_inputs=r.keeps_lost_inputs)

    def threshold(self, participants: int) -> int:
        """``max(min_survivors, ⌈min_fraction · N⌉)``."""
        return fraction_threshold(participants, self.min_survivors, self.min_fraction)

    def charges_sender_flops(self) -> bool:
        return any(r.sender_flops > 0 or r.sender_flops_per_peer > 0 for r in self.rounds)
