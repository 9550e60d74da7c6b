"""``edge_fail`` and ``cloud_fail`` events: an edge server, or the cloud, is down for a while.

``edge_fail: {edges: [1], for_s: 60, on_edge_fail: reattach}`` — each listed edge server is down
for ``for_s`` virtual seconds: what it held (queued device updates, a partial aggregation, its
model) and every transfer to or from it is lost; its devices re-attach to the nearest live edge
server (``reattach``, the default) or wait for it (``wait``). ``cloud_fail: {for_s: 60}`` — the
cloud is unreachable: transfers to and from it are lost, and the edge servers keep aggregating
locally. What each protocol does is its own (the edge_fail and cloud_fail event kinds in docs/reference); the
protocol must declare ``supports_infra_faults``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator

from hierfl.config.errors import Problem
from hierfl.dynamics.events import EVENTS, DynamicsDraft, EventKind, Facts
from hierfl.faults.math import FaultWindow

__all__ = ["EdgeFailEvent", "CloudFailEvent"]


def _finite(value: float) -> float:
    """An outage ends: ``for_s`` is finite (an edge server or cloud that never comes back is not modelled)."""
    if value != value or value == float("inf"):
        raise ValueError("must be a finite number of seconds > 0")
    return value


@EVENTS.register
class EdgeFailEvent(EventKind):
    """The listed edge servers are down for ``for_s`` seconds; their devices re-attach or wait."""

    name: ClassVar[str] = "edge_fail"
    infra_fault: ClassVar[bool] = True

    edges: list[NonNegativeInt] = Field(min_length=1, description="edge server ids that fail")
    for_s: PositiveFloat = Field(description="virtual seconds the servers stay down")
    on_edge_fail: Literal["reattach", "wait"] = Field(
        default="reattach", description="the failed servers' devices re-attach to the nearest live edge server "
                                        "until theirs is back (reattach), or stay idle until then (wait)")

    @field_validator("for_s")
    @classmethod
    def _finite_for_s(cls, value: float) -> float:
        return _finite(value)

    @classmethod
    def example(cls) -> EdgeFailEvent:
        """A minimal valid config (conformance tests)."""
        return cls(edges=[0], for_s=10.0)

    def problems(self, key: str, facts: Facts) -> list[Problem]:
        """The scenario has edge servers and ``edges`` names existing ones, each once."""
        e_count = facts.num_edges
        if e_count == 0:
            return [Problem(key, "the scenario has no edge servers to fail (topology.edge_servers: 0)")]
        problems = [Problem(f"{key}.edges", f"no such edge server; allowed: 0..{e_count - 1}", e)
                    for e in self.edges if e >= e_count]
        if len(set(self.edges)) != len(self.edges):
            problems.append(Problem(f"{key}.edges", "an edge server is listed twice", self.edges))
        return problems

    def apply(self, at_s: float, index: int, key: str, draft: DynamicsDraft) -> None:
        """One outage window per listed edge server."""
        for e in self.edges:
            draft.dyn.faults.append(FaultWindow(at_s, at_s + self.for_s, ("edge", int(e)), self.on_edge_fail))


@EVENTS.register
class CloudFailEvent(EventKind):
    """The cloud is unreachable for ``for_s`` seconds; the edge servers keep aggregating locally."""

    name: ClassVar[str] = "cloud_fail"
    infra_fault: ClassVar[bool] = True

    for_s: PositiveFloat = Field(description="virtual seconds the cloud stays unreachable")

    @field_validator("for_s")
    @classmethod
    def _finite_for_s(cls, value: float) -> float:
        return _finite(value)

    @classmethod
    def example(cls) -> CloudFailEvent:
        """A minimal valid config (conformance tests)."""
        return cls(for_s=10.0)

    def problems(self, key: str, facts: Facts) -> list[Problem]:
        """The edge servers keep working while the cloud is away: the scenario needs some."""
        if facts.num_edges == 0:
            return [Problem(key, "cloud_fail needs edge servers that keep aggregating while the cloud is away "
                                 "(topology.edge_servers: 0)")]
        return []

    def apply(self, at_s: float, index: int, key: str, draft: DynamicsDraft) -> None:
        """One outage window of the cloud."""
        draft.dyn.faults.append(FaultWindow(at_s, at_s + self.for_s, ("cloud", 0)))
