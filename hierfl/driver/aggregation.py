"""The aggregation service: the cloud's model, every aggregation point (:mod:`hierfl.driver.tiers`),
what their roles compute (through the executor) and what they account for.

It owns the run's aggregation state: the global model's handle, the running aggregations' view of
non-finite updates left out under ``robustness.on_nonfinite: drop``, and the Byzantine-robustness
ledger's side of each aggregation (tags in, reports out). Protocols reach it only through
``env.tier(tier, entity)``; the job pipeline tells it which results are non-finite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.driver.errors import DivergedError
from hierfl.driver.nonfinite import NonFinite
from hierfl.driver.server_jobs import ServerJobs
from hierfl.driver.tiers import Layer, TierAggregator, compose
from hierfl.subprotocol.driver import SubProtocols
from hierfl.env.api import Endpoint, Term
from hierfl.env.records import CloudAggregate, EdgeAggregate, UpdateDropped

if TYPE_CHECKING:
    from hierfl.output.telemetry import RunTelemetry
    from hierfl.robust.driver import RobustLedger
    from hierfl.scenario.schema import Scenario

__all__ = ["Aggregation", "ControlVariates", "RoundRules"]


class RoundRules:
    """What ends a synchronous round of *device* updates at each aggregator: the trainer's round rule
    over the devices that aggregator serves (:meth:`TrainerConfig.round_rule`, made once per aggregator), else the
    tier's server optimizer. Decided once per run: without a trainer rule it is the optimizer."""

    def __init__(self, scenario: Scenario, world: Any) -> None:
        self._scenario = scenario
        self._world = world
        trainer = scenario.training.trainer
        self._rules: dict[tuple[str, int], Any] | None = (
            {} if world is not None and any(trainer.round_rule(1, t) is not None for t in ("cloud", "edge")) else None)
        self._edge_of: np.ndarray | None = None  # the devices' edges after a re-grouping (None: the topology's)

    def regroup(self, edge_of: np.ndarray) -> None:
        """Devices moved between edges: each edge's rule is made again over its members now."""
        self._edge_of = np.asarray(edge_of, dtype=np.int64).copy()
        if self._rules is not None:
            self._rules = {key: rule for key, rule in self._rules.items() if key[0] != "edge"}

    def at(self, tier: str, entity: int) -> Any:
        """The rule (or optimizer, or None) of ``(tier, entity)``."""
        if self._rules is None:
            return self._scenario.server_optimizer.at(tier)
        rule = self._rules.get((tier, entity))
        if rule is None:
            world = self._world
            if tier == "cloud":
                members = world.num_devices
            elif self._edge_of is not None:
                members = int((self._edge_of == entity).sum())
            else:
                members = int(world.edge_members(entity).size)
            rule = self._rules[(tier, entity)] = self._scenario.training.trainer.round_rule(members, tier)
        return rule


