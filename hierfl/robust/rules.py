"""Byzantine robustness as plug-ins: aggregation rules (``aggregation: {edge: …, cloud: …}``) and device
behaviours (the ``attack`` event kind, ``aggregation.edge_behavior``).

The math is in :mod:`hierfl.robust.math` (sources cited there). A rule combines the updates of one
synchronous aggregation (a FedAvg / HierFAVG round at the cloud, a HierFAVG edge round) into the
aggregate; the tier's server optimizer then steps on it exactly as on the plain average. A
behaviour changes what a device (or a compromised edge server) sends, never when.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.core.aggregate import WeightedSum
from hierfl.robust import math as R

__all__ = ["AGGREGATION_RULES", "BEHAVIORS", "RuleConfig", "BehaviorConfig", "AggregationSection", "EdgeBehavior",
           "RobustSetup", "RuleOutcome"]

AGGREGATION_RULES: Registry = Registry("aggregation rule")
BEHAVIORS: Registry = Registry("device behavior")

@dataclass
class RuleOutcome:
    """What a rule did: the aggregate (float64), the rows it accepted, how many it clipped."""

    aggregate: np.ndarray
    accepted: np.ndarray
    clipped: int = 0


Loss = Callable[[np.ndarray], float]


class RuleConfig(ConfigModel):
    """Base of the aggregation rules: :meth:`apply` maps the rows of one aggregation to the aggregate."""

    name: str
    needs_loss: ClassVar[bool] = False  # scores candidates on a validation batch (Zeno): cloud only
    asynchronous: ClassVar[bool] = False  # screens single asynchronous updates (Zeno++: FedAsync)

    @property
    def is_mean(self) -> bool:
        """True for the plain weighted mean (the default, today's bits)."""
        return False

    def max_byzantine(self, m: int) -> int | None:
        """How many of ``m`` inputs this rule is configured to tolerate (None: not a parameter)."""
        return None

    def problems(self, key: str, m: int | None) -> list[Problem]:
        """Load-time problems when an aggregation of this tier has ``m`` inputs (None: unknown)."""
        return []

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Aggregate the finite rows ``V`` (``m × d``, float64) with weights ``w``."""
        raise NotImplementedError


def _all(m: int) -> np.ndarray:
    return np.ones(m, dtype=bool)


@AGGREGATION_RULES.register
class MeanRule(RuleConfig):
    """``{name: mean}``: the weighted mean (FedAvg; no robustness)."""

    name: Literal["mean"] = "mean"

    @property
    def is_mean(self) -> bool:
        """The plain mean."""
        return True

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Streaming float64 sum in arrival order: the same bits as the aggregation without a rule."""
        acc = WeightedSum()
        for i in range(V.shape[0]):
            acc.add(V[i], float(w[i]))
        return RuleOutcome(acc.result().astype(np.float64), _all(V.shape[0]))


@AGGREGATION_RULES.register
class GeoMedRule(RuleConfig):
    """``{name: geomed, weighted: false}``: the geometric median by Weiszfeld (docs/explanation/algorithms.md §5.8)."""

    name: Literal["geomed"] = "geomed"
    weighted: bool = Field(default=False, description="weight each input by its aggregation weight (data size)")

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Weiszfeld from the coordinate-wise median."""
        return RuleOutcome(R.geomed(V, w if self.weighted else None), _all(V.shape[0]))


@AGGREGATION_RULES.register
class MarMedRule(RuleConfig):
    """``{name: marmed}``: the coordinate-wise median."""

    name: Literal["marmed"] = "marmed"

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Median per coordinate."""
        return RuleOutcome(R.marmed(V), _all(V.shape[0]))


@AGGREGATION_RULES.register
class MeaMedRule(RuleConfig):
    """``{name: meamed, q: null}``: per coordinate, the mean of the ``m − q`` values closest to the median."""

    name: Literal["meamed"] = "meamed"
    q: NonNegativeInt | None = Field(default=None, description="assumed Byzantine inputs; null: ⌊0.2·m⌋ (2q < m)")

    def q_for(self, m: int) -> int:
        """``q`` for ``m`` inputs (a fixed ``q`` that no longer satisfies 2q < m is lowered to ⌊(m−1)/2⌋)."""
        q = int(np.floor(0.2 * m)) if self.q is None else self.q
        return min(q, (m - 1) // 2)

    def max_byzantine(self, m: int) -> int | None:
        """``q``."""
        return self.q_for(m)

    def problems(self, key: str, m: int | None) -> list[Problem]:
        """``2q < m``."""
        if self.q is not None and m is not None and 2 * self.q >= m:
            return [Problem(f"{key}.q", f"meamed needs 2q < m; this tier aggregates m = {m} updates, "
                                        f"allowed: 0..{(m - 1) // 2}", self.q)]
        return []

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Mean around the median."""
        return RuleOutcome(R.meamed(V, self.q_for(V.shape[0])), _all(V.shape[0]))


@AGGREGATION_RULES.register
class TrimmedMeanRule(RuleConfig):
    """``{name: trimmed_mean, beta: 0.2}``: per coordinate, drop the ⌊βm⌋ largest and smallest values."""

    name: Literal["trimmed_mean"] = "trimmed_mean"
    beta: float = Field(default=0.2, ge=0.0, lt=0.5, description="fraction trimmed at each end")

    def max_byzantine(self, m: int) -> int | None:
        """⌊βm⌋."""
        return int(np.floor(self.beta * m))

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """β-trimmed mean."""
        return RuleOutcome(R.trimmed_mean(V, self.beta), _all(V.shape[0]))


class _KrumBase(RuleConfig):
    f: NonNegativeInt = Field(default=1, description="assumed Byzantine inputs (Krum needs m > 2f + 2)")

    def f_for(self, m: int) -> int:
        """``f``, lowered to ⌊(m − 3)/2⌋ for a round with too few inputs (at least 0)."""
        return max(0, min(self.f, (m - 3) // 2))

    def max_byzantine(self, m: int) -> int | None:
        """``f``."""
        return self.f_for(m)

    def problems(self, key: str, m: int | None) -> list[Problem]:
        """Blanchard et al.'s condition ``2f + 2 < m`` (so f < m/2)."""
        if m is not None and 2 * self.f + 2 >= m:
            return [Problem(f"{key}.f", f"{self.name} needs 2f + 2 < m (f < m/2); this tier aggregates m = {m} "
                                        f"updates, allowed: 0..{max(0, (m - 3) // 2)}", self.f)]
        return []


@AGGREGATION_RULES.register
class KrumRule(_KrumBase):
    """``{name: krum, f: 1}``: the input with the smallest sum of squared distances to its m − f − 2 neighbours."""

    name: Literal["krum"] = "krum"

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Krum's choice."""
        agg, mask = R.krum(V, self.f_for(V.shape[0]))
        return RuleOutcome(agg, mask)


@AGGREGATION_RULES.register
class MultiKrumRule(_KrumBase):
    """``{name: multi_krum, f: 1, m: 3}``: the weighted mean of the ``m`` inputs with the best Krum scores."""

    name: Literal["multi_krum"] = "multi_krum"
    m: PositiveInt = Field(default=3, description="how many inputs are averaged")

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Multi-Krum."""
        agg, mask = R.multi_krum(V, self.f_for(V.shape[0]), self.m, w)
        return RuleOutcome(agg, mask)


@AGGREGATION_RULES.register
class ZenoRule(RuleConfig):
    """``{name: zeno, rho: 0.0005, b: 1, batch: 64}``: keep the m − b candidates with the best Zeno scores
    (loss decrease on the cloud's validation batch minus ρ‖step‖²), average them. Cloud tier only."""

    name: Literal["zeno"] = "zeno"
    needs_loss: ClassVar[bool] = True
    rho: float = Field(default=0.0005, ge=0.0, description="ρ: weight of the step's squared norm")
    b: NonNegativeInt = Field(default=1, description="candidates dropped per aggregation")
    batch: PositiveInt = Field(default=64, description="validation samples (the first of the test set)")

    def max_byzantine(self, m: int) -> int | None:
        """``b``."""
        return self.b

    def problems(self, key: str, m: int | None) -> list[Problem]:
        """``b < m``."""
        if m is not None and self.b >= m:
            return [Problem(f"{key}.b", f"zeno drops b of m = {m} updates, allowed: 0..{m - 1}", self.b)]
        return []

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Score, keep the best m − b, weighted mean of those."""
        if base is None or loss is None:
            raise ValueError("zeno needs the round's start model and a validation loss")
        mask = R.zeno_select(R.zeno_scores(V, base, loss, self.rho), self.b)
        return RuleOutcome(R.weighted_mean(V[mask], w[mask]), mask)


@AGGREGATION_RULES.register
class ZenoPPRule(RuleConfig):
    """``{name: zeno_pp, rho: 0.0005, eps: 0.0, batch: 64}``: Zeno++ (Xie et al. 2020) screens each
    asynchronous step ``u`` (FedAsync's mix minus the current model) on the cloud's validation batch
    and applies it only if ``f(x) − f(x + u) − ρ‖u‖² ≥ −ε``; a rejected update is dropped and counted."""

    name: Literal["zeno_pp"] = "zeno_pp"
    needs_loss: ClassVar[bool] = True
    asynchronous: ClassVar[bool] = True
    rho: float = Field(default=0.0005, ge=0.0, description="ρ: weight of the step's squared norm")
    eps: float = Field(default=0.0, ge=0.0, description="ε: slack of the acceptance test")
    batch: PositiveInt = Field(default=64, description="validation samples (the first of the test set)")

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Each row screened on its own against ``base`` (accepted rows averaged; none: ``base``)."""
        if base is None or loss is None:
            raise ValueError("zeno_pp needs the current model and a validation loss")
        b = np.asarray(base, dtype=np.float64)
        f0 = loss(b)
        mask = np.array([R.zeno_pp_accept(f0, loss(V[i]), float(np.sum((V[i] - b) ** 2)), self.rho, self.eps)
                         for i in range(V.shape[0])], dtype=bool)
        agg = R.weighted_mean(V[mask], w[mask]) if mask.any() and w[mask].sum() > 0 else b
        return RuleOutcome(agg, mask)


@AGGREGATION_RULES.register
class NormClipRule(RuleConfig):
    """``{name: norm_clip, bound: 1.0, then: {name: mean}}``: each update's distance from the round's start
    model is clipped to ``bound`` (Sun et al. 2019), then the ``then`` rule aggregates."""

    name: Literal["norm_clip"] = "norm_clip"
    bound: PositiveFloat = Field(default=1.0, description="L2 bound on each update (model − start model)")
    then: AGGREGATION_RULES.union() = Field(default=MeanRule(), description="the rule that aggregates the clipped updates")  # type: ignore[valid-type]

    @property
    def needs_loss_inner(self) -> bool:
        """Whether the wrapped rule scores on a validation batch."""
        return bool(type(self.then).needs_loss)

    def max_byzantine(self, m: int) -> int | None:
        """That of the wrapped rule."""
        return self.then.max_byzantine(m)  # type: ignore[no-any-return]

    def problems(self, key: str, m: int | None) -> list[Problem]:
        """The wrapped rule's."""
        return self.then.problems(f"{key}.then", m)  # type: ignore[no-any-return]

    def apply(self, V: np.ndarray, w: np.ndarray, base: np.ndarray | None, loss: Loss | None) -> RuleOutcome:
        """Clip, then the wrapped rule."""
        if base is None:
            raise ValueError("norm_clip needs the model the round started from")
        clipped, which = R.clip_rows(V, np.asarray(base, dtype=np.float64), self.bound)
        out: RuleOutcome = self.then.apply(clipped, w, base, loss)
        out.clipped = int(which.sum())
        return out


def rule_needs_loss(rule: RuleConfig) -> bool:
    """Whether ``rule`` (or the rule it wraps) scores on a validation batch."""
    return bool(type(rule).needs_loss or (isinstance(rule, NormClipRule) and rule.needs_loss_inner))


# -- behaviours --------------------------------------------------------------------------------------
class BehaviorConfig(ConfigModel):
    """Base of the device behaviours: what a Byzantine device sends instead of its honest model.

    ``transform`` (device host or edge server) maps the honest result ``v`` trained from ``start``
    to what is sent; ``flips_labels`` trains on permuted labels instead; ``colluding`` behaviours
    (ALIE) are formed at the aggregator from the honest updates of the same aggregation.
    """

    name: str
    flips_labels: ClassVar[bool] = False
    colluding: ClassVar[bool] = False

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The vector sent (float32); the identity for data-poisoning and colluding behaviours."""
        return v


@BEHAVIORS.register
class SignFlip(BehaviorConfig):
    """``{name: sign_flip, s: 1.0}``: send ``start − s·(v − start)``."""

    name: Literal["sign_flip"] = "sign_flip"
    s: PositiveFloat = Field(default=1.0, description="scale of the reversed update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reverse the update."""
        return R.sign_flip(v.astype(np.float64), start.astype(np.float64), self.s).astype(np.float32)


@BEHAVIORS.register
class Gaussian(BehaviorConfig):
    """``{name: gaussian, sigma: 1.0}``: send ``start + N(0, σ²I)`` (seeded by the job)."""

    name: Literal["gaussian"] = "gaussian"
    sigma: PositiveFloat = Field(default=1.0, description="σ of the noise that replaces the update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noise instead of the update."""
        return R.gaussian_update(start.astype(np.float64), self.sigma, rng).astype(np.float32)


@BEHAVIORS.register
class Scale(BehaviorConfig):
    """``{name: scale, s: 10.0}``: send ``start + s·(v − start)`` (model replacement)."""

    name: Literal["scale"] = "scale"
    s: PositiveFloat = Field(default=10.0, description="boost of the update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Boost the update."""
        return R.scale_update(v.astype(np.float64), start.astype(np.float64), self.s).astype(np.float32)


@BEHAVIORS.register
class LabelFlip(BehaviorConfig):
    """``{name: label_flip}``: train on labels ``C − 1 − y`` (data poisoning)."""

    name: Literal["label_flip"] = "label_flip"
    flips_labels: ClassVar[bool] = True


@BEHAVIORS.register
class Alie(BehaviorConfig):
    """``{name: alie, z: 1.0}``: colluders send ``μ − z·σ`` (per coordinate) of the honest updates of the
    same aggregation (Baruch et al. 2019; the omniscient variant: the aggregator forms it)."""

    name: Literal["alie"] = "alie"
    colluding: ClassVar[bool] = True
    z: float = Field(default=1.0, ge=0.0, description="how many standard deviations from the mean")


@BEHAVIORS.register
class FreeRider(BehaviorConfig):
    """``{name: free_rider}``: send the start model back (no work, full weight)."""

    name: Literal["free_rider"] = "free_rider"

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The start model."""
        return np.array(start, dtype=np.float32, copy=True)


@BEHAVIORS.register
class NonFinite(BehaviorConfig):
    """``{name: nonfinite}``: send NaN everywhere."""

    name: Literal["nonfinite"] = "nonfinite"

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """NaN."""
        return np.full(v.shape, np.nan, dtype=np.float32)


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
                problems.append(Problem(key, "zeno_pp screens single asynchronous updates (fedasync only)" if is_async
                                        else f"protocol {protocol!r} applies one update at a time; allowed: zeno_pp",
                                        rule.name))
                continue
            if style == "queue" and rule_needs_loss(rule):
                problems.append(Problem(key, f"{protocol}'s {tier} combines deltas of different ages: a rule that "
                                             "scores models on the validation batch (zeno) does not apply", rule.name))
                continue
            if tier == "edge" and rule_needs_loss(rule):  # (FedCH's cluster leaders are its edge tier)
                problems.append(Problem(key, "zeno scores on the cloud's validation batch: cloud tier only",
                                        rule.name))
            problems.extend(rule.problems(key, expected_m.get(tier)))
        eb = self.edge_behavior
        if eb is not None:
            if "edge" not in tiers:
                problems.append(Problem("aggregation.edge_behavior", f"protocol {protocol!r} has no edge servers "
                                        "that aggregate (use hierfavg)", None))
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

    @classmethod
    def of(cls, section: AggregationSection) -> RobustSetup:
        """From the scenario's ``aggregation:`` section."""
        eb = section.edge_behavior
        edges = {int(e): eb.behavior for e in eb.edges} if eb is not None else {}
        batch = 0
        for rule in (section.cloud, section.edge):
            inner = rule.then if isinstance(rule, NormClipRule) else rule
            if isinstance(inner, (ZenoRule, ZenoPPRule)):
                batch = max(batch, inner.batch)
        return cls(section.cloud, section.edge, edges, batch)

    def rule(self, tier: str) -> RuleConfig:
        """The rule of ``tier``."""
        return self.cloud if tier == "cloud" else self.edge
