"""Straggler policies at synchronous barriers (``straggler:``), shared by every synchronous protocol.

A :class:`Barrier` is one round at one server: the participants it waits for, the arrivals so far,
and the rule that closes it —

* ``wait_all`` — every selected participant that is still online;
* ``deadline`` — ``seconds`` after the round began (earlier if everyone arrived); with
  ``partial: true`` each device plans as many local steps as fit before the deadline (the partial
  work of Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, §3 "γ-inexact solutions");
* ``over_select`` — ``⌈factor·K⌉`` were selected, the first ``K`` to arrive are kept (FedScale's
  over-commitment, Lai et al., ICML 2022);
* ``first_k`` — the first ``k`` (or ``fraction``·K) arrivals close it;
* ``random_epochs`` — a seeded share of the selected devices are stragglers that do 1 … E − 1
  epochs (the systems heterogeneity of Li et al.): kept (``partial: true``) or dropped before computing.

When a barrier closes, participants still on their way are abandoned: their transfers and jobs
are withdrawn, and their compute so far is counted as wasted (``wasted_compute_s``) along with
``stragglers_dropped``. A participant that goes offline is no longer waited for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hierfl.kernel.engine import Event, Priority
from hierfl.core.work import TrainSpec, num_steps, samples_processed
from hierfl.env.events import Payload
from hierfl.env.records import RoundClose

if TYPE_CHECKING:
    from hierfl.protocols.base import Protocol

__all__ = ["GUARD_S", "Barrier", "RoundDeadline", "planned_spec", "steps_before"]

GUARD_S = 1e-6
"""Seconds partial work keeps free before its deadline (one virtual microsecond): an upload that starts
at ``deadline − upload_s`` is timed by the network in its own floating-point steps and could land a
rounding error after the deadline; this margin, far above any rounding error of virtual times below
10⁶ s, keeps it in."""


@dataclass(frozen=True)
class RoundDeadline(Payload):
    """Payload of ``round_deadline``: the barrier's server and round."""

    server: tuple[str, int]
    round: int


class Barrier:
    """One synchronous round at one server under a straggler policy."""

    def __init__(self, proto: Protocol, policy: Any, server: tuple[str, int], round_id: int,
                 selected: list[int], wanted: int, on_close: Callable[[list[int]], None],
                 abandon: Callable[[int], float] | None = None, info: dict[str, Any] | None = None,
                 until: float | None = None) -> None:
        self.proto = proto
        self.env = proto.env
        self.policy = policy
        self.server = server
        self.round = round_id
        self.selected = list(selected)
        self.waiting = set(selected)
        self.arrived: list[int] = []
        self.lost: list[int] = []
        self.closed = False
        self.started = self.env.now
        self.on_close = on_close
        self.abandon_fn = abandon or proto.abandon
        self.info = dict(info or {})  # extra fields of the round_close line (e.g. the cluster of a cluster round)
        # partial work: the share of its full job's samples each device planned (absent: the full job)
        self.work: dict[int, float] = {}
        self.needed = policy.needed(len(selected), wanted) if selected else 0
        # stragglers by assignment (random_epochs): a seeded draw per server and round, so a policy
        # dropping them and one keeping them see the same stragglers, as in the reference code
        self.stragglers: frozenset[int] = frozenset()
        assigned = getattr(policy, "assigned_stragglers", None)  # a duck-typed policy may lack the hook
        k = assigned(len(selected)) if assigned is not None and selected else 0
        if k > 0:
            rng = self.env.rng(f"straggler.assigned.{server[0]}", int(server[1]), int(round_id))
            self.stragglers = frozenset(int(i) for i in rng.choice(sorted(self.selected), size=k, replace=False))
        # the closing time: the policy's deadline, or `until` (a partial-work deadline handed down by the
        # round above, e.g. a hierarchy's cloud round) if earlier; participants plan partial work to `plan_by`
        seconds = policy.deadline_s
        own = None if seconds is None else self.started + float(seconds)
        self.deadline: float | None = min((t for t in (own, until) if t is not None), default=None)
        self.plan_by: float | None = min((t for t in (own if policy.partial_work else None, until) if t is not None),
                                         default=None)
        self._deadline_event: Event | None = None
        if self.deadline is not None:
            self._deadline_event = self.env.at(self.deadline, "round_deadline", RoundDeadline((server[0], int(server[1])), round_id),
                                               Priority.CONTROL)
        if not selected:
            self.close()

    def weight(self, who: int, full: float) -> float:
        """``who``'s aggregation weight, ``full`` for a whole job: under partial work with
        ``partial_weight: work`` scaled by the share of the job it did (else ``full``: Li et al.
        weigh partial solutions by sample count as whole ones)."""
        share = self.work.get(who)
        weigh = getattr(self.policy, "weigh_partial", None)  # a duck-typed policy may lack the hook
        return full if share is None or weigh is None else float(weigh(full, share))

    def arrive(self, who: int) -> None:
        """``who``'s update has arrived (and was folded in)."""
        self.waiting.discard(who)
        self.arrived.append(who)
        if len(self.arrived) >= self.needed or not self.waiting:
            self.close()

    def drop(self, who: int) -> None:
        """``who`` went offline: stop waiting for it."""
        if who in self.waiting:
            self.waiting.discard(who)
            self.lost.append(who)
            if not self.waiting:
                self.close()

    def on_deadline(self) -> None:
        """The deadline event fired."""
        if not self.closed:
            self.close()

    def abort(self, stragglers: bool = True) -> float:
        """Close without handing anything to the protocol (its server was cut off); returns wasted compute.

        ``stragglers=False``: the participants still on the way are withdrawn for another reason
        (re-clustering, a lost leader) and are not counted in ``stragglers_dropped``."""
        if self.closed:
            return 0.0
        self.closed = True
        if self._deadline_event is not None:
            self.env.cancel(self._deadline_event)
        late = sorted(self.waiting)
        wasted = sum(self.abandon_fn(who) for who in late)
        if stragglers:
            self.env.telemetry.count("stragglers_dropped", len(late))
        self.waiting = set()
        return wasted

    def close(self) -> None:
        """Abandon whoever is still on the way and hand the arrivals to the protocol."""
        if self.closed:
            return
        self.closed = True
        if self._deadline_event is not None:
            self.env.cancel(self._deadline_event)
        wasted = 0.0
        late = sorted(self.waiting)
        for who in late:
            wasted += self.abandon_fn(who)
        self.waiting = set()
        env, tel = self.env, self.env.telemetry
        tel.count("stragglers_dropped", len(late))
        kind, ident = self.server
        tel.record(RoundClose(kind, ident, self.round, self.policy.name, len(self.selected), len(self.arrived),
                              len(late), len(self.lost), wasted, env.now - self.started, late, dict(self.info)))
        if late:
            lane = ("cloud", 0) if kind == "cloud" else (kind, ident)  # an edge server, or a device leader
            tel.instant(lane, "stragglers_dropped", env.now, ids=late, wasted_compute_s=wasted)
        self.on_close(list(self.arrived))