class Aggregation:
    """Aggregation for one run (see the module docstring).

    Parameters
    ----------
    scenario
        The run's scenario (server optimizers, the protocol's aggregation hooks, ``robustness``).
    executor
        Computes every aggregate in its roles; the service holds only handles.
    telemetry
        Counters, records and trace marks of the run.
    robust
        The Byzantine-robustness ledger, or None for a plain run.
    clock
        Reads ``now`` and ends the run when the cloud has aggregated ``stop.rounds`` times
        (``request_stop``): the run's context.
    """

    def __init__(self, scenario: Scenario, executor: Any, telemetry: RunTelemetry, robust: RobustLedger | None,
                 clock: Any, world: Any = None) -> None:
        self.scenario = scenario
        self.executor = executor
        self.telemetry = telemetry
        self.counters = telemetry.counters
        self.robust = robust
        self._clock = clock
        self._global: Any = executor.initial_model()
        # non-finite updates: with `drop`, the handles of flagged jobs' results, left out of every
        # aggregation they are given to, and per aggregator the updates kept / left out since its commit
        self.nonfinite = NonFinite(scenario.robustness.on_nonfinite == "drop", telemetry, clock)
        self.privacy: Any = None  # the run's privacy accountant (hierfl.privacy.driver.PrivacyLedger), set by the Context
        self.channels: Any = None  # the run's transfer channels (hierfl.channels.driver.ChannelLinks), set by the Context
        # aggregation points, made on first use, and each tier's layer stack
        self._tiers: dict[tuple[str, int], TierAggregator] = {}
        self._stacks: dict[str, Layer] = {}
        # what ends a synchronous round of device updates at each aggregator (the trainer's rule, else the optimizer)
        self.round_rules = RoundRules(scenario, world)
        # each server's own computation (server tasks), queued per server in virtual time
        self.server_jobs = ServerJobs(scenario.servers, executor, telemetry, clock)
        # sub-protocols an aggregation point runs before it aggregates (subprotocol:)
        self.subprotocols = SubProtocols(scenario, clock)

    @property
    def now(self) -> float:
        """The virtual time now."""
        return float(self._clock.now)

    def tier(self, tier: str, entity: int = 0) -> TierAggregator:
        """The aggregation point ``(tier, entity)`` (``"cloud"`` or ``"edge"``), its stack composed
        once per tier (:func:`~hierfl.driver.tiers.compose`)."""
        agg = self._tiers.get((tier, entity))
        if agg is None:
            stack = self._stacks.get(tier)
            if stack is None:
                if tier not in ("cloud", "edge", "device"):
                    raise ValueError(f"no aggregation tier {tier!r}; tiers: cloud, edge, device")
                stack = self._stacks[tier] = compose(self, tier)
            agg = self._tiers[(tier, entity)] = TierAggregator(self, tier, entity, stack)
        return agg

    @property
    def global_model(self) -> Any:
        """Handle of the cloud's model."""
        return self._global

    def set_global(self, handle: Any) -> None:
        """The cloud's model changed."""
        self._global = handle

    def server_optimizer(self, tier: str) -> Any:
        """The optimizer configured for ``tier`` (``cloud`` / ``edge``), or None for plain averaging."""
        return self.scenario.server_optimizer.at(tier)


    def server_step(self, tier: str, entity: int, base: Any, delta_terms: list[Term]) -> Any:
        """The ``tier`` optimizer steps ``base`` with ``Δ = Σ c·(a − b)`` (asynchronous aggregations)."""
        opt = self.server_optimizer(tier)
        if opt is None:
            raise RuntimeError(f"no server optimizer at the {tier} tier: combine the terms instead")
        delta_terms = self.nonfinite.finite_terms(tier, delta_terms)
        if not delta_terms:
            return base  # every update left out: the model stays as it was
        return self.executor.servers.server_step(tier, entity, opt, base, delta_terms)

    def add_to_edge(self, edge: int, update: Any, weight: float, control_coef: float | None = None) -> None:
        """An update arrived at ``edge``: fold it into the edge's running aggregation now."""
        if self.robust is not None:  # the robust rule screens NaN/Inf rows itself
            tag = self.robust.take(update, "edge", edge)
            self.executor.servers.add_edge(edge, weight, update, control_coef, tag=tag)
            return
        if self.nonfinite.fold(("edge", edge), update):
            self.executor.servers.add_edge(edge, weight, update, control_coef)

    def commit_edge(self, edge: int, participants: list[int], base: Any = None, pack_control: bool = False) -> Any:
        """Finish ``edge``'s aggregation of device updates; returns the new edge-model handle.

        ``base``: the model the edge round started from (the ``edge`` server optimizer steps from it);
        ``pack_control``: return ``[model; Σ κ Δc]`` for the upload to the cloud (a relay of control deltas).
        """
        if self.nonfinite.nothing_folded(("edge", edge)):  # every update of the round was non-finite and left out
            if base is None or pack_control:
                raise DivergedError(f"t={self.now:.6g}s edge {edge}: every update of the round is a dropped "
                                    "non-finite update; nothing finite is left to aggregate")
            handle = base  # the edge model stays the one the round started from
        else:
            handle = self.executor.servers.commit_edge(edge, self.round_rules.at("edge", edge), base, pack_control)
            if self.robust is not None:
                reports = self.executor.servers.robust_reports("edge")
                if self.privacy is not None:  # a DP rule at the edge tier: its clip norm and noise of this round
                    self.privacy.observe(reports)
                self.robust.reports("edge", reports, self.now)
                self.robust.remember(handle, edge, self.robust.compromised_edge(edge), kind="edge")
        self.edge_aggregated(("edge", edge), edge, participants, {"participants": list(participants)})
        if self.privacy is not None and (reason := self.privacy.released(list(participants), "edge")):
            self._clock.request_stop(reason)  # a noised edge aggregate (privacy.dp.tier: edge) passed the budget
        return handle

    def edge_aggregated(self, lane: Endpoint, edge: int, participants: list[int], trace: dict[str, Any],
                        extra: dict[str, Any] | None = None) -> None:
        """Account one edge-tier aggregation: counters, trace instant, metric line."""
        self.counters["edge_aggregations"] += 1
        self.counters["device_updates"] += len(participants)
        self.telemetry.instant(lane, "aggregate", self.now, **trace)
        self.telemetry.record(EdgeAggregate(edge, len(participants), dict(extra or {})))

    def discard_edge(self, edge: int) -> None:
        """Forget what ``edge``'s running aggregation holds."""
        if not self.nonfinite.nothing_folded(("edge", edge)):  # (every update dropped: nothing was added)
            self.executor.servers.commit_edge(edge)
        if self.robust is not None:  # an aborted round: its rule's report is no aggregation
            self.executor.servers.robust_reports("edge")
            self.robust.drop_sources("edge", edge)

    def add_to_cloud(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """A model arrived at the cloud: fold it into the running aggregation now."""
        if self.robust is not None:  # the robust rule screens NaN/Inf rows itself
            self.executor.servers.add_cloud(weight, update, control_coef, tag=self.robust.take(update, "cloud", 0))
            return
        if self.nonfinite.fold(("cloud", 0), update):
            self.executor.servers.add_cloud(weight, update, control_coef)

    def _cloud_round_done(self, participants: list[int]) -> None:
        limit = self.scenario.stop.rounds
        if limit is not None and int(self.counters["cloud_aggregations"]) >= limit:
            self._clock.request_stop("rounds")
        if self.privacy is not None:  # one noised release: the accountant counts it; a budget may end the run
            reason = self.privacy.released(participants, "cloud")
            if reason is not None:
                self._clock.request_stop(reason)

    def commit_cloud(self, participants: list[int], tier: str = "device", base: Any = None) -> Any:
        """Finish the cloud aggregation; ``tier`` says whether the updates came from devices or edges."""
        if self.nonfinite.nothing_folded(("cloud", 0)):  # every update of the round was non-finite and left out
            handle = base if base is not None else self._global  # the global model stays as it was
        else:
            opt = self.round_rules.at("cloud", 0) if tier == "device" else self.server_optimizer("cloud")
            handle = self.executor.servers.commit_cloud(opt, base)
            if self.robust is not None:
                reports = self.executor.servers.robust_reports("cloud")
                if self.privacy is not None:  # the DP rule's clip norm and noise of this round
                    self.privacy.observe(reports)
                self.robust.reports("cloud", reports, self.now)
        self.counters["cloud_aggregations"] += 1
        if tier == "device":
            self.counters["device_updates"] += len(participants)
        rounds = int(self.counters["cloud_aggregations"])
        self.telemetry.instant(("cloud", 0), "aggregate", self.now, round=rounds, participants=list(participants))
        self.telemetry.record(CloudAggregate(rounds, tier, len(participants)))
        self._cloud_round_done(list(participants))
        return handle

    def screen_update(self, tier: str, base: Any, candidate: Any, update: Any, source: int) -> bool:
        """Whether an asynchronous step from ``base`` to ``candidate`` (made from ``source``'s ``update``)
        is applied: True unless the ``tier`` rule is a screen (Zeno++), which may reject it (counted)."""
        if self.robust is None or not type(self.robust.setup.rule(tier)).asynchronous:
            return True
        tag = self.robust.take(update, tier, 0)
        accepted = self.executor.servers.screen(base, candidate, tag)
        self.robust.reports(tier, self.executor.servers.robust_reports(tier), self.now)
        if not accepted:
            self.counters["updates_rejected"] = self.counters.get("updates_rejected", 0) + 1
        return accepted

    def robust_combine(self, tier: str, entity: int, base: Any, deltas: list[Term]) -> Any:
        """``base + Σc · rule(Δ)`` over a buffer / queue of deltas ``Δ_i = a_i − b_i`` weighted ``c_i``
        (a buffer or a queue of deltas) when the ``tier`` rule is robust; None under the mean (the caller combines)."""
        if self.robust is None or not self.robust.queues:
            return None
        tags = [self.robust.take(a, tier, entity) for _, a, _ in deltas]
        rule = self.robust.setup.rule(tier)
        if rule.is_mean:
            self.robust.drop_sources(tier, entity)
            return None
        handle = self.executor.servers.robust_combine(tier, entity, self.server_optimizer(tier), base, deltas, tags)
        reports = self.executor.servers.robust_reports(tier)
        if self.privacy is not None and tier == "cloud":  # the DP rule's clip norm and noise of this step
            self.privacy.observe(reports)
        self.robust.reports(tier, reports, self.now)
        return handle

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any = None) -> Any:
        """The ``tier`` rule's aggregate of ``models`` weighted ``weights`` (``base``: the model the round
        started from), computed by the cloud role; None when the rule is the mean (the caller averages)."""
        if self.robust is None or not self.robust.tracks:
            return None
        tags = [self.robust.take(h, tier, entity) for h in models]
        if self.robust.setup.rule(tier).is_mean:
            self.robust.drop_sources(tier, entity)
            return None
        handle = self.executor.servers.robust_average(tier, entity, models, weights, base, tags)
        self.robust.reports(tier, self.executor.servers.robust_reports("cloud"), self.now)
        return handle

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of the weighted average of model handles, computed by a role (never in the driver)."""
        if self.nonfinite:
            kept = [(m, w) for m, w in zip(models, weights) if not self.nonfinite.left_out(m, "model")]
            if not kept:
                raise DivergedError(f"t={self.now:.6g}s: every model of an average is a dropped non-finite update; "
                                    "nothing finite is left to average")
            if len(kept) < len(models):
                models, weights = [m for m, _ in kept], [w for _, w in kept]
        return self.executor.servers.average(models, weights)

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at ``tier`` by the executor."""
        terms = self.nonfinite.finite_terms(tier, terms)
        if not terms:
            raise DivergedError(f"t={self.now:.6g}s {tier}: every term of an aggregation is a dropped non-finite "
                                "update; nothing finite is left to combine")
        return self.executor.servers.combine(tier, terms)

    def record_async_aggregation(self, tier: str, entity: int, participants: list[int], weights: list[float],
                                 staleness: list[int], version: int, queue_len: int, source: str = "device") -> None:
        """Account one asynchronous aggregation at a leader (``tier="edge"``) or the cloud.

        ``participants`` are device ids (or leader ids when ``source="edge"``), ``weights`` the
        coefficient each update got, ``staleness`` each update's τ, ``version`` the aggregator's
        version after it, ``queue_len`` the updates waiting when it fired (dropped ones included).
        """
        self.telemetry.add_staleness(tier, staleness)
        args = {"participants": list(participants), "weights": list(weights), "staleness": list(staleness),
                "version": version, "queue_len": queue_len}
        tail = {"weights": list(weights), "staleness": list(staleness), "version": version, "queue_len": queue_len,
                "ids": list(participants)}
        if tier == "edge":
            self.counters["edge_aggregations"] += 1
            self.counters["device_updates"] += len(participants)
            self.telemetry.instant(("edge", entity), "queue_aggregate", self.now, **args)
            self.telemetry.record(EdgeAggregate(entity, len(participants), tail))
            return
        self.counters["cloud_aggregations"] += 1
        if source == "device":
            self.counters["device_updates"] += len(participants)
        rounds = int(self.counters["cloud_aggregations"])
        self.telemetry.instant(("cloud", 0), "queue_aggregate", self.now, round=rounds, **args)
        self.telemetry.record(CloudAggregate(rounds, source, len(participants), tail))
        self._cloud_round_done(list(participants))

    def drop_update(self, tier: str, entity: int, source: int, staleness: int) -> None:
        """An update older than ``max_staleness`` reached ``tier`` and is discarded (counted)."""
        self.counters["updates_dropped"] += 1
        lane = ("edge", entity) if tier == "edge" else ("cloud", 0)
        self.telemetry.instant(lane, "drop", self.now, source=source, staleness=staleness)
        self.telemetry.record(UpdateDropped(tier, entity, source, staleness))

    def queue_length(self, tier: str, entity: int, length: int) -> None:
        """The queue of ``tier`` at ``entity`` holds ``length`` updates from now on."""
        self.telemetry.queue_length(tier, entity, length)


