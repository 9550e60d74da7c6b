"""The run loop: event dispatch in virtual-time order, evaluations, stop conditions.

:class:`RunLoop` pops events, hands the world's own (``_``-prefixed) events to the network model
and the rest to the protocol, and evaluates the global model at the configured instants.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator
from typing import Any

from hierfl.kernel.engine import Priority
from hierfl.core.device_eval import device_accuracy_fields
from hierfl.driver.context import Context, DivergedError, RunError
from hierfl.env.events import describe
from hierfl.env.records import Eval

__all__ = ["ProgressFn", "RunLoop", "trace_slowdowns", "trace_offline"]

ProgressFn = Callable[[float, int, "float | None"], None]


class RunLoop:
    """One run's loop and evaluations."""

    def __init__(self, ctx: Context, progress: ProgressFn | None) -> None:
        self.ctx = ctx
        self.progress = progress
        sc = ctx.scenario
        self.target = sc.evaluation.target_accuracy or sc.stop.target_accuracy
        self.evals: list[dict[str, Any]] = []
        self.time_to_target: float | None = None
        self.rounds_to_target: int | None = None
        self._last_eval: tuple[float, float] | None = None
        self.protocol: Any = None
        self.events = 0  # events dispatched (protocol and world), for events/s figures
        # called between two events, where a checkpoint can be taken (hierfl.driver.checkpoint)
        self.between_events: Callable[[RunLoop], None] | None = None

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part of a completed run: what was learned, and the events dispatched."""
        last = self.evals[-1]
        part: dict[str, Any] = {
            "final_accuracy": last["accuracy"], "final_loss": last["loss"],
            "best_accuracy": max((e["accuracy"] for e in self.evals if e["accuracy"] is not None), default=None)}
        if "device_accuracy_mean" in last:
            part["final_device_accuracy"] = last["device_accuracy_mean"]
        part.update({"target_accuracy": self.target, "time_to_target_s": self.time_to_target,
                     "rounds_to_target": self.rounds_to_target, "events": self.events})
        return part

    def ended_part(self) -> dict[str, Any]:
        """``summary.json``'s part of a run that did not complete: the last accuracy measured, if any."""
        return {"final_accuracy": self.evals[-1]["accuracy"]} if self.evals else {}

    def _evaluate_parties(self, parties: dict[int, Any]) -> tuple[float, float, dict[str, Any]]:
        """Mean test accuracy and loss of the devices' own models (each on its architecture), in device
        order, and the spread of the accuracies (``party_accuracy_min`` / ``_max``). With source domains
        (``digits_domains``) each model is tested on every domain's test set: its accuracy is their mean,
        and ``own_domain_accuracy`` / ``other_domain_accuracy`` are the parties' means on their own domain
        and over the other domains."""
        ctx = self.ctx
        ranges, domain_of = ctx.world.test_domains, ctx.world.device_domain
        if ranges is not None and domain_of is not None:
            return self._evaluate_domains(parties, ranges, domain_of)
        scores = [ctx.executor.evaluate(parties[d], ctx.jobs.model_index(d)) for d in sorted(parties)]
        accs = [a for a, _ in scores]
        fields = {"party_accuracy_min": min(accs), "party_accuracy_max": max(accs)}
        return sum(accs) / len(accs), sum(loss for _, loss in scores) / len(scores), fields

    def _evaluate_domains(self, parties: dict[int, Any], ranges: tuple[tuple[int, int], ...],
                          domain_of: Any) -> tuple[float, float, dict[str, Any]]:
        ctx = self.ctx
        accs, losses, own, other = [], [], [], []
        for d in sorted(parties):
            scores = [ctx.executor.evaluate(parties[d], ctx.jobs.model_index(d), r) for r in ranges]
            accs.append(sum(a for a, _ in scores) / len(scores))
            losses.append(sum(loss for _, loss in scores) / len(scores))
            mine = int(domain_of[d])
            own.append(scores[mine][0])
            rest = [a for k, (a, _) in enumerate(scores) if k != mine]
            other.append(sum(rest) / len(rest))
        fields = {"party_accuracy_min": min(accs), "party_accuracy_max": max(accs),
                  "own_domain_accuracy": sum(own) / len(own), "other_domain_accuracy": sum(other) / len(other)}
        return sum(accs) / len(accs), sum(losses) / len(losses), fields

    def evaluate(self) -> None:
        """Evaluate the global model now (once per instant and model) and check the accuracy targets."""
        ctx = self.ctx
        counters = ctx.counters
        rounds = int(counters["cloud_aggregations"])
        key = (ctx.now, counters["cloud_aggregations"] + counters["edge_aggregations"])
        if self._last_eval == key:
            return  # same instant, same model: nothing new to measure
        self._last_eval = key
        acc: float | None = None
        loss: float | None = None
        observed = self.protocol.observe()  # serverless protocols: the average of the nodes' models is tested
        parties = self.protocol.party_models()  # output-exchange protocols: each device's own model
        party_fields: dict[str, Any] = {}
        if ctx.spec.train:  # timing only: no model to evaluate
            try:
                if parties is None:
                    acc, loss = ctx.executor.evaluate(ctx.global_model)
                elif parties:
                    acc, loss, party_fields = self._evaluate_parties(parties)
            except Exception as exc:
                raise RunError(f"t={ctx.now:.6g}s cloud: evaluation failed: {exc}") from exc
        diverged = loss is not None and not math.isfinite(loss)
        if diverged:  # a NaN/Inf global model has no accuracy and never reaches a target (reliability)
            acc = None
        device_fields: dict[str, Any] = {}
        if ctx.spec.train and ctx.device_eval and not diverged:  # data.local_test_fraction / data.test_devices
            try:
                own = self.protocol.device_models()  # e.g. each device's cluster model
                spec = ctx.jobs.method_phase(ctx.spec)
                device_fields = device_accuracy_fields(ctx.executor.evaluate_devices(ctx.global_model, spec, own))
                ctx.jobs.charge_device_eval()  # evaluation.device_eval_cost (free by default)
            except Exception as exc:
                raise RunError(f"t={ctx.now:.6g}s devices: per-device evaluation failed: {exc}") from exc
        extra: dict[str, Any] = {**device_fields, **party_fields, **counters, **ctx.telemetry.staleness_means()}
        extra.update({f"queue_len_{tier}": n for tier, n in self.protocol.queue_lengths().items()})
        extra.update(observed)
        if ctx.privacy is not None:  # ε at δ of the releases so far (privacy.dp)
            extra.update(ctx.privacy.eval_fields())
        record = ctx.telemetry.record(Eval(rounds, acc, loss, extra))
        self.evals.append(record)
        ctx.telemetry.instant(("cloud", 0), "evaluate", ctx.now, accuracy=acc, loss=loss)
        if acc is not None and self.target is not None and self.time_to_target is None and acc >= self.target:
            self.time_to_target, self.rounds_to_target = ctx.now, rounds
        stop_acc = ctx.scenario.stop.target_accuracy
        if acc is not None and stop_acc is not None and acc >= stop_acc:
            ctx.request_stop("target_accuracy")
        if self.progress:
            self.progress(ctx.now, rounds, acc)
        if diverged:
            ctx.request_stop("diverged")
            raise DivergedError(f"t={ctx.now:.6g}s cloud: the global model is not finite (test loss {loss}) after "
                                f"{rounds} cloud aggregations: the run diverged (lower training.lr or the server "
                                "optimizer's learning rate)")

    def loop(self, protocol: Any, resumed: bool = False) -> None:
        """Run ``protocol`` until a stop condition holds or nothing is left to happen.

        ``resumed``: the loop goes on from a checkpoint (the queue already holds the run's events).
        """
        with _quiet_gc():
            self._loop(protocol, resumed)

    def _loop(self, protocol: Any, resumed: bool) -> None:
        ctx, sc = self.ctx, self.ctx.scenario
        self.protocol = protocol
        q = ctx.queue
        net = ctx.transfers
        if not resumed:
            q.push(0.0, "evaluate", priority=Priority.EVALUATE)
            if sc.stop.virtual_time_s is not None:
                q.push(sc.stop.virtual_time_s, "stop", priority=Priority.STOP)
            protocol.start()
        hook = self.between_events
        # a checkpointer may look only every ``stride`` events (its wall-clock test need not run on each)
        stride = 1 if hook is None else max(1, int(getattr(hook, "stride", 1)))
        progress = self.progress or None  # (a falsy value, e.g. progress=False: no progress)
        tick = 0
        pop, before, handle = q.pop_next, net.before_dispatch, protocol.handle
        while not ctx.stopping:
            if hook is not None:
                if tick % stride == 0:
                    hook(self)
                tick += 1
            event = pop()
            if event is None:  # nothing is left to happen
                break
            kind = event.kind
            if kind == "evaluate":
                self.evaluate()
                if sc.evaluation.every_s is not None:
                    q.push_after(sc.evaluation.every_s, "evaluate", priority=Priority.EVALUATE)
                continue
            if kind == "stop":
                ctx.request_stop("virtual_time")
                break
            self.events += 1
            try:
                world = event.handler
                if world is not None:  # the world's own events (the network, links, losses, faults)
                    # a server failing or back returns the protocol's event: the protocol hears it at once
                    event = world(event)
                    if event is None:
                        continue
                before(event)
                handle(event)
            except RunError:
                raise
            except Exception as exc:
                raise RunError(f"t={event.time:.6g}s {event.kind} ({describe(event.payload)}): "
                               f"{type(exc).__name__}: {exc}") from exc
            if progress is not None:  # (the CLI's bar redraws at most 10 times a second)
                progress(ctx.now, int(ctx.counters["cloud_aggregations"]), None)
        if not ctx.stopping:
            ctx.request_stop("idle")
        self.evaluate()  # the final model, at the stop time


