"""Config models for heterogeneity in time: tiers, availability, events, the network, stragglers.

``devices.tiers`` / ``devices.availability`` / ``devices.dropout`` describe devices;
``events:`` changes them at given virtual times; ``network:`` sets how transfers share links;
``straggler:`` says what a synchronous barrier does about the slow. See the README.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from hierfl.config.base import ConfigModel, rename_alias
from hierfl.traces.config import AvailabilityTraceConfig

__all__ = [
    "TierSpec", "shipped_tiers", "AlwaysAvailability", "MarkovAvailability", "AvailabilityConfig",
    "Selector", "SlowdownEvent", "LinkEvent", "EdgeLinkEvent", "LeaveEvent", "JoinEvent", "EventConfig",
    "NetworkConfig", "WaitAll", "Deadline", "OverSelect", "FirstK", "StragglerConfig", "StragglerPolicy",
    "CloudStraggler",
]


# -- tiers -------------------------------------------------------------------------------------
class TierSpec(ConfigModel):
    """One device tier: training throughput and access link (figures in ``hierfl/profiles/tiers.yaml``)."""

    gflops: PositiveFloat = Field(description="effective training GFLOP/s")
    uplink_mbps: PositiveFloat
    downlink_mbps: PositiveFloat
    rtt_ms: NonNegativeFloat = Field(description="round trip to the edge; one-way latency = rtt_ms / 2")
    gflops_range: tuple[PositiveFloat, PositiveFloat] | None = None
    link: str | None = None
    availability: str | None = None


@lru_cache(maxsize=1)
def shipped_tiers() -> dict[str, TierSpec]:
    """The tiers shipped in ``hierfl/profiles/tiers.yaml``."""
    text = resources.files("hierfl").joinpath("profiles/tiers.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)["tiers"]
    return {name: TierSpec(**spec) for name, spec in raw.items()}


# -- availability ------------------------------------------------------------------------------
class AlwaysAvailability(ConfigModel):
    """Every device is always available."""

    name: Literal["always"] = "always"


class MarkovAvailability(ConfigModel):
    """Two-state on/off Markov process per device: exponential up and down periods."""

    name: Literal["markov"]
    mean_up_s: PositiveFloat
    mean_down_s: PositiveFloat
    start: Literal["stationary", "up"] = Field(
        default="stationary", description="first state: drawn with P(up) = up/(up+down), or up")
    tiers: list[str] | None = Field(default=None, description="only devices of these tiers churn (null = all)")


def _availability_shorthand(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


AvailabilityConfig = Annotated[
    Union[AlwaysAvailability, MarkovAvailability, AvailabilityTraceConfig],  # noqa: UP007
    Field(discriminator="name"), BeforeValidator(_availability_shorthand)]


# -- events ------------------------------------------------------------------------------------
class Selector(ConfigModel):
    """Which devices an event touches: the intersection of the given criteria, then a seeded sample."""

    ids: list[NonNegativeInt] | None = None
    tier: str | list[str] | None = None
    edge: NonNegativeInt | list[NonNegativeInt] | None = Field(default=None, description="edge server (cluster) ids")
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    count: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _cluster_alias(cls, data: Any) -> Any:
        # `cluster: k` reads as the devices of edge server (leader group) k, as the issue text words it
        return rename_alias(data, "cluster", "edge")

    @model_validator(mode="after")
    def _one_size(self) -> Selector:
        if self.fraction is not None and self.count is not None:
            raise ValueError("set either fraction or count, not both")
        return self


class SlowdownEvent(ConfigModel):
    """The selected devices compute ``factor``× slower for ``for_s`` seconds (null = until the end)."""

    select: Selector = Selector()
    factor: PositiveFloat
    for_s: PositiveFloat | None = None


class LinkEvent(ConfigModel):
    """The selected devices' access links change: absolute values and/or a bandwidth factor."""

    select: Selector = Selector()
    uplink_mbps: PositiveFloat | None = None
    downlink_mbps: PositiveFloat | None = None
    latency_ms: NonNegativeFloat | None = None
    bandwidth_factor: PositiveFloat | None = Field(default=None, description="multiplies up and down bandwidth")
    for_s: PositiveFloat | None = Field(default=None, description="revert after this long (null = permanent)")

    @model_validator(mode="after")
    def _something(self) -> LinkEvent:
        if all(v is None for v in (self.uplink_mbps, self.downlink_mbps, self.latency_ms, self.bandwidth_factor)):
            raise ValueError("set at least one of uplink_mbps, downlink_mbps, latency_ms, bandwidth_factor")
        return self


