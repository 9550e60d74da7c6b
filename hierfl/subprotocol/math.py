"""The arithmetic of sub-protocol rounds (numpy-free, standard library only): what one round costs
(:class:`SubRound`), what it is planned from (:class:`RoundView`), message sizes that grow with the
participants, and the survivors' threshold."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RoundView", "SubRound", "round_bytes", "fraction_threshold"]


@dataclass(frozen=True)
class RoundView:
    """What a sub-protocol knows when it plans round ``round`` (0-based) at one aggregation point.

    ``participants``: senders the sub-protocol started with (N); ``alive``: those still taking part
    now; ``dropped``: those lost so far (``participants − alive``); ``dropped_last``: those lost in
    the round before this one; ``model_bytes``: one model message; ``tier``: ``cloud`` or ``edge``;
    ``source``: whether the senders are ``device`` s or ``edge`` servers.
    """

    round: int
    participants: int
    alive: int
    dropped: int
    dropped_last: int
    model_bytes: int
    tier: str
    source: str = "device"

    @property
    def peers(self) -> int:
        """Other senders still taking part (``alive − 1``): the size of a full-graph neighbourhood."""
        return max(self.alive - 1, 0)


@dataclass(frozen=True)
class SubRound:
    """One round's cost, per sender still taking part.

    ``down_bytes``: the aggregator → sender message (none when 0: the round starts at the sender);
    ``sender_flops`` / ``sender_s``: the sender's work after it (FLOPs at the sender's FLOP/s, or
    seconds; a device's slowdown scales both); ``up_bytes``: the sender → aggregator message (none
    when 0); ``server_flops`` / ``server_s``: the aggregator's work once every sender is in (at
    ``servers.<tier>``'s FLOP/s). ``keeps_lost_inputs``: a participant lost during this round keeps
    its input in the aggregate (it no longer counts towards the threshold).
    """

    name: str
    up_bytes: int = 0
    down_bytes: int = 0
    sender_flops: float = 0.0
    sender_s: float = 0.0
    server_flops: float = 0.0
    server_s: float = 0.0
    keeps_lost_inputs: bool = False


def round_bytes(constant: int, per_peer: int, model_fraction: float, peers: int, model_bytes: int) -> int:
    """``constant + per_peer · peers + round(model_fraction · model_bytes)``: one message of a round, whose
    size may grow with the other participants (one key share each, Bonawitz et al., CCS 2017) and the model."""
    return int(constant + per_peer * peers + round(model_fraction * model_bytes))


def fraction_threshold(participants: int, minimum: int, fraction: float) -> int:
    """``max(minimum, ⌈fraction · participants⌉)`` (a small epsilon keeps 2/3 · 3 at 2)."""
    return max(int(minimum), math.ceil(fraction * participants - 1e-9))