@contextlib.contextmanager
def _quiet_gc() -> Iterator[None]:
    """The cyclic garbage collector during the event loop: what exists when it starts (the world, the
    data, the executor) is frozen out of its scans, and young collections run 20× less often.

    Reference counting frees an event's objects as soon as it is handled; the collector only looks
    for cycles, and its full scans of a 10^4–10^6-device world otherwise grow with the population.
    Nothing is left frozen afterwards. No result depends on it.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    if threshold[0] > 0:  # (0: automatic collection is off, and stays off)
        gc.set_threshold(threshold[0] * 20, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def trace_slowdowns(ctx: Context) -> None:
    """One span per slowdown window on its device's lane (cut at the run's time budget)."""
    end = ctx.scenario.stop.virtual_time_s
    keeps = ctx.telemetry.trace.keeps
    for d, windows in enumerate(ctx.dyn.windows):
        if not windows or not keeps(("device", d)):
            continue
        for w in windows:
            stop = w.end if math.isfinite(w.end) else (end if end is not None else w.start)
            ctx.telemetry.span(("device", d), f"slowdown x{w.factor:g}", w.start, max(stop - w.start, 0.0),
                               factor=w.factor)


def trace_offline(ctx: Context) -> None:
    """One span per interval a device was unavailable, up to the end of the run."""
    avail, now = ctx.dyn.availability, ctx.now
    if avail.trivial:
        return
    keeps = ctx.telemetry.trace.keeps
    for d in range(ctx.world.num_devices):
        if (avail.base[d] is None and not avail.away[d]) or not keeps(("device", d)):
            continue
        t = 0.0
        while t < now:
            if avail.is_up(d, t):
                t = avail.next_down(d, t)
                continue
            back = avail.next_up(d, t)
            ctx.telemetry.span(("device", d), "offline", t, min(back, now) - t)
            t = back
