"""Byzantine-robust aggregation rules as plug-ins (``aggregation: {edge: …, cloud: …}``).

The math is in :mod:`hierfl.robust.math` (sources cited there). A rule combines the updates of one
synchronous aggregation (a synchronous round at the cloud, an edge round) into the
aggregate; the tier's server optimizer then steps on it exactly as on the plain average. The
aggregating roles apply it (:class:`hierfl.runtime.roles.Aggregation`); the scenario section that
picks a rule per tier is :mod:`hierfl.robust.config`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.core.aggregate import RuleContext, WeightedSum
from hierfl.robust import math as R

__all__ = ["AGGREGATION_RULES", "RuleConfig", "RuleOutcome", "rule_needs_loss"]

AGGREGATION_RULES: Registry = Registry("aggregation rule")

@dataclass
class RuleOutcome:
    """What a rule did: the aggregate (float64), the rows it accepted, how many it clipped."""

    aggregate: np.ndarray
    accepted: np.ndarray
    clipped: int = 0
    extra: dict[str, float] | None = None  # scalars the rule adds to its report (e.g. a clip norm)


Loss = Callable[[np.ndarray], float]


class RuleConfig(ConfigModel):
    """Base of the aggregation rules: :meth:`apply` maps the rows of one aggregation to the aggregate."""

    name: str
    needs_loss: ClassVar[bool] = False  # scores candidates on a validation batch (Zeno): cloud only
    asynchronous: ClassVar[bool] = False  # screens single asynchronous updates (Zeno++)

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

    def apply_in(self, ctx: RuleContext, V: np.ndarray, w: np.ndarray, base: np.ndarray | None,
                 loss: Loss | None) -> RuleOutcome:
        """:meth:`apply` with the point's context (a seeded generator, kept state, the expected count).

        What the aggregating role calls. A rule that draws noise or keeps state across commits (differential
        privacy's noised sum, an adaptive clip norm) overrides this; the others override :meth:`apply`."""
        return self.apply(V, w, base, loss)


def _all(m: int) -> np.ndarray:
    return np.ones(m, dtype=bool)


@AGGREGATION_RULES.register
class MeanRule(RuleConfig):
    """``{name: mean}``: the weighted mean (McMahan et al. 2017; no robustness)."""

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
    asynchronous step ``u`` (the asynchronous mix minus the current model) on the cloud's validation batch
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
    # any rule but another clip (late-bound: a plug-in's rule joins; the clip itself never nests)
    then: AGGREGATION_RULES.union(where=lambda cls: not issubclass(cls, NormClipRule)) = Field(  # type: ignore[valid-type]
        default=MeanRule(), description="the rule that aggregates the clipped updates")

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
