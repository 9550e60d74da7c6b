"""Tier aggregators: the one aggregation interface a protocol calls, ``env.tier(tier, entity)``.

Each aggregation point (the cloud, or one edge server / cluster leader) has a
:class:`TierAggregator`. It does the aggregation *and* its accounting (counters, trace instants,
metric lines, staleness, queue lengths), so a protocol only says what it aggregates and when.

How an aggregator steps a model with a set of updates is a stack of layers, composed once per
tier when the run starts (:func:`compose`): at the bottom the plain combination
``base + Σ c·(a − b)`` or the tier's server optimizer (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021), and above it the wrappers that apply to the scenario, outermost first:
a robust aggregation rule over a queue of deltas (Byzantine robustness), an asynchronous screen
(Zeno++: Xie et al., ICML 2020). A new cross-cutting feature (differential-privacy noise,
compression, another screen) is one :class:`Wrapper` subclass decorated with
:func:`register_wrapper`, in a module of its own: no protocol, driver or executor changes, in the
way Flower wraps a strategy for differential privacy.

Synchronous rounds (``add`` … ``commit``) run their rule and optimizer inside the aggregating role
(:class:`~hierfl.runtime.roles.Aggregation`), next to the running sum that never leaves it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from hierfl.driver.aggregation import Aggregation
    from hierfl.env.api import Endpoint, Term

__all__ = ["Layer", "Wrapper", "TierAggregator", "WRAPPERS", "register_wrapper", "compose", "Plain", "ServerOptimizer"]


class Layer:
    """One layer of a tier's stack: ``base`` stepped by ``deltas`` (``Σ c·(a − b)``), or None when the
    step is rejected (the model then stays as it was)."""

    def __init__(self, agg: Aggregation, tier: str) -> None:
        self.agg = agg
        self.tier = tier

    def step(self, entity: int, base: Any, deltas: list[Term], sources: list[int]) -> Any:
        """The new model handle, or None (rejected)."""
        raise NotImplementedError


class Plain(Layer):
    """``base + Σ c·(a − b)``, computed by the tier's role."""

    def step(self, entity: int, base: Any, deltas: list[Term], sources: list[int]) -> Any:
        return self.agg.combine(self.tier, [(1.0, base, None), *deltas])


class ServerOptimizer(Layer):
    """The tier's server optimizer steps ``base`` with ``Δ = Σ c·(a − b)`` (Reddi et al. 2021, …)."""

    def step(self, entity: int, base: Any, deltas: list[Term], sources: list[int]) -> Any:
        return self.agg.server_step(self.tier, entity, base, deltas)


class Wrapper(Layer):
    """A layer around another: override :meth:`step`, calling ``self.inner.step`` where the wrapped
    stack should run. ``applies`` decides once per run and tier whether the wrapper is used;
    ``rank`` orders wrappers (a larger rank is further out)."""

    name: ClassVar[str] = ""
    rank: ClassVar[int] = 0

    def __init__(self, agg: Aggregation, tier: str, inner: Layer) -> None:
        super().__init__(agg, tier)
        self.inner = inner

    @classmethod
    def applies(cls, agg: Aggregation, tier: str) -> bool:
        """Whether this run's ``tier`` stack uses the wrapper."""
        raise NotImplementedError


WRAPPERS: dict[str, type[Wrapper]] = {}
"""Registered wrappers by name."""


def register_wrapper(cls: type[Wrapper]) -> type[Wrapper]:
    """Class decorator: add ``cls`` to the wrappers every run's stacks are composed from."""
    if not cls.name:
        raise TypeError(f"{cls.__name__}: a wrapper needs a `name`")
    if cls.name in WRAPPERS and WRAPPERS[cls.name] is not cls:
        raise ValueError(f"aggregation wrapper {cls.name!r} is already registered")
    WRAPPERS[cls.name] = cls
    return cls


@register_wrapper
class RobustQueue(Wrapper):
    """A robust rule (``aggregation.<tier>``) over a buffer or queue of deltas: the rule
    forms the aggregate delta, the server optimizer (if any) steps with it inside the role."""

    name = "robust_queue"
    rank = 10

    @classmethod
    def applies(cls, agg: Aggregation, tier: str) -> bool:
        return agg.robust is not None and agg.robust.queues and tier in agg.scenario.protocol.rule_tiers

    def step(self, entity: int, base: Any, deltas: list[Term], sources: list[int]) -> Any:
        handle = self.agg.robust_combine(self.tier, entity, base, deltas)
        return handle if handle is not None else self.inner.step(entity, base, deltas, sources)


