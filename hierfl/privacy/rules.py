"""DP-FedAvg as the rule of the cloud's aggregation (``privacy.dp``), run by the aggregating role.

The role hands the rule the round's updates (rows), the model the round started from and a
:class:`~hierfl.core.aggregate.RuleContext`: a generator of the run's seed for this commit, the point's kept
state (the adaptive clip norm) and the protocol's expected cohort size ``C``. The arithmetic and its
sources are :mod:`hierfl.privacy.math`. The rule is not in ``aggregation:``'s registry: ``privacy:`` puts it
in place, so that a noised aggregate is never produced without its accountant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import NonNegativeFloat, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.core.aggregate import RuleContext
from hierfl.privacy import math as P

__all__ = ["DpOutcome", "DpMeanRule"]


@dataclass
class DpOutcome:
    """What the rule did (the fields a rule's outcome has): the aggregate, the rows used, how many were clipped,
    and the scalars of its report (the clip norm used, the noise std on the average, the next clip norm)."""

    aggregate: np.ndarray
    accepted: np.ndarray
    clipped: int = 0
    extra: dict[str, float] | None = None


class DpMeanRule(ConfigModel):
    """DP-FedAvg's fixed-denominator mean: clip each update ``Δ_i = θ_i − θ`` to ``S``, sum with weight 1 each, add
    Gaussian noise, divide by ``C`` (local mode: the devices clipped and noised, the rule sums and divides).

    ``central``: ``N(0, (z_Δ·S)²)`` once on the sum (``z_Δ = z`` without adaptive clipping); ``local``: each
    update arrives clipped and carrying its own ``N(0, (z·S)²)``, added by its device before the upload was
    quantised or masked (:mod:`hierfl.privacy.server`), so the rule only forms ``Σ(θ̃_i − θ)/C`` and never clips
    again (a server that sees only a SecAgg sum could not). ``C`` is the protocol's expected cohort size
    (the fixed denominator; ``qN`` under Poisson sampling), never the realised count — a round with no update
    (Poisson sampling) releases the noise alone. With ``adaptive``, ``S`` follows Andrew et al.'s
    geometric quantile rule from ``init``, its count noised with ``count_stddev`` (default ``C/20``).
    """

    name: Literal["dp_fedavg"] = "dp_fedavg"
    needs_loss: ClassVar[bool] = False
    asynchronous: ClassVar[bool] = False
    mode: Literal["central", "local"] = "central"
    noise_multiplier: NonNegativeFloat = 1.0
    clip: PositiveFloat = 1.0
    adaptive: bool = False
    init: PositiveFloat = 0.1
    quantile: float = 0.5
    lr: NonNegativeFloat = 0.2
    count_stddev: PositiveFloat | None = None
    # Poisson sampling (each device's own coin, McMahan et al. 2018): the fixed denominator ``qN`` (the expected
    # cohort, a real number) in place of the protocol's integer count, and a release on every round, an empty
    # one included (noise alone: whether anybody took part must not show)
    denominator: PositiveFloat | None = None
    releases_empty: bool = False
    # at the edge tier: each edge server's own fixed denominator (its expected cohort from its members when the
    # run starts), by edge id; an edge not listed uses the protocol's count
    denominators: dict[int, PositiveFloat] | None = None

    @property
    def is_mean(self) -> bool:
        """Never the plain mean."""
        return False

    def max_byzantine(self, m: int) -> int | None:
        """Not a robustness parameter."""
        return None

    def problems(self, key: str, m: int | None) -> list[Any]:
        """Checked by ``privacy.dp`` itself."""
        return []

    def count_std(self, expected: float) -> float:
        """σ_b: ``count_stddev``, or ``C/20`` (TFF's and Flower's default)."""
        return float(self.count_stddev) if self.count_stddev is not None else 0.05 * expected

    def apply_in(self, ctx: RuleContext, V: np.ndarray, w: np.ndarray, base: np.ndarray | None,
                 loss: Any) -> DpOutcome:
        """The noised mean of the clipped updates, added to ``base`` (uniform weights: ``w`` is not read)."""
        if base is None:
            raise ValueError("dp_fedavg needs the model the round started from")
        if self.denominators is not None and ctx.entity in self.denominators:
            C: float = float(self.denominators[ctx.entity])
        elif self.denominator is not None:
            C = float(self.denominator)
        elif ctx.expected is None or ctx.expected < 1:
            raise ValueError("dp_fedavg needs the protocol's expected cohort size (expected_inputs)")
        else:
            C = int(ctx.expected)
        z = float(self.noise_multiplier)
        S = float(ctx.state.get("clip", self.init if self.adaptive else self.clip))
        if self.mode == "local":
            # each row left its device clipped and noised already (the ``dp_local`` task on the device's uplink,
            # before any channel or SecAgg): the aggregator only sums, clipping again would change the release
            D = np.asarray(V, dtype=np.float64) - np.asarray(base, dtype=np.float64)[None, :]
            mean = P.noised_mean(D, C, 0.0, ctx.rng)
            std_mean = z * S * float(np.sqrt(V.shape[0])) / C  # the realised rows' noise on the average
            return DpOutcome(np.asarray(base, dtype=np.float64) + mean, np.ones(V.shape[0], dtype=bool), 0,
                             {"dp_clip": S, "dp_noise_std": std_mean})
        cr = P.clip_updates(V, base, S)
        z_update = P.update_noise_multiplier(z, self.count_std(C)) if self.adaptive else z
        std_sum = z_update * S
        std_mean = std_sum / C
        mean = P.noised_mean(cr.deltas, C, std_sum, ctx.rng)
        extra = {"dp_clip": S, "dp_noise_std": std_mean}
        if self.adaptive:
            nxt, frac = P.adaptive_step(S, cr.norms, C, self.count_std(C), self.quantile, self.lr, ctx.rng)
            ctx.state["clip"] = nxt
            extra.update({"dp_unclipped_fraction": frac, "dp_next_clip": nxt})
        agg = np.asarray(base, dtype=np.float64) + mean
        return DpOutcome(agg, np.ones(V.shape[0], dtype=bool), int(cr.clipped.sum()), extra)
