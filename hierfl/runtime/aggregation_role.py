"""One aggregator's running state (a leader's or the cloud's): the weighted sum of a round's updates, the control
deltas that came with them, the server optimizer's state and a robust rule's kept rows and reports."""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.aggregate import RuleContext, WeightedSum
from hierfl.core.message import CONTROLLED, MODEL
from hierfl.core.rng import stream
from hierfl.core.serveropt import OptState
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.learn.device_sum import DeviceControlSum, split_controlled
from hierfl.learn.staging import DeviceRow, is_resident

__all__ = ['Aggregation', 'robust_step']

_TIERS = ("cloud", "edge")  # a tier's number in the rule's seed stream




class Aggregation:
    """One aggregator's (a leader's or the cloud's) running state.

    * the weighted sum of the models arriving in this round (float64, in arrival order);
    * control variates: the sum ``Σ κ_i Δc_i`` of the control deltas that came with them (float64) —
      an update with a ``control_coef`` carries the control-variates message (:data:`~hierfl.core.message.CONTROLLED`);
    * the server optimizer's state (docs/explanation/algorithms.md §5.7), kept across rounds;
    * with a robust ``rule`` (``aggregation:`` set, or attacks on): the updates themselves, kept
      until the commit, where the rule combines them (:mod:`hierfl.robust.rules`), and one report
      per commit (accepted / rejected, honest / Byzantine, distance from the honest mean).
    """

    def __init__(self, rule: Any = None, seed: int = 0, expected: int | None = None) -> None:
        self.pending: Any = None  # a WeightedSum, or its device twin (hierfl.learn.device_sum.DeviceWeightedSum)
        self._control_sum: np.ndarray | None = None
        # the control sum of messages kept on their training device, summed there (DeviceControlSum), until read
        self._device_control: Any = None
        self.opt_state = OptState()
        self.rule = rule
        self._rows: list[np.ndarray] = []
        self._weights: list[float] = []
        self._tags: list[Any] = []
        self.reports: list[dict[str, Any]] = []
        # what a rule that draws noise or keeps state sees (hierfl.core.aggregate.RuleContext): the run's seed,
        # the protocol's expected count, the rule's kept state and the number of commits so far
        self.seed = int(seed)
        self.expected = expected
        self.rule_state: dict[str, Any] = {}
        self.commits = 0

    def add(self, vector: np.ndarray, weight: float, control_coef: float | None = None, tag: Any = None) -> None:
        """Fold in one update (the control-variates message when ``control_coef`` is given).

        ``tag`` (robust aggregation only): None for an honest update, else ``(source, behaviour
        name, ALIE z or None)`` of a Byzantine one.
        """
        if self.rule is None and is_resident(vector) and (control_coef is None or isinstance(vector, DeviceRow)):
            # a result kept on its training device: summed there, the same arithmetic (hierfl.learn.staging)
            if control_coef is not None:
                # a control-variates message left there by a job method: κ·Δc summed apart there too
                vector, control = split_controlled(vector)
                if self._device_control is None:  # (a sum begun on the host goes on there: uploaded once)
                    self._device_control = DeviceControlSum(vector.staging, self._control_sum)
                    self._control_sum = None
                self._device_control.add(control, control_coef)
            if self.pending is None:
                self.pending = vector.accumulator()
            self.pending.add(vector, weight)
            return
        vec = np.asarray(vector)  # (a result on a device is copied to the host here: a rule or a message reads it)
        if control_coef is not None:  # the control-variates message: κ·Δc is summed apart, the model averaged
            parts = CONTROLLED.split(vec)
            dc = parts["control"].astype(np.float64) * float(control_coef)
            total = self.control_sum  # (a sum begun on the device continues here, in the same order)
            self.control_sum = dc if total is None else total + dc
            vec = parts[MODEL]
        if self.rule is not None:
            self._rows.append(vec)
            self._weights.append(float(weight))
            self._tags.append(tag)
            return
        if self.pending is None:
            self.pending = WeightedSum()
        self.pending.add(vec, weight)

    @property
    def control_sum(self) -> np.ndarray | None:
        """``Σ κ_i Δc_i`` of the round so far (float64), or None; a sum made on the training device is copied to the
        host here, once (the aggregating role steps its control, or relays the sum, on the host)."""
        if self._device_control is not None:
            self._control_sum, self._device_control = self._device_control.host(), None
        return self._control_sum

    @control_sum.setter
    def control_sum(self, value: np.ndarray | None) -> None:
        self._control_sum, self._device_control = value, None

    def __getstate__(self) -> dict[str, Any]:
        # a checkpoint holds the control sum on the host (its float64 bits exactly), as a CPU run's does
        _ = self.control_sum
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "control_sum" in state:  # (a checkpoint written before the sum could stay on a device)
            state["_control_sum"] = state.pop("control_sum")
        state.setdefault("_device_control", None)
        self.__dict__.update(state)

    def _robust(self, base: np.ndarray | None, loss: Any, tier: str, entity: int) -> np.ndarray:
        """The rule's aggregate of the kept updates (float32) and its report."""
        from hierfl.robust.math import alie_vector, finite_rows

        # a rule that releases on an empty round (differential privacy's noise alone, under Poisson sampling)
        empty_release = bool(getattr(self.rule, "releases_empty", False)) and base is not None
        if not self._rows and not empty_release:
            raise ValueError("aggregation with no update")
        V = (np.stack([np.asarray(r, dtype=np.float64) for r in self._rows]) if self._rows
             else np.zeros((0, np.asarray(base).size), dtype=np.float64))
        w = np.asarray(self._weights, dtype=np.float64)
        tags = self._tags
        self._rows, self._weights, self._tags = [], [], []
        byz = np.array([t is not None for t in tags], dtype=bool)
        honest = ~byz
        honest_mean = None
        if honest.any() and w[honest].sum() > 0:
            honest_mean = (w[honest] @ V[honest]) / w[honest].sum()
        alie = [i for i, t in enumerate(tags) if t is not None and t[2] is not None]
        if alie:  # colluders send μ − zσ of the honest updates (their own when none is honest)
            ref = V[honest] if honest.any() else V[alie]
            vec = alie_vector(ref, float(tags[alie[0]][2])).astype(np.float32).astype(np.float64)
            V[alie] = vec
        m = V.shape[0]
        accepted = np.zeros(m, dtype=bool)
        finite = np.ones(m, dtype=bool) if self.rule.is_mean else finite_rows(V)
        clipped = 0
        extra: dict[str, float] = {}
        if finite.any() or (m == 0 and empty_release):
            ctx = RuleContext(stream(self.seed, "rule", _TIERS.index(tier), int(entity), self.commits),
                              self.rule_state, self.expected, self.commits, int(entity))
            out = self.rule.apply_in(ctx, V[finite], w[finite], base, loss)
            extra = dict(out.extra or {})
            accepted[np.flatnonzero(finite)[out.accepted]] = True
            agg, clipped = out.aggregate, out.clipped
        else:  # nothing usable: the model stays where the round started
            agg = np.asarray(base, dtype=np.float64) if base is not None else np.full(V.shape[1], np.nan)
        self.commits += 1
        dist = None if honest_mean is None else float(np.linalg.norm(agg - honest_mean))
        self.reports.append({
            "tier": tier, "entity": int(entity), "rule": self.rule.name, "m": int(m),
            "accepted": int(accepted.sum()), "rejected": int(m - accepted.sum()),
            "rejected_nonfinite": int((~finite).sum()), "clipped": int(clipped),
            "honest": int(honest.sum()), "malicious": int(byz.sum()),
            "malicious_accepted": int((byz & accepted).sum()), "honest_rejected": int((honest & ~accepted).sum()),
            "rejected_ids": [int(i) for i in np.flatnonzero(~accepted)],
            "dist_honest_mean": dist if dist is None or np.isfinite(dist) else None,
            **extra,
        })
        return np.asarray(agg.astype(np.float32))

    def finish(self, opt: ServerOptimizerConfig | None, base: np.ndarray | None, loss: Any = None,
               tier: str = "cloud", entity: int = 0, resident: bool = False) -> Any:
        """End the round: the weighted average (or the robust rule's aggregate), or ``opt`` stepped from
        ``base`` with ``Δ = aggregate − base``. ``resident``: a plain average summed on the training device stays
        there (:class:`~hierfl.learn.staging.DeviceModel`, the same bits), copied to the host when read there."""
        if base is not None and (opt is not None or self.rule is not None):
            base = np.asarray(base)  # (a model kept on the device: read here on the host)
        if self.rule is not None:
            count = len(self._rows)
            avg = self._robust(base, loss, tier, entity)
        else:
            if self.pending is None:
                raise ValueError("aggregation with no update")
            count = self.pending.count
            keep = resident and opt is None and hasattr(self.pending, "result_resident")
            avg = self.pending.result_resident() if keep else self.pending.result()
            self.pending = None
        if opt is None:
            return avg  # plain averaging: the average itself, bit for bit
        # a server optimizer, or a round rule that needs the round's size too (a trainer's round rule); a rule that
        # keeps its aggregator's own control (an edge's own c_e) takes the round's control sum
        out = opt.round_step(base, avg, count, self.opt_state)
        if opt.take_control(self.control_sum, self.opt_state):
            self.control_sum = None
        return out

    def take_reports(self) -> list[dict[str, Any]]:
        """The robust-aggregation reports since the last call."""
        out, self.reports = self.reports, []
        return out

    def take_control(self, size: int) -> np.ndarray:
        """``Σ κ_i Δc_i`` since the last call (zeros if none), as float32; resets it."""
        out = np.zeros(size, dtype=np.float32) if self.control_sum is None else self.control_sum.astype(np.float32)
        self.control_sum = None
        return out


