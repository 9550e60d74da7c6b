"""``aggregation:`` — the robust rule of each tier and the compromised edge servers (Byzantine robustness).

The section of the scenario schema (:class:`AggregationSection`: the rule per tier, default
``mean``, today's aggregation bit for bit; compromised edge servers and their behaviour) and what
the aggregating roles receive from it (:class:`RobustSetup`). The rules are
:mod:`hierfl.robust.rules`, the behaviours :mod:`hierfl.robust.behaviours`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, NonNegativeInt, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.robust.behaviours import BEHAVIORS, BehaviorConfig
from hierfl.robust.rules import (
    AGGREGATION_RULES,
    MeanRule,
    NormClipRule,
    RuleConfig,
    ZenoPPRule,
    ZenoRule,
    rule_needs_loss,
)

__all__ = ["AggregationSection", "EdgeBehavior", "RobustSetup"]


class EdgeBehavior(ConfigModel):
    """``{edges: [0], behavior: {name: sign_flip}}``: compromised edge servers apply ``behavior`` to their aggregate."""

    edges: list[NonNegativeInt] = Field(min_length=1, description="the compromised edge servers")
    behavior: BEHAVIORS.union() = Field(description="what a compromised edge server sends to the cloud")  # type: ignore[valid-type]


class AggregationSection(ConfigModel):
    """``aggregation: {edge: {name: …}, cloud: {name: …}, edge_behavior: …}``.

    The rule of each tier (default ``mean``: today's aggregation, bit for bit) and, optionally,
    compromised edge servers. A bare name or a single rule mapping is shorthand for the cloud.
    """

    cloud: AGGREGATION_RULES.union() = Field(default=MeanRule(), description="rule of the cloud's aggregation")  # type: ignore[valid-type]
    edge: AGGREGATION_RULES.union() = Field(default=MeanRule(), description="rule of the edge servers' aggregations")  # type: ignore[valid-type]
    edge_behavior: EdgeBehavior | None = Field(default=None, description="compromised edge servers and what they send (null = none)")

    @model_validator(mode="before")
    @classmethod
    def _cloud_shorthand(cls, value: Any) -> Any:
        return cloud_shorthand(value)

    @property
    def default(self) -> bool:
        """Mean at both tiers and no compromised edge server."""
        return self.cloud.is_mean and self.edge.is_mean and self.edge_behavior is None

    def at(self, tier: str) -> RuleConfig:
        """The rule of ``tier``."""
        return self.cloud if tier == "cloud" else self.edge  # type: ignore[no-any-return]

    def problems(self, protocol: Any, num_edges: int, expected_m: dict[str, int | None]) -> list[Problem]:
        """Rules only where ``protocol`` (its config) aggregates a set of updates (its ``rule_tiers``);
        a screen only where it applies one update at a time; Zeno only at the cloud; sizes fit."""
        problems: list[Problem] = []
        tiers = protocol.rule_tiers
        style = protocol.aggregation_style
        protocol = protocol.name  # for messages
        for tier in ("cloud", "edge"):
            rule = self.at(tier)
            key = f"aggregation.{tier}"
            if rule.is_mean:
                continue
            if tier not in tiers:
                allowed = ", ".join(tiers) if tiers else "none"
                problems.append(Problem(key, f"protocol {protocol!r} has no synchronous {tier} aggregation a rule "
                                             f"can replace; tiers it supports: {allowed}", rule.name))
                continue
            is_async = bool(type(rule).asynchronous)
            if is_async != (style == "updates"):
                problems.append(Problem(key, "zeno_pp screens single asynchronous updates (protocols: "
                                             f"{', '.join(_protocols(lambda c: c.aggregation_style == 'updates' and tier in c.rule_tiers))})"
                                        if is_async
                                        else f"protocol {protocol!r} applies one update at a time; allowed: zeno_pp",
                                        rule.name))
                continue
            if style == "queue" and rule_needs_loss(rule):
                problems.append(Problem(key, f"{protocol}'s {tier} combines deltas of different ages: a rule that "
                                             "scores models on the validation batch (zeno) does not apply", rule.name))
                continue
            if tier == "edge" and rule_needs_loss(rule):  # (cluster leaders are an edge tier)
                problems.append(Problem(key, "zeno scores on the cloud's validation batch: cloud tier only",
                                        rule.name))
            problems.extend(rule.problems(key, expected_m.get(tier)))
        eb = self.edge_behavior
        if eb is not None:
            if "edge" not in tiers:
                problems.append(Problem("aggregation.edge_behavior", f"protocol {protocol!r} has no edge servers "
                                        "that aggregate (protocols with them: "
                                        f"{', '.join(_protocols(lambda c: 'edge' in c.rule_tiers))})", None))
            for e in eb.edges:
                if e >= num_edges:
                    problems.append(Problem("aggregation.edge_behavior.edges",
                                            f"no such edge server; allowed: 0..{num_edges - 1}" if num_edges
                                            else "the scenario has no edge servers", e))
            if type(eb.behavior).flips_labels or type(eb.behavior).colluding:
                problems.append(Problem("aggregation.edge_behavior.behavior.name",
                                        "an edge server transforms its aggregate; allowed: sign_flip, gaussian, "
                                        "scale, free_rider, nonfinite", eb.behavior.name))
        return problems


@dataclass(frozen=True)
class RobustSetup:
    """What the aggregating roles need (travels to the actors): the rule per tier, compromised edges."""

    cloud: RuleConfig = Field(description="rule of the cloud's aggregation")
    edge: RuleConfig = Field(description="rule of the edge servers' aggregations")
    edge_behaviors: dict[int, BehaviorConfig] = field(default_factory=dict)
    validation: int = 0  # validation samples the cloud keeps for Zeno (0: none)
    seed: int = 0  # the run's seed: a rule that draws noise draws from its streams (RuleContext)
    expected: dict[str, int | None] = field(default_factory=dict)  # updates per round, per tier (expected_inputs)

    @classmethod
    def of(cls, section: AggregationSection, cloud: RuleConfig | None = None, seed: int = 0,
           expected: dict[str, int | None] | None = None, edge: RuleConfig | None = None) -> RobustSetup:
        """From the scenario's ``aggregation:`` section; ``cloud`` / ``edge`` replace its rule at that tier (a
        rule another section puts in place, such as differential privacy's noised mean), ``seed`` and
        ``expected`` are what stateful rules see (:class:`~hierfl.core.aggregate.RuleContext`)."""
        eb = section.edge_behavior
        edges = {int(e): eb.behavior for e in eb.edges} if eb is not None else {}
        batch = 0
        for rule in (section.cloud, section.edge):
            inner = rule.then if isinstance(rule, NormClipRule) else rule
            if isinstance(inner, (ZenoRule, ZenoPPRule)):
                batch = max(batch, inner.batch)
        return cls(section.cloud if cloud is None else cloud, section.edge if edge is None else edge, edges, batch,
                   int(seed), dict(expected or {}))

    def rule(self, tier: str) -> RuleConfig:
        """The rule of ``tier``."""
        return self.cloud if tier == "cloud" else self.edge

    def context(self, tier: str) -> tuple[RuleConfig, int, int | None]:
        """``(rule, seed, expected count)``: the arguments of ``tier``'s aggregation."""
        return self.rule(tier), self.seed, self.expected.get(tier)


def _protocols(accept: Callable[[Any], bool]) -> list[str]:
    """The registered protocols whose config class ``accept`` takes (for messages: where a setting applies)."""
    from hierfl.protocols import PROTOCOLS  # noqa: PLC0415 (only a refused setting's message needs them)

    return [name for name in PROTOCOLS.names() if accept(PROTOCOLS.get(name))]
