"""The public API of sub-protocols at an aggregation point (exported by :mod:`hierfl.plugin`).

A sub-protocol is a sequence of message rounds between an aggregation point (the cloud, an edge
server) and the senders of one of its rounds (devices, or edge servers at a cloud over edges),
run after their updates arrived and before the point aggregates them. Each round, every sender
still taking part receives ``down_bytes`` from the aggregator, computes, and sends ``up_bytes``
back; when the last one is in, the aggregator computes; then the next round begins. The rounds are
real transfers on the emulated links (contention, latency, link events, churn), so their cost is
emulated time, never a formula added to a round's length.

What a round costs is planned when it begins, from a :class:`RoundView` (how many participants
the sub-protocol started with, how many are still in, how many were lost, the model's size): bytes
that grow with the participants (``O(N)`` key shares of secure aggregation, Bonawitz et al., CCS
2017) or with a neighbourhood (``O(log N)`` in SecAgg+, Bell et al., CCS 2020), and compute per
sender and at the aggregator. It never sees a model's values: the emulated time of a sub-protocol
is the same with and without training (``training.trainer: none``).

A participant that goes offline during the sub-protocol is dropped: its input is left out of the
aggregate (unless it was lost in a round that ``keeps_lost_inputs``: secure aggregation's unmasking
round recovers a dropped client's masks from the others' shares and keeps its input), and the
following rounds are planned without it. When fewer than :meth:`SubProtocolConfig.threshold`
participants are left, the sub-protocol fails and the aggregation point aggregates nothing.

A protocol runs one with ``env.tier(tier, entity).prepare(participants, done=..., payload=...)``
(:meth:`hierfl.env.api.Aggregator.prepare`) and hears ``on_<done>`` with a :class:`SubProtocolDone`.
The scenario places one per tier (``subprotocol: {cloud: ..., edge: ...}``, :class:`~hierfl.subprotocol.section.SubProtocolSection`),
where the protocol declares it can run one (``ProtocolConfig.subprotocol_tiers``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.env.events import Payload

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["SUBPROTOCOLS", "SubProtocolConfig", "SubRound", "RoundView", "SubProtocolDone", "NoSubProtocol",
           "fraction_threshold"]

SUBPROTOCOLS: Registry = Registry("sub-protocol")


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


@dataclass(frozen=True)
class SubProtocolDone(Payload):
    """The payload of ``on_<done>``: the sub-protocol at ``(tier, entity)`` is over.

    ``participants``: the senders it started with; ``survivors``: those whose inputs the point
    aggregates (sorted); ``dropped``: those lost on the way (sorted); ``failed``: fewer than the
    threshold were left (or the aggregator went down: ``reason``), and the point aggregates
    nothing; ``rounds``: rounds completed; ``start`` / ``end``: virtual times; ``payload``: the
    protocol's own, given to ``prepare``.
    """

    tier: str
    entity: int
    participants: tuple[int, ...]
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    failed: bool
    reason: str | None
    rounds: int
    start: float
    end: float
    payload: Any = None

    @property
    def ok(self) -> bool:
        """Whether the point may aggregate the survivors' inputs."""
        return not self.failed


class SubProtocolConfig(ConfigModel):
    """Base of every sub-protocol's config: subclass it, name it (``name: Literal["..."]``), register
    it with ``@SUBPROTOCOLS.register`` and implement :meth:`plan` (and :meth:`threshold`)."""

    name: str
    sender_gflops: PositiveFloat | None = Field(
        default=None, description="FLOP/s of a device sender, in GFLOP/s (null: its tier's gflops from devices.tiers; "
                                  "needed when devices have no tiers and a round charges sender FLOPs)")

    @property
    def none(self) -> bool:
        """Whether this is ``none`` (no sub-protocol: the point aggregates as it always did)."""
        return False

    def plan(self, view: RoundView) -> SubRound | None:
        """Round ``view.round``'s cost, or None when the sub-protocol is over (after its last round)."""
        raise NotImplementedError

    def threshold(self, participants: int) -> int:
        """Fewest participants that must still take part after every round (below it the sub-protocol fails)."""
        return 1

    def charges_sender_flops(self) -> bool:
        """Whether any round may charge FLOPs at a sender (then a device needs a FLOP/s: its tier, or ``sender_gflops``)."""
        return True

    def problems(self, key: str, scenario: Scenario) -> list[Problem]:
        """Problems of this sub-protocol in ``scenario`` (``key``: its path)."""
        if (self.charges_sender_flops() and self.sender_gflops is None and scenario.devices.tiers is None):
            return [Problem(f"{key}.sender_gflops", "a round charges FLOPs at the senders but the devices have no "
                            "tiers (devices.tiers) to take their FLOP/s from; set sender_gflops", None)]
        return []


@SUBPROTOCOLS.register
class NoSubProtocol(SubProtocolConfig):
    """``none``: no extra rounds; the point aggregates as soon as its round closes."""

    name: Literal["none"] = "none"

    @property
    def none(self) -> bool:
        return True

    def plan(self, view: RoundView) -> SubRound | None:
        return None

    def charges_sender_flops(self) -> bool:
        return False


def fraction_threshold(participants: int, minimum: int, fraction: float) -> int:
    """``max(minimum, ⌈fraction · participants⌉)`` (a small epsilon keeps 2/3 · 3 at 2)."""
    return max(int(minimum), math.ceil(fraction * participants - 1e-9))