class ControlVariates:
    """Control variates kept by the servers (variance reduction in the manner of Karimireddy et al., ICML 2020:
    Federated Learning", ICML 2020) as a protocol sees them (``env.controls``): whether jobs carry
    them, the server control ``c`` now, and each device's weight κ_i in the server's ``c`` step.

    With a trainer whose edges keep their own control (:attr:`TrainerConfig.edge_controls`) and edge servers
    in the world, a device's control is its edge's ``c_e`` and its κ_i is relative to its edge's members
    (``1/N_e`` with uniform weighting); the edges then relay nothing to the cloud."""

    def __init__(self, executor: Any, world: Any, spec: Any, trainer: Any, edge_rounds: bool = False,
                 round_rules: RoundRules | None = None) -> None:
        self._executor = executor
        self._round_rules = round_rules
        self._weighting = getattr(trainer, "control_weighting", "samples")
        self._samples = world.samples
        self._coefs = None
        # edge_rounds: the protocol aggregates its devices' updates at edge servers (a hierarchical round)
        self.by_edge = bool(spec.control_variates and trainer.edge_controls and edge_rounds
                            and (world.edge_of >= 0).any())
        if spec.control_variates:
            from hierfl.core.controls import control_weights

            weighting = getattr(trainer, "control_weighting", "samples")
            samples = world.samples
            if not self.by_edge:
                self._coefs = control_weights(samples, weighting)
            else:  # each edge's own c_e: weights over its members
                self._coefs = self._edge_coefs(world.edge_of)

    def _edge_coefs(self, edge_of: np.ndarray) -> np.ndarray:
        """κ_i relative to the members of each device's edge."""
        from hierfl.core.controls import control_weights

        coefs = np.zeros(self._samples.size, dtype=np.float64)
        for edge in np.unique(edge_of):
            members = np.flatnonzero(edge_of == edge)
            coefs[members] = control_weights(self._samples[members], self._weighting)
        return coefs

    def regroup(self, edge_of: Any) -> None:
        """Devices moved between edges (``edge_of``: each device's edge now): with edge-scoped controls each
        device's κ_i is taken over its new edge's members, and each edge's round rule counts them."""
        edge_of = np.asarray(edge_of, dtype=np.int64)
        if self.by_edge:
            self._coefs = self._edge_coefs(edge_of)
        if self._round_rules is not None:
            self._round_rules.regroup(edge_of)

    @property
    def relays(self) -> bool:
        """Whether edge servers relay their devices' control deltas to the cloud's ``c``."""
        return self._coefs is not None and not self.by_edge

    @property
    def on(self) -> bool:
        """Whether jobs carry control variates (the trainer's ``needs_control_variates``)."""
        return self._coefs is not None

    def control(self, edge: int | None = None) -> Any:
        """Handle of the control a job of a device of ``edge`` (None: a device of the cloud) uses now: the
        cloud's ``c``, or the edge's own ``c_e`` when edges keep their own; None without control variates."""
        if self._coefs is None:
            return None
        return self._executor.servers.control(edge if self.by_edge and edge is not None else None)

    def coef(self, device: int) -> float | None:
        """κ_i of ``device``'s control delta in the server's ``c`` step, or None without control variates."""
        return None if self._coefs is None else float(self._coefs[device])

    def reset(self, devices: list[int]) -> None:
        """Forget the per-device state of ``devices`` (every vector its job method keeps for it): they
        start again from zeros, after every job they were given before."""
        if devices:
            self._executor.state.reset_devices(sorted(int(d) for d in devices))

