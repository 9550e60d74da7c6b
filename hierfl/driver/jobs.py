"""The job pipeline: a device's local training job from its start (duration, losses, Byzantine
behaviour, energy, trace) to its collection (stats, counters, non-finite updates).

Which stages a job goes through is fixed by the scenario when the run starts; a job's duration is a
pure function of the scenario, the device, its job number and the virtual time, never of the model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.dynamics import finish_time
from hierfl.kernel.engine import Event, Priority
from hierfl.core.jobs import Job
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec, job_samples, work_samples
from hierfl.driver.errors import DivergedError, RunError

if TYPE_CHECKING:
    from hierfl.driver.context import Context

__all__ = ["Jobs", "NONFINITE"]

NONFINITE = "nonfinite"  # the key a device host sets in a job's stats when its update holds NaN/Inf
_NO_MARK: dict[str, Any] = {}  # a job's trace marks when it has none (never modified)


class Jobs:
    """Local training jobs of one run (see the module docstring)."""

    def __init__(self, ctx: Context, world: Any, spec: TrainSpec, eval_cost: Any, energy: Any,
                 model_of: np.ndarray | None = None) -> None:
        self.seed = ctx.seed
        self.dyn = ctx.dyn
        self._world = world
        self._spec = spec
        self.executor = ctx.executor
        self.telemetry = ctx.telemetry
        self.counters = ctx.counters
        self.queue = ctx.queue
        self.transfers = ctx.transfers
        self.robust = ctx.robust
        self.aggregation = ctx.aggregation
        self.eval_cost = eval_cost
        self.energy = energy
        # a privacy accountant that counts every job a device starts (privacy.dp_sgd), or None
        privacy = getattr(ctx, "privacy", None)
        self.job_ledger = privacy if getattr(privacy, "per_job", False) else None
        self._request_stop = getattr(ctx, "request_stop", None)
        self._drop_nonfinite = ctx.scenario.robustness.on_nonfinite == "drop"
        self._jobs_started = np.zeros(world.num_devices, dtype=np.int64)
        # each device's nominal job seconds (world.compute_s) for the latest spec's work, formed at once
        # on first use (8 B per device); speeds and sample counts never change during a run
        self._nominal: np.ndarray | None = None
        self._nominal_spec: TrainSpec | None = None
        self._nominal_by_work: dict[tuple[Any, ...], np.ndarray] = {}
        # a job method's plain rounds (a warm-up of the whole model): the method starts after this many cloud rounds
        self._warmup_rounds = 0 if spec.method is None else spec.method.plain_rounds()
        # models: which architecture each device runs, stamped on its jobs' specs (None: one model, no stamp)
        self._model_of = model_of
        self._stamped: dict[tuple[TrainSpec, int], TrainSpec] = {}
        # training.lr_schedule: a job's learning rate times the schedule's factor of its round (the cloud
        # aggregations done when it starts); None for a constant rate (no spec is touched)
        schedule = ctx.scenario.training.lr_schedule
        self._schedule = None if schedule.constant else schedule
        self._sched_round = -1
        self._sched_specs: dict[int, tuple[TrainSpec, TrainSpec]] = {}

    @property
    def now(self) -> float:
        """The virtual time now."""
        return float(self.queue.now)

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
        method = spec.method
        key = (spec.epochs, spec.steps, spec.batch_size, spec.revealed, spec.shared, spec.work_factor,
               None if method is None else method.cost_key())
        nominal = self._nominal_by_work.get(key)
        if nominal is None:
            n, speed = self._world.samples.astype(np.int64), self._world.speed_sps.astype(np.float64)
            if spec.revealed is not None:  # streaming data: the job sees only the samples revealed so far
                n = np.minimum(n, spec.revealed)
            if spec.shared is not None:  # a shared dataset: every device trains on D_g as well (less its own share)
                n = n + spec.shared.total
                for sharer in spec.shared.sharers:
                    n[sharer] -= spec.shared.own(sharer)
            uniform = None if method is None else method.uniform_work(spec)
            if uniform is not None:  # the same on every device (public data)
                work = np.full(n.shape, uniform)
                n = np.ones_like(n)  # (its private sample count does not matter)
            elif method is not None and method.custom_work:  # the method's own work, device by device
                work = np.array([method.work_samples(int(k), spec) if k > 0 else 0.0 for k in n])
            else:
                if spec.epochs is not None:
                    work = spec.epochs * n
                else:
                    work = spec.steps * (np.minimum(spec.batch_size, n) if spec.batch_size else n)
                if spec.work_factor != 1.0:  # a heavier local loss takes longer
                    work = work * spec.work_factor
            with np.errstate(divide="ignore", invalid="ignore"):
                work = work.astype(np.float64)
                nominal = work / speed
            nominal[(n < 1) | ~(speed > 0)] = np.nan
            self._nominal_by_work[key] = nominal
        self._nominal, self._nominal_spec = nominal, spec
        return nominal

    def charge_device_eval(self) -> None:
        """An evaluation instant: with ``evaluation.device_eval_cost: forward`` the evaluated devices are
        busy for their forward pass (:mod:`hierfl.driver.eval_cost`); free otherwise."""
        if self.eval_cost is not None:
            self.eval_cost.charge(self.now, self.dyn.windows, self.telemetry)

    def scheduled(self, spec: TrainSpec) -> TrainSpec:
        """``spec`` with the learning rate of the round a job starting now belongs to (``training.lr_schedule``):
        ``lr × factor(r)``, ``r`` = the cloud aggregations done so far — a synchronous protocol's round, an
        asynchronous one's cloud-model version. Made once per spec and round."""
        if self._schedule is None:
            return spec
        r = int(self.counters["cloud_aggregations"])
        if r != self._sched_round:
            self._sched_round = r
            self._sched_specs.clear()
        made = self._sched_specs.get(id(spec))
        if made is None or made[0] is not spec:
            made = self._sched_specs[id(spec)] = (spec, dataclasses.replace(spec, lr=spec.lr * self._schedule.scale(r)))
        return made[1]

    def start_training(self, device: int, params: Any, spec: TrainSpec | None = None, control: Any = None) -> Job:
        """Submit ``device``'s next job now (see :meth:`start_job`, which also schedules its end).

        The duration integrates the device's slowdown windows and a per-task lognormal jitter. If
        the device will go offline, or the task fails (``devices.dropout``), before the job ends, the
        job is not run at all: ``job.lost_at`` says when the protocol will hear of it.
        """
        now = self.queue.now
        spec = spec or self._spec
        if self._schedule is not None:
            spec = self.scheduled(spec)
        if self._model_of is not None:
            spec = self._model_spec(spec, device)
        if self._warmup_rounds:  # (method_phase's own first test)
            spec = self.method_phase(spec)
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
            self.energy.job_started(device, job_id,
                                    work_samples(job_samples(int(self._world.samples[device]), device, spec), spec))
        if not spec.train:  # timing only: the update is the model the job started from
            kept = self.telemetry.trace.devices  # (telemetry.span's lane check first: most lanes of a large run are not kept)
            if kept is None or device in kept:
                self.telemetry.span(("device", device), "train", t0, busy_s, job=job_id)
            return Job(device, job_id, params, None, compute_s, now, -1, ran=False)
        if self.job_ledger is not None and not self.job_ledger.job(device, spec) and self._request_stop is not None:
            # its steps would take the device past the ε budget: the run ends after this event, before the job's
            # update can reach a server (it is not counted)
            self._request_stop("epsilon")
        # the job's seed (a pure function of the run seed, device and job number) only matters when it trains
        seed = stream_seed(self.seed, "train", device, job_id)
        new, stats, host = self.executor.train(device, seed, spec, params, control)
        if self.robust is not None:
            self.robust.remember(new, device, behavior)
        self.telemetry.span(("device", device), "train", t0, busy_s, job=job_id, **mark)
        return Job(device, job_id, new, stats, compute_s, now, host)

    def model_index(self, device: int) -> int:
        """Which of the run's architectures ``device`` runs (``models:``; 0 = ``model``)."""
        return 0 if self._model_of is None else int(self._model_of[device])

    def _model_spec(self, spec: TrainSpec, device: int) -> TrainSpec:
        """``spec`` for ``device``'s architecture (``models:``): the same spec with ``model`` set, made once."""
        assert self._model_of is not None
        key = (spec, int(self._model_of[device]))
        stamped = self._stamped.get(key)
        if stamped is None:
            stamped = self._stamped[key] = dataclasses.replace(spec, model=key[1])
        return stamped

    def method_phase(self, spec: TrainSpec) -> TrainSpec:
        """``spec`` as jobs and evaluations run it now: during its job method's plain rounds
        (:meth:`JobMethod.plain_rounds <hierfl.core.method.JobMethod.plain_rounds>` cloud rounds) without the
        method — plain jobs on the whole model; when they end, devices whose state was never written start
        from the global model (:meth:`Executor.set_state_base <hierfl.runtime.executor.Executor.set_state_base>`)."""
        if not self._warmup_rounds or spec.method is None or spec.method != self._spec.method:
            return spec  # (a protocol's own job, with a method of its own, is not the run's method's warm-up)
        if self.counters["cloud_aggregations"] < self._warmup_rounds:
            return dataclasses.replace(spec, method=None)
        self._warmup_rounds = 0
        self.executor.set_state_base(self.aggregation.global_model)
        return spec

    def planned_compute_s(self, device: int, spec: TrainSpec | None = None) -> float:
        """How long ``device``'s next job would take if started now (what :meth:`start_job` will use)."""
        return self._duration(device, spec or self._spec, int(self._jobs_started[device]))

    def start_job(self, device: int, model: Any, payload: Any, spec: TrainSpec | None = None,
                  control: Any = None, done: str = "train_done", end: float | None = None) -> tuple[Job, Event]:
        """Submit the job and schedule ``done`` (or, if the device drops out first, the loss)."""
        job = self.start_training(device, model, spec, control)
        if job.lost_at is not None:
            return job, self.transfers.job_lost(device, job.lost_at, str(job.lost_reason), payload)
        if end is not None:
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

    def _nonfinite_update(self, job: Job) -> None:
        """``job``'s result holds NaN or Inf: stop the run (``fail``) or remember its handle (``drop``)."""
        if not self._drop_nonfinite:
            raise DivergedError(f"t={self.now:.6g}s device {job.device} job {job.job}: the update is not finite "
                                "(NaN or Inf), so the run diverged; lower training.lr, or set "
                                "robustness.on_nonfinite: drop to leave such updates out")
        self.aggregation.nonfinite.mark(job)

    def _wait(self, job: Job) -> dict[str, float]:
        try:
            stats = self.executor.wait(job)
        except Exception as exc:
            raise RunError(f"t={self.now:.6g}s device {job.device} job {job.job}: training failed: {exc}") from exc
        return stats

    def cancel_device(self, device: int) -> None:
        """Withdraw everything ``device`` has in flight."""
        self.transfers.cancel_device(device)