@register_wrapper
class AsyncScreen(Wrapper):
    """An asynchronous screen (``zeno_pp``): the stepped model is kept only if it passes (one update at a time)."""

    name = "async_screen"
    rank = 20

    @classmethod
    def applies(cls, agg: Aggregation, tier: str) -> bool:
        return agg.robust is not None and bool(type(agg.robust.setup.rule(tier)).asynchronous)

    def step(self, entity: int, base: Any, deltas: list[Term], sources: list[int]) -> Any:
        candidate = self.inner.step(entity, base, deltas, sources)
        _, update, _ = deltas[0]
        return candidate if self.agg.screen_update(self.tier, base, candidate, update, sources[0]) else None


def compose(agg: Aggregation, tier: str) -> Layer:
    """The ``tier`` stack of this run: the plain combination or the server optimizer, wrapped by
    every registered wrapper that applies, innermost first (ascending ``rank``)."""
    if tier == "device":  # a device mixing models: no optimizer or rule is configured for it
        return Plain(agg, tier)
    layer: Layer = ServerOptimizer(agg, tier) if agg.server_optimizer(tier) is not None else Plain(agg, tier)
    for cls in sorted(WRAPPERS.values(), key=lambda c: (c.rank, c.name)):
        if cls.applies(agg, tier):
            layer = cls(agg, tier, layer)
    return layer


