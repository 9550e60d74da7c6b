"""``subprotocol:`` — the sub-protocol each tier's aggregation points run before they aggregate.

Defined after the shipped sub-protocols register (:mod:`hierfl.subprotocol.rounds`), so the section's
union names them; a plug-in's sub-protocol joins it when it registers (the union is late-bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.subprotocol import rounds as _rounds  # noqa: F401  (registers `rounds` before the union is built)
from hierfl.subprotocol.config import SUBPROTOCOLS, NoSubProtocol, SubProtocolConfig

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["SubProtocolSection"]


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