class EdgeLinkEvent(ConfigModel):
    """Edge server ↔ cloud links change (``edges`` null = every edge server)."""

    edges: list[NonNegativeInt] | None = None
    uplink_mbps: PositiveFloat | None = None
    downlink_mbps: PositiveFloat | None = None
    latency_ms: NonNegativeFloat | None = None
    bandwidth_factor: PositiveFloat | None = None
    for_s: PositiveFloat | None = None

    @model_validator(mode="after")
    def _something(self) -> EdgeLinkEvent:
        if all(v is None for v in (self.uplink_mbps, self.downlink_mbps, self.latency_ms, self.bandwidth_factor)):
            raise ValueError("set at least one of uplink_mbps, downlink_mbps, latency_ms, bandwidth_factor")
        return self


class LeaveEvent(ConfigModel):
    """The selected devices leave (unavailable) for ``for_s`` seconds, or until a ``join`` (null)."""

    select: Selector = Selector()
    for_s: PositiveFloat | None = None


class JoinEvent(ConfigModel):
    """The selected devices that left come back."""

    select: Selector = Selector()


class EventConfig(ConfigModel):
    """One entry of ``events:``: at ``at_s`` exactly one of the kinds below happens."""

    at_s: NonNegativeFloat
    slowdown: SlowdownEvent | None = None
    link: LinkEvent | None = None
    edge_link: EdgeLinkEvent | None = None
    leave: LeaveEvent | None = None
    join: JoinEvent | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EventConfig:
        kinds = [k for k in ("slowdown", "link", "edge_link", "leave", "join") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("an event needs exactly one of: slowdown, link, edge_link, leave, join"
                             + (f" (got {', '.join(kinds)})" if kinds else ""))
        return self

    @property
    def kind(self) -> str:
        """Which kind of event this is."""
        return next(k for k in ("slowdown", "link", "edge_link", "leave", "join") if getattr(self, k) is not None)


# -- network -----------------------------------------------------------------------------------
class NetworkConfig(ConfigModel):
    """How transfers share links."""

    contention: bool = Field(
        default=True, description="transfers sharing a finite-capacity link share it max-min fairly; "
                                  "false = every transfer runs at its path's bottleneck as if alone")
    # shared capacities (Mbps); null = as the topology file or generator says (unlimited without one)
    cloud_ingress_mbps: PositiveFloat | None = Field(
        default=None, description="capacity shared by every transfer into the cloud")
    cloud_egress_mbps: PositiveFloat | None = Field(
        default=None, description="capacity shared by every transfer out of the cloud")
    edge_ingress_mbps: PositiveFloat | None = Field(
        default=None, description="per edge server: capacity shared by its devices' uploads")
    edge_egress_mbps: PositiveFloat | None = Field(
        default=None, description="per edge server: capacity shared by its downloads to devices")


# -- stragglers --------------------------------------------------------------------------------
class CloudStraggler(ConfigModel):
    """Policy of a cloud round whose participants are edge servers (HierFAVG): wait_all, deadline or first_k."""

    name: Literal["wait_all", "deadline", "first_k"] = "wait_all"
    seconds: PositiveFloat | None = None
    k: PositiveInt | None = None

    @model_validator(mode="after")
    def _params(self) -> CloudStraggler:
        if self.name == "deadline" and self.seconds is None:
            raise ValueError("deadline needs seconds")
        if self.name == "first_k" and self.k is None:
            raise ValueError("first_k needs k")
        if self.name != "deadline" and self.seconds is not None:
            raise ValueError("seconds is only for deadline")
        if self.name != "first_k" and self.k is not None:
            raise ValueError("k is only for first_k")
        return self

    def needed(self, selected: int, wanted: int) -> int:
        """Arrivals that close the cloud round early."""
        return min(self.k, selected) if self.k is not None else selected

    def select_count(self, m: int) -> int:
        """Every edge server takes part."""
        return m

    @property
    def deadline_s(self) -> float | None:
        """Seconds after the round began at which it closes (None: no deadline)."""
        return self.seconds

    @property
    def partial_work(self) -> bool:
        """Edge servers do not plan partial work."""
        return False


def _cloud_shorthand(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


_Cloud = Annotated[CloudStraggler, BeforeValidator(_cloud_shorthand)]


class _BarrierPolicy(ConfigModel):
    """Common part of the device-tier policies: select K, wait for every selected participant."""

    cloud: _Cloud = CloudStraggler()

    def select_count(self, m: int) -> int:
        """How many devices to select for a round that wants ``m``."""
        return m

    def needed(self, selected: int, m: int) -> int:
        """Arrivals that close the round early (before any deadline): all of them by default."""
        return selected

    @property
    def deadline_s(self) -> float | None:
        """Seconds after the round began at which it closes (None: no deadline)."""
        return None

    @property
    def partial_work(self) -> bool:
        """Whether devices plan only the local steps that fit before the deadline."""
        return False


class WaitAll(_BarrierPolicy):
    """Wait for every selected participant (that has not gone offline)."""

    name: Literal["wait_all"] = "wait_all"


class Deadline(_BarrierPolicy):
    """Close the round ``seconds`` after it began; later updates are dropped, or with ``partial``
    devices plan fewer local steps so they finish in time (FedProx's partial work)."""

    name: Literal["deadline"]
    seconds: PositiveFloat
    partial: bool = False

    @property
    def deadline_s(self) -> float | None:
        """Seconds after the round began at which it closes."""
        return float(self.seconds)

    @property
    def partial_work(self) -> bool:
        """Whether devices plan only the local steps that fit before the deadline."""
        return self.partial


class OverSelect(_BarrierPolicy):
    """Select ``⌈factor × K⌉`` participants and keep the first K to arrive (FedScale's over-commitment)."""

    name: Literal["over_select"]
    factor: float = Field(default=1.3, gt=1.0)

    def select_count(self, m: int) -> int:
        """How many devices to select for a round that wants ``m``."""
        return math.ceil(self.factor * m - 1e-9)

    def needed(self, selected: int, m: int) -> int:
        """The first ``m`` arrivals close the round."""
        return min(m, selected)


class FirstK(_BarrierPolicy):
    """Select K as usual; close the round when the first ``k`` (or ``fraction`` × K) updates arrived."""

    name: Literal["first_k"]
    k: PositiveInt | None = None
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _one(self) -> FirstK:
        if (self.k is None) == (self.fraction is None):
            raise ValueError("set exactly one of k or fraction")
        return self

    def needed(self, selected: int, m: int) -> int:
        """How many arrivals close a round of ``selected`` participants."""
        if self.k is not None:
            return min(self.k, selected)
        assert self.fraction is not None
        return min(max(math.ceil(self.fraction * selected - 1e-9), 1), selected)


def _policy_shorthand(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


StragglerConfig = Annotated[Union[WaitAll, Deadline, OverSelect, FirstK],  # noqa: UP007
                            Field(discriminator="name"), BeforeValidator(_policy_shorthand)]
StragglerPolicy = Union[WaitAll, Deadline, OverSelect, FirstK]  # noqa: UP007