def steps_before(fits: Callable[[int], bool], full_steps: int) -> int:
    """The largest ``k`` in ``0 … full_steps`` with ``fits(k)``, for a ``fits`` that is true at 0 and
    monotone (a job of more steps never ends sooner): a bisection, ``⌈log2(full_steps + 1)⌉`` calls."""
    lo, hi = 0, int(full_steps)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _drop_before_compute(env: Any, device: int, barrier: Barrier, why: str, **info: Any) -> None:
    """``device`` computes nothing this round: the barrier stops waiting for it (a dropped straggler)."""
    env.telemetry.instant(("device", device), why, env.now, **info)
    barrier.waiting.discard(device)
    barrier.lost.append(device)
    env.telemetry.count("stragglers_dropped", 1)
    if not barrier.waiting and not barrier.closed:
        barrier.close()


def _assigned_work(env: Any, device: int, barrier: Barrier, spec: TrainSpec) -> TrainSpec | None:
    """The job of an assigned straggler (``random_epochs``): ``x`` uniform in 1 … E − 1 epochs (or
    1 … H − 1 steps), or None when the policy drops stragglers (plain averaging in Li et al.'s experiments)."""
    if not barrier.policy.keeps_stragglers:
        _drop_before_compute(env, device, barrier, "straggler_dropped")
        return None
    kind, ident = barrier.server
    rng = env.rng(f"straggler.work.{kind}", int(ident), int(barrier.round), int(device))
    if spec.epochs is not None and spec.epochs >= 2:
        x = int(rng.integers(1, spec.epochs))  # numpy randint(1, E) of the reference code
        env.telemetry.instant(("device", device), "partial_work", env.now, epochs=x, of=spec.epochs)
        return replace(spec, epochs=x)
    full = num_steps(int(env.world.samples[device]), spec)
    if full < 2:
        return spec  # one step is the least work there is
    x = int(rng.integers(1, full))
    env.telemetry.instant(("device", device), "partial_work", env.now, steps=x, of=full)
    return replace(spec, epochs=None, steps=x)


def planned_spec(proto: Protocol, device: int, barrier: Barrier, spec: TrainSpec | None = None,
                 upload_s: float | None = None) -> TrainSpec | None:
    """The job ``device`` runs now: the full ``spec``, or under ``deadline`` with ``partial: true`` as
    many local steps as its compute really gets through before the deadline, leaving time for an
    uncontended upload (None: not even one step fits — the device is dropped now, having computed
    nothing). ``upload_s``: that upload's time when it does not go over the device's own server link
    (to a device acting as a cluster's leader).

    The steps are counted on the job's own duration (:meth:`~hierfl.env.api.Env.planned_compute_s`:
    this job's per-task jitter, the slowdown windows it will cross, a wait behind the device's own
    evaluation), not on the nominal speed, so the job ends by ``deadline − upload`` whatever its
    jitter: the device stops wherever its compute has got to (the γ-inexact partial work of
    Li et al., MLSys 2020, §3). A device that goes offline before that end is lost as any other.
    """
    env = proto.env
    spec = spec or env.spec
    if device in barrier.stragglers:
        return _assigned_work(env, device, barrier, spec)
    if barrier.plan_by is None:
        return spec
    now = env.now
    end = barrier.plan_by - (env.world.upload_s(device) if upload_s is None else upload_s) - GUARD_S
    if now + env.planned_compute_s(device, spec) <= end:
        return spec  # the whole job fits
    n = int(env.world.samples[device])
    full = num_steps(n, spec)

    def fits(k: int) -> bool:
        # the same expression the job's end event is scheduled at (now + its duration): never past `end`
        return k == 0 or now + env.planned_compute_s(device, replace(spec, epochs=None, steps=k)) <= end

    k = steps_before(fits, full - 1) if full > 1 else 0
    if k < 1:
        _drop_before_compute(env, device, barrier, "no_time", left_s=end - now)
        return None
    partial = replace(spec, epochs=None, steps=k)
    done = samples_processed(n, partial)
    barrier.work[device] = done / samples_processed(n, spec)
    env.telemetry.instant(("device", device), "partial_work", env.now, steps=k, of=full, samples=done,
                          weight=barrier.weight(device, float(n)))
    return partial