def robust_step(rule: Any, opt: ServerOptimizerConfig | None, state: OptState, coefs: list[float],
                plus: list[np.ndarray], minus: list[np.ndarray | None], tags: list[Any], base: np.ndarray,
                tier: str, entity: int, reports: list[dict[str, Any]], host: Aggregation | None = None) -> np.ndarray:
    """A buffer / queue step under a robust rule: the rule combines the deltas ``a_i − b_i`` (weights
    ``c_i``) into ``d``; the step is ``Δ = (Σ c_i)·d``, added to ``base`` (or stepped by ``opt``). Under the
    mean this is exactly ``Σ c_i (a_i − b_i)``, the protocols' own step. ``host``: the point's kept aggregation,
    whose seed, expected count, rule state and commit count a stateful rule uses (and advances)."""
    agg = Aggregation(rule) if host is None else Aggregation(rule, host.seed, host.expected)
    if host is not None:
        agg.rule_state, agg.commits = host.rule_state, host.commits
    size = base.shape[0]
    for c, a, b, tag in zip(coefs, plus, minus, tags):
        d = np.asarray(a, dtype=np.float64) - (0.0 if b is None else np.asarray(b, dtype=np.float64))
        agg.add(d, abs(float(c)), None, tag)
    d_rule = agg.finish(None, np.zeros(size, dtype=np.float32), tier=tier, entity=entity).astype(np.float64)
    if host is not None:
        host.commits = agg.commits
    reports.extend(agg.take_reports())
    delta = float(sum(coefs)) * d_rule
    if opt is not None:
        return opt.step(base, delta, state)
    return (np.asarray(base, dtype=np.float64) + delta).astype(np.float32)
