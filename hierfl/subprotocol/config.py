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
(:meth:`hierfl.env.api.Aggregator.prepare`) and hears ``on_<done>`` with a
:class:`~hierfl.env.events.SubProtocolDone`.
The scenario places one per tier (``subprotocol: {cloud: ..., edge: ...}``, :class:`SubProtocolSection`),
where the protocol declares it can run one (``ProtocolConfig.subprotocol_tiers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.subprotocol.math import RoundView, SubRound, fraction_threshold, round_bytes

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["SUBPROTOCOLS", "SubProtocolConfig", "senders_are_edge_servers", "SubRound", "RoundView", "NoSubProtocol", "RoundSpec",
           "RoundsSubProtocol", "SubProtocolSection"]

SUBPROTOCOLS: Registry = Registry("sub-protocol")


class SubProtocolConfig(ConfigModel):
    """Base of every sub-protocol's config: subclass it, name it (``name: Literal["..."]``), register
    it with ``@SUBPROTOCOLS.register`` and implement :meth:`plan` (and :meth:`threshold`)."""

    name: str
    sender_gflops: PositiveFloat | None = Field(
        default=None, description="FLOP/s of a device sender, in GFLOP/s (null: its tier's gflops from devices.tiers; "
                                  "needed when devices have no tiers and a round charges sender FLOPs)")
    sender_crypto_tier: str | None = Field(
        default=None, description="a tier of hierfl/profiles/tiers.yaml whose crypto rates a device sender is charged "
                                  "at when devices have no tiers (null: its own tier's)")

    # Whether the rounds carry each sender's input itself (secure aggregation: the masked input of Round 2 *is*
    # the update, Bonawitz et al., CCS 2017, §4). The sender's ordinary upload into this tier then carries no
    # payload of its own: it keeps its latency (the sender's word that its input is ready, its place in the
    # round's barrier and deadline) and moves no bytes, so that each update goes up once, in the sub-protocol.
    carries_inputs: ClassVar[bool] = False

    @property
    def none(self) -> bool:
        """Whether this is ``none`` (no sub-protocol: the point aggregates as it always did)."""
        return False

    def plan(self, view: RoundView) -> SubRound | None:
        """Round ``view.round``'s cost, or None when the sub-protocol is over (after its last round)."""
        raise NotImplementedError

    def plan_sender(self, view: RoundView, sender: int, plan: SubRound) -> SubRound:
        """Round ``view.round``'s cost for sender ``sender``, when it differs from the round's ``plan`` (a
        sender whose neighbours were lost sends and computes less); by default ``plan`` itself. Called only
        when a subclass overrides it."""
        return plan

    def threshold(self, participants: int) -> int:
        """Fewest participants that must still take part after every round (below it the sub-protocol fails)."""
        return 1

    def charges_sender_flops(self) -> bool:
        """Whether any round may charge FLOPs at a sender (a device then needs a FLOP/s: its tier's, or
        ``sender_gflops``)."""
        return True

    def problems(self, key: str, scenario: Scenario) -> list[Problem]:
        """Problems of this sub-protocol in ``scenario`` (``key``: its path)."""
        if senders_are_edge_servers(scenario, key.rsplit(".", 1)[-1]):
            return []  # they compute at servers.edge's FLOP/s
        if (self.charges_sender_flops() and self.sender_gflops is None and scenario.devices.tiers is None):
            return [Problem(f"{key}.sender_gflops", "a round charges FLOPs at the senders but the devices have no "
                            "tiers (devices.tiers) to take their FLOP/s from; set sender_gflops", None)]
        return []


def senders_are_edge_servers(scenario: Scenario, tier: str) -> bool:
    """Whether the senders of ``tier``'s aggregations are edge servers (the protocol's aggregation point into
    ``tier`` declares ``participants="edge servers"``), not devices."""
    points = getattr(scenario.protocol, "aggregation_points", ())
    return any(p.flow.endswith(f"→{tier}") and p.participants == "edge servers" for p in points)


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


# -- the shipped sub-protocol ---------------------------------------------------------------------------

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
    """``{name: rounds, rounds: [{up_bytes: 74, down_per_peer_bytes: 72}, …], min_survivors: 2}``: a
    configurable list of message rounds with their bytes and compute.

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
            down_bytes=round_bytes(r.down_bytes, r.down_per_peer_bytes, r.down_model_fraction, peers, view.model_bytes),
            up_bytes=round_bytes(r.up_bytes, r.up_per_peer_bytes, r.up_model_fraction, peers, view.model_bytes),
            sender_flops=r.sender_flops + r.sender_flops_per_peer * peers,
            server_flops=r.server_flops + r.server_flops_per_sender * view.alive,
            keeps_lost_inputs=r.keeps_lost_inputs)

    def threshold(self, participants: int) -> int:
        """``max(min_survivors, ⌈min_fraction · N⌉)``."""
        return fraction_threshold(participants, self.min_survivors, self.min_fraction)

    def charges_sender_flops(self) -> bool:
        return any(r.sender_flops > 0 or r.sender_flops_per_peer > 0 for r in self.rounds)


# -- the scenario section (after the shipped sub-protocols register: its union names them) ---------------

class SubProtocolSection(ConfigModel):
    """``subprotocol: {cloud: {name: …}, edge: {name: …}}``: the sub-protocol each tier's aggregation
    points run before they aggregate (default ``none``: nothing changes). A bare name or a single
    mapping is shorthand for the cloud."""

    cloud: SUBPROTOCOLS.union() = Field(default=NoSubProtocol(),  # type: ignore[valid-type]
                                        description="sub-protocol of the cloud's aggregations (none)")
    edge: SUBPROTOCOLS.union() = Field(default=NoSubProtocol(),  # type: ignore[valid-type]
                                       description="sub-protocol of each edge server's aggregations (none)")

    @model_validator(mode="before")
    @classmethod
    def _cloud_shorthand(cls, value: Any) -> Any:
        return cloud_shorthand(value)

    @property
    def default(self) -> bool:
        """No sub-protocol at either tier."""
        return bool(self.cloud.none and self.edge.none)

    def at(self, tier: str) -> SubProtocolConfig | None:
        """The sub-protocol of ``tier`` (None: none)."""
        cfg = self.cloud if tier == "cloud" else self.edge if tier == "edge" else None
        return None if cfg is None or cfg.none else cfg

    def problems(self, scenario: Scenario) -> list[Problem]:
        """A sub-protocol only at a tier where the protocol can run one (``subprotocol_tiers``), each valid."""
        protocol = scenario.protocol
        tiers = tuple(getattr(protocol, "subprotocol_tiers", ()))
        problems: list[Problem] = []
        for tier in ("cloud", "edge"):
            cfg = self.at(tier)
            if cfg is None:
                continue
            key = f"subprotocol.{tier}"
            if tier not in tiers:
                problems.append(Problem(f"{key}.name", f"protocol {protocol.name!r} cannot run a sub-protocol at its "
                                        f"{tier} aggregation; tiers it supports: {', '.join(tiers) or 'none'}",
                                        cfg.name))
                continue
            problems.extend(cfg.problems(key, scenario))
        return problems