class TierAggregator:
    """The aggregation point ``(tier, entity)``: ``("cloud", 0)``, ``("edge", e)`` (an edge server, a
    cluster leader, a tier of devices) or ``("device", i)`` (a device mixing models it received).

    Synchronous rounds: :meth:`add` each update as it arrives, then :meth:`commit` (or
    :meth:`discard` an aborted round). Queues and asynchronous updates: :meth:`step` (with
    :meth:`drop` for an update too stale and :meth:`queue` for the queue's length). Models the
    protocol forms itself (its clusters or tiers): :meth:`average` or :meth:`combine`,
    then :meth:`aggregated` or :meth:`applied` to account for them.
    """

    def __init__(self, agg: Aggregation, tier: str, entity: int, stack: Layer) -> None:
        self.agg = agg
        self.tier = tier
        self.entity = entity
        self.stack = stack
        # bound once: a queue protocol reports a queue length on every arrival
        self.queue: Callable[[int], None] = partial(agg.telemetry.queue_length, tier, entity)
        self.lane: Endpoint = ("cloud", 0) if tier == "cloud" else (tier, entity)
        # the protocol averages models it gathered at this tier, and a rule can replace that average
        protocol = agg.scenario.protocol
        self.robust_models = protocol.aggregation_style == "models" and tier in protocol.rule_tiers

    # -- synchronous rounds --------------------------------------------------------------------------
    def add(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """Fold an update into this point's running aggregation now."""
        if self.tier == "cloud":
            self.agg.add_to_cloud(update, weight, control_coef)
        else:
            self.agg.add_to_edge(self.entity, update, weight, control_coef)

    def commit(self, participants: list[int], base: Any = None, source: str = "device",
               pack_control: bool = False) -> Any:
        """Finish the round (counted and recorded; at the cloud it may end the run); the new model.

        ``base``: the model the round started from (the server optimizer steps from it);
        ``source``: whether the cloud's inputs came from devices or edge servers; ``pack_control``:
        an edge returns ``[model; Σ κ Δc]`` for its upload (control variates relayed to the cloud)."""
        if self.tier == "cloud":
            return self.agg.commit_cloud(participants, source, base)
        return self.agg.commit_edge(self.entity, participants, base, pack_control)

    def discard(self) -> None:
        """Forget what the running aggregation holds (an aborted edge round)."""
        self.agg.discard_edge(self.entity)

    @property
    def releases_empty(self) -> bool:
        """Whether this point's rule releases on a round with no update (then the protocol commits it)."""
        robust = self.agg.robust
        return robust is not None and bool(getattr(robust.setup.rule(self.tier), "releases_empty", False))

    # -- a sub-protocol before it aggregates ----------------------------------------------------------
    @property
    def subprotocol(self) -> Any:
        """The sub-protocol of this point's tier (``subprotocol.<tier>``), or None (none)."""
        return self.agg.subprotocols.at(self.tier)

    def prepare(self, participants: list[int], done: str, payload: Any = None, source: str = "device") -> None:
        """Run this tier's sub-protocol with ``participants`` now (:mod:`hierfl.subprotocol.driver`);
        ``on_<done>`` fires at its end with a :class:`~hierfl.env.events.SubProtocolDone`."""
        cfg = self.subprotocol
        if cfg is None:
            raise RuntimeError(f"no sub-protocol at the {self.tier} tier (subprotocol.{self.tier}: none)")
        self.agg.subprotocols.prepare(cfg, self.tier, self.entity, participants, done, payload, source)

    # -- queues and asynchronous updates -------------------------------------------------------------
    def step(self, base: Any, deltas: list[Term], sources: list[int], staleness: list[int], version: int,
             queue_len: int, source: str = "device") -> Any:
        """``base`` stepped by ``Σ c·(a − b)`` through this tier's stack, and accounted as one
        asynchronous aggregation (``version``: this point's version after it); None if a screen
        rejected it (then nothing is accounted but the rejection)."""
        new = self.stack.step(self.entity, base, deltas, sources)
        if new is not None:
            self.applied(sources, [c for c, _, _ in deltas], staleness, version, queue_len, source)
        return new

    def drop(self, source: int, staleness: int) -> None:
        """An update staler than allowed reached this point and is discarded (counted, recorded)."""
        self.agg.drop_update(self.tier, self.entity, source, staleness)

    # -- models the protocol forms itself -------------------------------------------------------------
    def average(self, models: list[Any], weights: list[float], base: Any = None) -> Any:
        """``Σ w·m / Σ w``, or this tier's robust rule over the models where one is set (``base``: the
        model the round started from)."""
        if self.robust_models:
            robust = self.agg.robust_average(self.tier, self.entity, models, weights, base)
            if robust is not None:
                return robust
        return self.agg.average(models, weights)

    def combine(self, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at this tier."""
        return self.agg.combine(self.tier, terms)

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> Any:
        """Cosine similarity matrix of ``models − base`` (or of the models), computed by the role (for grouping);
        ``measure="sq_norm"``: the squared norm of each (a serverless run's consensus distance)."""
        return self.agg.executor.similarity(models, base, measure)

    def evaluate_loss(self, model: Any) -> float:
        """Test loss of ``model`` on the run's test set (choosing a number of groups needs the initial gap)."""
        return float(self.agg.executor.evaluate(model)[1])

    def evaluate(self, model: Any) -> tuple[float, float]:
        """``(accuracy, loss)`` of ``model`` on the run's test set (serverless runs: each node's model)."""
        acc, loss = self.agg.executor.evaluate(model)
        return float(acc), float(loss)

    def coded(self, peer: Endpoint, model: Any, inbound: bool = True) -> Any:
        """``model`` as the receiver of a model message between this point and ``peer`` gets it (``channels:``)."""
        channels = self.agg.channels
        if channels is None:
            return model
        return channels.coded(peer, self.lane, model) if inbound else channels.coded(self.lane, peer, model)

    def track_staleness(self) -> None:
        """Updates applied at this tier can be stale: report their staleness in the summary."""
        self.agg.telemetry.track_staleness(self.tier)

    def aggregated(self, participants: list[int], trace: dict[str, Any], extra: dict[str, Any] | None = None,
                   lane: Endpoint | None = None) -> None:
        """Account a synchronous edge-tier aggregation formed by the protocol: counters, the
        ``aggregate`` instant (``trace``: its args) on ``lane`` and the ``edge_aggregate`` line."""
        self.agg.edge_aggregated(lane or self.lane, self.entity, participants, trace, extra)

    def applied(self, sources: list[int], weights: list[float], staleness: list[int], version: int,
                queue_len: int, source: str = "device") -> None:
        """Account one asynchronous aggregation (counters, staleness, the ``queue_aggregate`` instant
        and the aggregate line; at the cloud it may end the run)."""
        self.agg.record_async_aggregation(self.tier, self.entity, sources, weights, staleness, version,
                                          queue_len, source)

    # -- the server's own computation -------------------------------------------------------------------
    def run(self, task: str, inputs: list[Any], done: str, payload: Any = None,
            params: dict[str, Any] | None = None) -> Any:
        """Start the server task ``task`` at this point's server (:class:`~hierfl.driver.server_jobs.ServerJobs`):
        ``on_<done>`` fires at its end, which comes after the server's earlier tasks and the task's work."""
        return self.agg.server_jobs.run(self.tier, self.entity, self.lane, task, inputs, done, payload, params)
