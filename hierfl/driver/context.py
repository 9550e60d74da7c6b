"""The driver's implementation of the protocol interface (:class:`~hierfl.env.api.Env`).

:class:`Context` owns the event queue, the executor, the run's :class:`~hierfl.output.RunTelemetry`
and a composed :class:`~hierfl.driver.transfers.Transfers` (the network model). Every action is
stamped with the current virtual time; durations come from the world.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import weakref
from typing import Any

import numpy as np

from hierfl.scenario.schema import Scenario
from hierfl.core.dynamics import Dynamics, OnlineIndex, factor_at, finish_time
from hierfl.core.engine import Event, EventQueue, Priority
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, samples_processed
from hierfl.env.api import Endpoint, Job, Term
from hierfl.env.records import CloudAggregate, EdgeAggregate, NonFiniteUpdate, UpdateDropped
from hierfl.output.telemetry import RunTelemetry
from hierfl.driver.energy import energy_ledger
from hierfl.driver.eval_cost import DeviceEvalCost
from hierfl.driver.faults import Faults
from hierfl.driver.robustness import RobustLedger, robust_setup
from hierfl.driver.transfers import Transfers, _JobLost

__all__ = ["Context", "RunError", "DivergedError"]

NONFINITE = "nonfinite"  # the key a device host sets in a job's stats when its update holds NaN/Inf


class RunError(RuntimeError):
    """A failure during a run, with the virtual time, entity and stage where it happened."""

    status = "failed"


class DivergedError(RunError):
    """The run diverged: a non-finite update (``robustness.on_nonfinite: fail``) or global model."""

    status = "diverged"


_NO_MARK: dict[str, Any] = {}  # a job's trace marks when it has none (never modified)


class Context:
    """What a protocol can do (the :class:`~hierfl.env.api.Env` interface), backed by the real run."""

    def __init__(self, scenario: Scenario, built: Any, executor: Any, telemetry: RunTelemetry) -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self.dyn: Dynamics = built.dynamics or Dynamics.static(built.world.num_devices)
        # link events change the world's arrays during the run: work on a copy (Built is reusable)
        self._world = copy.deepcopy(built.world) if self.dyn.links else built.world
        self._spec: TrainSpec = built.spec
        self.executor = executor
        self.telemetry = telemetry
        self.queue = EventQueue()
        telemetry.clock = lambda: self.queue.now
        self.counters = telemetry.counters
        self._global: Any = executor.initial_model()
        self._stopping = False
        self.stop_reason: str | None = None
        self._jobs_started = np.zeros(self._world.num_devices, dtype=np.int64)
        # each device's nominal job seconds (world.compute_s) for the latest spec's work, formed at once
        # on first use (8 B per device); speeds and sample counts never change during a run
        self._nominal: np.ndarray | None = None
        self._nominal_spec: TrainSpec | None = None
        self._nominal_by_work: dict[tuple[Any, ...], np.ndarray] = {}
        # learning plug-ins: SCAFFOLD's per-device control step weights κ_i, or None
        trainer = scenario.training.trainer
        self._control_coefs: np.ndarray | None = None
        if self._spec.control_variates:
            from hierfl.core.scaffold import control_weights

            self._control_coefs = control_weights(self._world.samples, getattr(trainer, "control_weighting", "samples"))
        # everyone's online state, kept by a heap of state changes (None: nobody is ever offline)
        n = self._world.num_devices
        self._online = None if self.dyn.availability.trivial else OnlineIndex(self.dyn.availability, range(n))
        self.transfers = Transfers(self._world, self.dyn, self.queue, telemetry, scenario.network.contention)
        # edge-server / cloud outages (edge_fail, cloud_fail events); None when there are none
        self.faults = Faults(self.dyn, self.queue, self.transfers, telemetry) if self.dyn.faults else None
        self.transfers.track_servers = self.faults is not None  # only a server fault cuts transfers by server
        # Byzantine robustness: None keeps every call exactly as without it
        setup = robust_setup(scenario, self.dyn)
        self.robust: RobustLedger | None = None if setup is None else RobustLedger(setup, self.dyn, telemetry, scenario.protocol.name)
        # per-device evaluation (personalisation): the run has evaluation sets
        self.device_eval = bool(getattr(built, "eval_sets", None))
        # evaluation.device_eval_cost: forward — devices are busy while they evaluate (None: free)
        self.eval_cost: DeviceEvalCost | None = None
        if self.device_eval and scenario.evaluation.device_eval_cost == "forward":
            self.eval_cost = DeviceEvalCost(self._world.speed_sps, built.eval_sets, self.counters)
        # LG-FedAvg's warm-up: personalisation starts after this many cloud rounds
        personal = self._spec.personal
        self._warmup_rounds = 0 if personal is None else personal.warmup_rounds
        # non-finite updates (reliability): with `drop`, the handles of flagged jobs' results, left out of
        # every aggregation they are given to, and per aggregator the updates kept/left out since its commit
        self._drop_nonfinite = scenario.robustness.on_nonfinite == "drop"
        self._bad: dict[int, list[Any]] = {}
        self._folded: dict[tuple[str, int], list[int]] = {}
        # device energy (`energy:`): None keeps every output as without it
        self.energy = energy_ledger(scenario, built, self.counters)
        self.transfers.energy = self.energy
        # the two per-job pass-throughs bound once (the methods below say what they do): a protocol's
        # send and queue_length reach Transfers and the telemetry without a frame of their own
        self.send = self.transfers.send  # type: ignore[method-assign]
        self.queue_length = telemetry.queue_length  # type: ignore[method-assign]

    # -- clock and scheduling ------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time in seconds."""
        return self.queue.now

    @property
    def stopping(self) -> bool:
        """Whether the run ends after the current event."""
        return self._stopping

    def wall_s(self) -> float:
        """Real seconds since the run started (reported, never used for decisions)."""
        return self.telemetry.wall_s()

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        """The named random stream ``(seed, name, ids)``."""
        return stream(self.seed, name, *ids)

    def schedule(self, delay: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` ``delay`` virtual seconds from now."""
        return self.queue.push_after(delay, kind, payload, priority)

    def at(self, time: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` at absolute virtual ``time``."""
        return self.queue.push(time, kind, payload, priority)

    def cancel(self, event: Event) -> None:
        """Withdraw a pending event."""
        self.queue.cancel(event)

    def request_stop(self, reason: str) -> None:
        """End the run after the current event."""
        if not self._stopping:
            self._stopping, self.stop_reason = True, reason

    # -- the world as it is now ----------------------------------------------------------------------
    @property
    def world(self) -> Any:
        """The world (a private copy when link events change it)."""
        return self._world

    @property
    def spec(self) -> TrainSpec:
        """The scenario's local training job."""
        return self._spec

    @property
    def straggler(self) -> Any:
        """The straggler policy of synchronous rounds."""
        return self.scenario.straggler

    @property
    def cloud_straggler(self) -> Any:
        """The straggler policy of a cloud round over edge servers."""
        return self.scenario.straggler.cloud

    @property
    def time_budget_s(self) -> float | None:
        """``stop.virtual_time_s``."""
        return self.scenario.stop.virtual_time_s

    @property
    def churn(self) -> bool:
        """Whether any device can be offline at some time."""
        return not self.dyn.availability.trivial

    def is_up(self, device: int) -> bool:
        """Whether ``device`` is available now."""
        return self.dyn.availability.is_up(device, self.now)

    def server_up(self, server: Endpoint) -> bool:
        """Whether the edge server or cloud ``server`` is up now."""
        return server not in self.transfers.down

    def _everyone(self) -> OnlineIndex:
        assert self._online is not None
        self._online.advance(self.now)
        return self._online

    def available(self, devices: Any = None) -> list[int]:
        """The devices (all, or those given) that are available now, sorted."""
        if devices is None:
            if self._online is None:
                return list(range(self._world.num_devices))
            return self._everyone().online()
        if self._online is None:
            return sorted(int(d) for d in devices)
        return sorted(int(d) for d in devices if self.dyn.availability.is_up(int(d), self.now))

    def online_count(self) -> int:
        """How many devices are online now."""
        return self._world.num_devices if self._online is None else self._everyone().count_online

    def online_index(self, devices: Any = ()) -> OnlineIndex:
        """An index of the online state of ``devices``, starting now."""
        return OnlineIndex(self.dyn.availability, devices, now=self.now)

    def next_up(self, devices: Any = None) -> float:
        """The earliest time ≥ now at which one of ``devices`` (all by default) is available."""
        if devices is None:
            return self.now if self._online is None else self._everyone().next_online()
        return min((self.dyn.availability.next_up(int(d), self.now) for d in devices), default=math.inf)

    def compute_factor(self, device: int) -> float:
        """``device``'s slowdown factor now."""
        return factor_at(self.dyn.windows[device], self.now)

    def current_compute_s(self, spec: TrainSpec | None = None) -> np.ndarray:
        """(N,) seconds one job of ``spec`` would take on each device if started now (at today's slowdown)."""
        spec = spec or self._spec
        return np.array([self._world.compute_s(d, spec) * factor_at(self.dyn.windows[d], self.now)
                         for d in range(self._world.num_devices)])

    def current_upload_s(self) -> np.ndarray:
        """(N,) seconds one model upload device → its server would take if started now (no contention)."""
        return np.array([self._world.upload_s(d) for d in range(self._world.num_devices)])

    # -- training jobs -------------------------------------------------------------------------------
    def _duration(self, device: int, spec: TrainSpec, job_id: int) -> float:
        """Virtual seconds job ``job_id`` of ``device`` takes if it starts now: nominal time × per-task
        jitter (lognormal, mean 1), integrated over the device's slowdown windows."""
        nominal = self._nominal if spec is self._nominal_spec else self._nominal_for(spec)
        work = nominal.item(device)
        if work != work:  # NaN: no nominal time (no samples or no speed); compute_s says why
            work = self._world.compute_s(device, spec)
        dyn = self.dyn
        if dyn.jitter_sigma > 0:
            z = float(stream(self.seed, "jitter", device, job_id).standard_normal())
            work *= math.exp(dyn.jitter_sigma * z - dyn.jitter_sigma ** 2 / 2)
        if self.eval_cost is not None:  # the job waits for the device's own evaluation to finish
            start = self.now + self.eval_cost.wait(device, self.now)
            return finish_time(start, work, dyn.windows[device]) - self.now
        return finish_time(self.now, work, dyn.windows[device]) - self.now if dyn.windows[device] else work

    def _nominal_for(self, spec: TrainSpec) -> np.ndarray:
        """(N,) :meth:`World.compute_s` of every device for ``spec`` (NaN where it would raise), vectorised:
        ``samples_processed / speed`` is an int-to-float conversion (exact below 2^53) and one correctly
        rounded division per device, as in the per-device function, so every value is the same float."""
        key = (spec.epochs, spec.steps, spec.batch_size)
        nominal = self._nominal_by_work.get(key)
        if nominal is None:
            n, speed = self._world.samples.astype(np.int64), self._world.speed_sps.astype(np.float64)
            if spec.epochs is not None:
                work = spec.epochs * n
            else:
                work = spec.steps * (np.minimum(spec.batch_size, n) if spec.batch_size else n)
            with np.errstate(divide="ignore", invalid="ignore"):
                nominal = work.astype(np.float64) / speed
            nominal[(n < 1) | ~(speed > 0)] = np.nan
            self._nominal_by_work[key] = nominal
        self._nominal, self._nominal_spec = nominal, spec
        return nominal

    def charge_device_eval(self) -> None:
        """An evaluation instant: with ``evaluation.device_eval_cost: forward`` the evaluated devices are
        busy for their forward pass (:mod:`hierfl.driver.eval_cost`); free otherwise."""
        if self.eval_cost is not None:
            self.eval_cost.charge(self.now, self.dyn.windows, self.telemetry)

    def start_training(self, device: int, params: Any, spec: TrainSpec | None = None, control: Any = None) -> Job:
        """Submit ``device``'s next job now (see :meth:`start_job`, which also schedules its end).

        The duration integrates the device's slowdown windows and a per-task lognormal jitter. If
        the device will go offline, or the task fails (``devices.dropout``), before the job ends, the
        job is not run at all: ``job.lost_at`` says when the protocol will hear of it.
        """
        now = self.queue.now
        spec = spec or self._spec
        if self._warmup_rounds:  # (personal_phase's own first test)
            spec = self.personal_phase(spec)
        behavior = None
        if self.robust is not None:  # a Byzantine device's job carries its behaviour (timing unchanged)
            spec, behavior = self.robust.job_spec(device, now, spec)
        mark = _NO_MARK if behavior is None else {"byzantine": behavior.name}
        started = self._jobs_started
        job_id = started.item(device)  # (ndarray.item: a Python int, no numpy scalar)
        started[device] = job_id + 1
        compute_s = self._duration(device, spec, job_id)
        dyn = self.dyn
        lost_at, reason = math.inf, None
        if dyn.dropout > 0:
            u = stream(self.seed, "dropout", device, job_id).random(2)
            if u[0] < dyn.dropout:
                lost_at, reason = now + float(u[1]) * compute_s, "dropout"
        if not dyn.availability.trivial:
            down = dyn.availability.next_down(device, now)
            if down < now + compute_s and down < lost_at:
                lost_at, reason = down, "offline"
        t0 = now  # the job's compute begins (later while the device evaluates: device_eval_cost)
        if self.eval_cost is not None:  # its next evaluation queues behind this job
            t0 = self.eval_cost.job_started(device, job_id, now, min(lost_at, now + compute_s))
        busy_s = compute_s if t0 == now else now + compute_s - t0  # (exactly compute_s unless it waited)
        if math.isfinite(lost_at):
            self.telemetry.span(("device", device), "train", t0, max(lost_at - t0, 0.0), job=job_id, lost=reason,
                                **mark)
            return Job(device, job_id, None, None, compute_s, now, -1, lost_at, reason)
        if self.energy is not None:  # its training energy is charged when it finishes
            self.energy.job_started(device, job_id, samples_processed(int(self._world.samples[device]), spec))
        if not spec.train:  # timing only: the update is the model the job started from
            kept = self.telemetry.trace.devices  # (telemetry.span's lane check first: most lanes of a large run are not kept)
            if kept is None or device in kept:
                self.telemetry.span(("device", device), "train", t0, busy_s, job=job_id)
            return Job(device, job_id, params, None, compute_s, now, -1, ran=False)
        # the job's seed (a pure function of the run seed, device and job number) only matters when it trains
        seed = stream_seed(self.seed, "train", device, job_id)
        new, stats, host = self.executor.train(device, seed, spec, params, control)
        if self.robust is not None:
            self.robust.remember(new, device, behavior)
        self.telemetry.span(("device", device), "train", t0, busy_s, job=job_id, **mark)
        return Job(device, job_id, new, stats, compute_s, now, host)

    def personal_phase(self, spec: TrainSpec) -> TrainSpec:
        """``spec`` as jobs and evaluations run it now: during a personalised trainer's warm-up
        (``warmup_rounds`` cloud rounds) without personalisation — plain FedAvg jobs on the whole
        model; when it ends, devices without state take their local layers from the global model."""
        if not self._warmup_rounds or spec.personal is None:
            return spec
        if self.counters["cloud_aggregations"] < self._warmup_rounds:
            return dataclasses.replace(spec, personal=None)
        self._warmup_rounds = 0
        self.executor.set_personal_base(self._global)
        return spec

    def planned_compute_s(self, device: int, spec: TrainSpec | None = None) -> float:
        """How long ``device``'s next job would take if started now (what :meth:`start_job` will use)."""
        return self._duration(device, spec or self._spec, int(self._jobs_started[device]))

    def start_job(self, device: int, model: Any, payload: Any, spec: TrainSpec | None = None,
                  control: Any = None, done: str = "train_done", end: float | None = None) -> tuple[Job, Event]:
        """Submit the job and schedule ``done`` (or, if the device drops out first, the loss)."""
        job = self.start_training(device, model, spec, control)
        if job.lost_at is not None:
            event = self.queue.push(job.lost_at, "_job_lost", _JobLost(device, str(job.lost_reason), payload),
                                    Priority.ARRIVAL)
        elif end is not None:
            event = self.queue.push(end, done, payload, Priority.ARRIVAL)
        else:  # (push_after, inline: compute_s >= 0)
            queue = self.queue
            event = queue.push(queue.now + job.compute_s, done, payload, Priority.ARRIVAL)
        self.transfers.track(device, event)
        return job, event

    def finish_training(self, job: Job) -> dict[str, float]:
        """Collect a job whose virtual end has come (blocks only if it is still running for real)."""
        if not job.ran:  # a timing-only job: nothing was submitted
            stats: dict[str, float] = {}
        else:
            stats = self._wait(job)
        self.counters["train_jobs"] += 1
        if self.energy is not None:
            self.energy.job_finished(job.device, job.job)
        # (a wait for the device's own evaluation, device_eval_cost, is counted in device_eval_s instead)
        self.counters["compute_s"] += job.compute_s - (0.0 if self.eval_cost is None else
                                                       self.eval_cost.waited(job.device, job.job))
        if stats.get(NONFINITE) and self.robust is None:  # with a robust rule, it screens NaN/Inf itself
            self._nonfinite_update(job)
        return stats

    # -- non-finite updates (robustness.on_nonfinite) ---------------------------------------------------
    def _nonfinite_update(self, job: Job) -> None:
        """``job``'s result holds NaN or Inf: stop the run (``fail``) or remember its handle (``drop``)."""
        if not self._drop_nonfinite:
            raise DivergedError(f"t={self.now:.6g}s device {job.device} job {job.job}: the update is not finite "
                                "(NaN or Inf), so the run diverged; lower training.lr, or set "
                                "robustness.on_nonfinite: drop to leave such updates out")
        handle = job.params
        try:  # a weak reference where the handle allows one: a dropped update is not kept alive by this
            ref: Any = weakref.ref(handle)
        except TypeError:
            ref = lambda h=handle: h  # noqa: E731
        self._bad[id(handle)] = [ref, job.device, job.job, False]

    def _left_out(self, handle: Any, tier: str) -> bool:
        """Whether ``handle`` is a dropped non-finite update (counted and reported the first time)."""
        if not self._bad or handle is None:
            return False
        entry = self._bad.get(id(handle))
        if entry is None:
            return False
        if entry[0]() is not handle:  # a new object at a recycled address
            del self._bad[id(handle)]
            return False
        if not entry[3]:
            entry[3] = True
            self.counters["nonfinite_dropped"] = self.counters.get("nonfinite_dropped", 0) + 1
            self.telemetry.instant(("device", entry[1]), "nonfinite_dropped", self.now, job=entry[2], tier=tier)
            self.telemetry.record(NonFiniteUpdate(entry[1], entry[2], tier))
        return True

    def _fold(self, key: tuple[str, int], handle: Any) -> bool:
        """Count an update given to aggregator ``key``; False if it is left out (non-finite, ``drop``)."""
        if not self._drop_nonfinite:
            return True
        kept = not self._left_out(handle, key[0])
        self._folded.setdefault(key, [0, 0])[0 if kept else 1] += 1
        return kept

    def _nothing_folded(self, key: tuple[str, int]) -> bool:
        """Whether every update given to ``key`` since its last commit was left out (and resets the count)."""
        kept, out = self._folded.pop(key, (0, 0))
        return out > 0 and kept == 0

    def _finite_terms(self, tier: str, terms: list[Term]) -> list[Term]:
        """``terms`` without those built on a dropped update.

        A delta term ``c·(a − b)`` is simply left out (as if that update never arrived). Plain terms
        ``c·a`` form a mix (FedAsync's ``(1−α)·x + α·y``): the kept ones are rescaled to the mix's
        total, so leaving ``y`` out gives ``x``, not ``(1−α)·x``.
        """
        if not self._bad:
            return terms
        keep: list[Term] = []
        plain_total = plain_kept = 0.0
        dropped = False
        for c, a, b in terms:
            out = self._left_out(a, tier) or self._left_out(b, tier)
            if b is None:
                plain_total += c
            if out:
                dropped = True
                continue
            if b is None:
                plain_kept += c
            keep.append((c, a, b))
        if not dropped:
            return terms
        if plain_total != plain_kept:
            if plain_kept == 0:
                raise DivergedError(f"t={self.now:.6g}s {tier}: every model of an aggregation is a dropped non-finite "
                                    "update; nothing finite is left to aggregate")
            scale = plain_total / plain_kept
            keep = [(c * scale, a, b) if b is None else (c, a, b) for c, a, b in keep]
        return keep

    def _wait(self, job: Job) -> dict[str, float]:
        try:
            stats = self.executor.wait(job)
        except Exception as exc:
            raise RunError(f"t={self.now:.6g}s device {job.device} job {job.job}: training failed: {exc}") from exc
        return stats

    def cancel_device(self, device: int) -> None:
        """Withdraw everything ``device`` has in flight."""
        self.transfers.cancel_device(device)

    # -- transfers ----------------------------------------------------------------------------------
    def send(self, src: Endpoint, dst: Endpoint, event: str, payload: Any, name: str,
             priority: int = Priority.ARRIVAL, size: int | None = None, **args: Any) -> int:
        """Start a model transfer ``src → dst`` now (see :meth:`Transfers.send`)."""
        return self.transfers.send(src, dst, event, payload, name, priority, size, **args)

    def cancel_transfer(self, fid: int) -> None:
        """Withdraw a transfer still in flight."""
        self.transfers.cancel_transfer(fid)

    # -- aggregation --------------------------------------------------------------------------------
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

    @property
    def control_variates(self) -> bool:
        """Whether jobs carry SCAFFOLD control variates (``training.trainer: scaffold``)."""
        return self._control_coefs is not None

    def control_coef(self, device: int) -> float | None:
        """κ_i of ``device``'s control delta in the server's ``c`` step, or None without SCAFFOLD."""
        return None if self._control_coefs is None else float(self._control_coefs[device])

    def control(self) -> Any:
        """Handle of the cloud's SCAFFOLD control ``c`` now (None without SCAFFOLD)."""
        return self.executor.control() if self._control_coefs is not None else None

    def similarity(self, models: list[Any], base: Any = None) -> np.ndarray:
        """Cosine similarity of ``models − base`` (WSCC), computed by the cloud role."""
        return self.executor.similarity(models, base)

    def evaluate_loss(self, model: Any) -> float:
        """Test loss of ``model``."""
        return float(self.executor.evaluate(model)[1])

    def server_step(self, tier: str, entity: int, base: Any, delta_terms: list[Term]) -> Any:
        """The ``tier`` optimizer steps ``base`` with ``Δ = Σ c·(a − b)`` (asynchronous aggregations)."""
        opt = self.server_optimizer(tier)
        if opt is None:
            raise RuntimeError(f"no server optimizer at the {tier} tier: combine the terms instead")
        delta_terms = self._finite_terms(tier, delta_terms)
        if not delta_terms:
            return base  # every update left out: the model stays as it was
        return self.executor.server_step(tier, entity, opt, base, delta_terms)

    def add_to_edge(self, edge: int, update: Any, weight: float, control_coef: float | None = None) -> None:
        """An update arrived at ``edge``: fold it into the edge's running aggregation now."""
        if self.robust is not None:  # the robust rule screens NaN/Inf rows itself (Byzantine robustness)
            self.executor.add_edge(edge, weight, update, control_coef, tag=self.robust.take(update, "edge", edge))
            return
        if self._fold(("edge", edge), update):
            self.executor.add_edge(edge, weight, update, control_coef)

    def commit_edge(self, edge: int, participants: list[int], base: Any = None, pack_control: bool = False) -> Any:
        """Finish ``edge``'s aggregation of device updates; returns the new edge-model handle.

        ``base``: the model the edge round started from (the ``edge`` server optimizer steps from it);
        ``pack_control``: return ``[model; Σ κ Δc]`` for the upload to the cloud (SCAFFOLD relay).
        """
        if self._nothing_folded(("edge", edge)):  # every update of the round was non-finite and left out
            if base is None or pack_control:
                raise DivergedError(f"t={self.now:.6g}s edge {edge}: every update of the round is a dropped "
                                    "non-finite update; nothing finite is left to aggregate")
            handle = base  # the edge model stays the one the round started from
        else:
            handle = self.executor.commit_edge(edge, self.server_optimizer("edge"), base, pack_control)
            if self.robust is not None:
                self.robust.reports("edge", self.executor.robust_reports("edge"), self.now)
                self.robust.remember(handle, edge, self.robust.compromised_edge(edge), kind="edge")
        self.edge_aggregated(("edge", edge), edge, participants, {"participants": list(participants)})
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
        if not self._nothing_folded(("edge", edge)):  # (every update dropped: nothing was added)
            self.executor.commit_edge(edge)
        if self.robust is not None:  # an aborted round: its rule's report is no aggregation
            self.executor.robust_reports("edge")
            self.robust.drop_sources("edge", edge)

    def add_to_cloud(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """A model arrived at the cloud: fold it into the running aggregation now."""
        if self.robust is not None:  # the robust rule screens NaN/Inf rows itself (Byzantine robustness)
            self.executor.add_cloud(weight, update, control_coef, tag=self.robust.take(update, "cloud", 0))
            return
        if self._fold(("cloud", 0), update):
            self.executor.add_cloud(weight, update, control_coef)

    def _cloud_round_done(self) -> None:
        limit = self.scenario.stop.rounds
        if limit is not None and int(self.counters["cloud_aggregations"]) >= limit:
            self.request_stop("rounds")

    def commit_cloud(self, participants: list[int], tier: str = "device", base: Any = None) -> Any:
        """Finish the cloud aggregation; ``tier`` says whether the updates came from devices or edges."""
        if self._nothing_folded(("cloud", 0)):  # every update of the round was non-finite and left out
            handle = base if base is not None else self._global  # the global model stays as it was
        else:
            handle = self.executor.commit_cloud(self.server_optimizer("cloud"), base)
            if self.robust is not None:
                self.robust.reports("cloud", self.executor.robust_reports("cloud"), self.now)
        self.counters["cloud_aggregations"] += 1
        if tier == "device":
            self.counters["device_updates"] += len(participants)
        rounds = int(self.counters["cloud_aggregations"])
        self.telemetry.instant(("cloud", 0), "aggregate", self.now, round=rounds, participants=list(participants))
        self.telemetry.record(CloudAggregate(rounds, tier, len(participants)))
        self._cloud_round_done()
        return handle

    def screen_update(self, tier: str, base: Any, candidate: Any, update: Any, source: int) -> bool:
        """Whether an asynchronous step from ``base`` to ``candidate`` (made from ``source``'s ``update``)
        is applied: True unless the ``tier`` rule is a screen (Zeno++), which may reject it (counted)."""
        if self.robust is None or not type(self.robust.setup.rule(tier)).asynchronous:
            return True
        tag = self.robust.take(update, tier, 0)
        accepted = self.executor.screen(base, candidate, tag)
        self.robust.reports(tier, self.executor.robust_reports(tier), self.now)
        if not accepted:
            self.counters["updates_rejected"] = self.counters.get("updates_rejected", 0) + 1
        return accepted

    def robust_combine(self, tier: str, entity: int, base: Any, deltas: list[Term]) -> Any:
        """``base + Σc · rule(Δ)`` over a buffer / queue of deltas ``Δ_i = a_i − b_i`` weighted ``c_i``
        (FedBuff, AHFL) when the ``tier`` rule is robust; None under the mean (the caller combines)."""
        if self.robust is None or not self.robust.queues:
            return None
        tags = [self.robust.take(a, tier, entity) for _, a, _ in deltas]
        rule = self.robust.setup.rule(tier)
        if rule.is_mean:
            self.robust.drop_sources(tier, entity)
            return None
        handle = self.executor.robust_combine(tier, entity, self.server_optimizer(tier), base, deltas, tags)
        self.robust.reports(tier, self.executor.robust_reports(tier), self.now)
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
        handle = self.executor.robust_average(tier, entity, models, weights, base, tags)
        self.robust.reports(tier, self.executor.robust_reports("cloud"), self.now)
        return handle

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of the weighted average of model handles, computed by a role (never in the driver)."""
        if self._bad:
            kept = [(m, w) for m, w in zip(models, weights) if not self._left_out(m, "model")]
            if not kept:
                raise DivergedError(f"t={self.now:.6g}s: every model of an average is a dropped non-finite update; "
                                    "nothing finite is left to average")
            if len(kept) < len(models):
                models, weights = [m for m, _ in kept], [w for _, w in kept]
        return self.executor.average(models, weights)

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at ``tier`` by the executor."""
        terms = self._finite_terms(tier, terms)
        if not terms:
            raise DivergedError(f"t={self.now:.6g}s {tier}: every term of an aggregation is a dropped non-finite "
                                "update; nothing finite is left to combine")
        return self.executor.combine(tier, terms)

    def track_staleness(self, tier: str) -> None:
        """Report the staleness of updates applied at ``tier`` in the summary."""
        self.telemetry.track_staleness(tier)

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
        self._cloud_round_done()

    def drop_update(self, tier: str, entity: int, source: int, staleness: int) -> None:
        """An update older than ``max_staleness`` reached ``tier`` and is discarded (counted)."""
        self.counters["updates_dropped"] += 1
        lane = ("edge", entity) if tier == "edge" else ("cloud", 0)
        self.telemetry.instant(lane, "drop", self.now, source=source, staleness=staleness)
        self.telemetry.record(UpdateDropped(tier, entity, source, staleness))

    def queue_length(self, tier: str, entity: int, length: int) -> None:
        """The queue of ``tier`` at ``entity`` holds ``length`` updates from now on."""
        self.telemetry.queue_length(tier, entity, length)
