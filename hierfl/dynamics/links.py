"""``link`` and ``edge_link`` events: access links or edge server ↔ cloud links change for a while."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.core.dynamics import LinkWindow
from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft, EventKind, Facts

__all__ = ["LinkEvent", "EdgeLinkEvent"]


class _LinkChange(ConfigModel):
    """New link figures: absolute values and/or a bandwidth factor, for ``for_s`` seconds (null = for good)."""

    uplink_mbps: PositiveFloat | None = Field(default=None, description="new uplink bandwidth, Mbit/s (null = unchanged)")
    downlink_mbps: PositiveFloat | None = Field(default=None, description="new downlink bandwidth, Mbit/s (null = unchanged)")
    latency_ms: NonNegativeFloat | None = Field(default=None, description="new one-way latency, ms (null = unchanged)")
    bandwidth_factor: PositiveFloat | None = Field(default=None, description="multiplies up and down bandwidth")
    for_s: PositiveFloat | None = Field(default=None, description="revert after this long (null = permanent)")

    @model_validator(mode="after")
    def _something(self) -> _LinkChange:
        if all(v is None for v in (self.uplink_mbps, self.downlink_mbps, self.latency_ms, self.bandwidth_factor)):
            raise ValueError("set at least one of uplink_mbps, downlink_mbps, latency_ms, bandwidth_factor")
        return self

    def windows(self, at_s: float, target: tuple[str, int], draft: DynamicsDraft) -> None:
        """The link windows of ``target`` (``("device", i)`` or ``("edge", e)``)."""
        end = EventKind.end(at_s, self.for_s)
        for name in ("uplink_mbps", "downlink_mbps", "latency_ms"):
            value = getattr(self, name)
            if value is not None:
                draft.dyn.links.append(LinkWindow(at_s, end, target, name, set=float(value)))
        if self.bandwidth_factor is not None:
            for name in ("uplink_mbps", "downlink_mbps"):
                draft.dyn.links.append(LinkWindow(at_s, end, target, name, factor=float(self.bandwidth_factor)))


@EVENTS.register
class LinkEvent(_LinkChange, DeviceEvent):
    """The selected devices' access links change: absolute values and/or a bandwidth factor."""

    name: ClassVar[str] = "link"

    @classmethod
    def example(cls) -> LinkEvent:
        """A minimal valid config (conformance tests)."""
        return cls(bandwidth_factor=0.5, for_s=10.0)

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """Link windows on each device's access link."""
        for d in devices:
            self.windows(at_s, ("device", d), draft)


class _EdgeTargets(EventKind):
    edges: list[NonNegativeInt] | None = Field(default=None, description="edge-server ids (null = every edge server)")


@EVENTS.register
class EdgeLinkEvent(_LinkChange, _EdgeTargets):
    """Edge server ↔ cloud links change (``edges`` null = every edge server)."""

    name: ClassVar[str] = "edge_link"

    @classmethod
    def example(cls) -> EdgeLinkEvent:
        """A minimal valid config (conformance tests)."""
        return cls(uplink_mbps=5.0)

    def problems(self, key: str, facts: Facts) -> list[Problem]:
        """The scenario has edge servers, and ``edges`` names existing ones."""
        e_count = facts.num_edges
        problems = [Problem(key, "the scenario has no edge servers")] if e_count == 0 else []
        for e in self.edges or []:
            if e >= e_count > 0:
                problems.append(Problem(f"{key}.edges", f"no such edge server; allowed: 0..{e_count - 1}", e))
        return problems

    def apply(self, at_s: float, index: int, key: str, draft: DynamicsDraft) -> None:
        """Link windows on each named edge server's link to the cloud."""
        edges = self.edges if self.edges is not None else list(range(draft.world.num_edges))
        for e in edges:
            self.windows(at_s, ("edge", int(e)), draft)
