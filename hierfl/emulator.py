"""The driver: virtual clock + event queue + protocol + executor + recorder.

The loop pops the next event, lets the protocol react, and never waits before the event that
needs a result. Evaluations and the stop condition are events too, so a run is a pure function
of (scenario, seed): the real clock is read only to report ``wall_s``.

The network half of :class:`Context` (transfers, link events, device losses) is in
:mod:`hierfl.transfers`; the event loop and evaluations of :func:`run_scenario` in :mod:`hierfl.runloop`.
"""

from __future__ import annotations

import copy
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from hierfl import __version__
from hierfl.build import Built, build
from hierfl.core.dynamics import Dynamics, factor_at, finish_time
from hierfl.core.engine import Event, EventQueue, Priority
from hierfl.core.network import FlowNetwork
from hierfl.core.rng import stream, stream_seed
from hierfl.core.timeseries import QueueTracker
from hierfl.core.work import TrainSpec
from hierfl.recorder import Recorder
from hierfl.scenario.loader import dump_scenario
from hierfl.scenario.schema import Scenario
from hierfl.runloop import (ProgressFn, RunError, RunResult, _availability_name, _Run, _trace_offline,
                            _trace_slowdowns)
from hierfl.runtime.executor import Executor, Job, RunData, Term, make_executor
from hierfl.transfers import TransferMixin, _Transfer

__all__ = ["Context", "Job", "RunResult", "RunError", "run_scenario", "package_versions"]

COUNTERS = ("cloud_aggregations", "edge_aggregations", "device_updates", "train_jobs", "compute_s",
            "bytes_device_tier", "bytes_edge_tier", "bytes_cloud", "messages_cloud", "bytes_d2d",
            "updates_dropped", "devices_lost", "stragglers_dropped", "wasted_compute_s")


def package_versions() -> dict[str, str]:
    """Versions recorded in ``config.yaml``."""
    import importlib.metadata as md

    out = {"hierfl": __version__, "python": platform.python_version()}
    for pkg in ("numpy", "torch", "ray", "pydantic", "scipy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


class Context(TransferMixin):
    """What a protocol can do: schedule events, start and collect work, aggregate, record.

    Every action is stamped with the current virtual time; durations come from the world.
    """

    def __init__(self, scenario: Scenario, built: Built, executor: Executor, recorder: Recorder) -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self.dyn: Dynamics = built.dynamics or Dynamics.static(built.world.num_devices)
        # link events change the world's arrays during the run: work on a copy (Built is reusable)
        self.world = copy.deepcopy(built.world) if self.dyn.links else built.world
        self._base_links = {(w.target, w.field): self._link_get(w.target, w.field) for w in self.dyn.links}
        self.spec: TrainSpec = built.spec
        self.executor = executor
        self.recorder = recorder
        self.queue = EventQueue()
        self.counters: dict[str, float] = {k: 0 for k in COUNTERS}
        self.global_model: Any = executor.initial_model()
        self.stopping = False
        self.stop_reason: str | None = None
        self._jobs_started = np.zeros(self.world.num_devices, dtype=np.int64)
        # learning plug-ins (issue 7): SCAFFOLD's per-device control step weights κ_i, or None
        trainer = scenario.training.trainer
        self._control_coefs: np.ndarray | None = None
        if self.spec.control_variates:
            from hierfl.core.scaffold import control_weights

            self._control_coefs = control_weights(self.world.samples, getattr(trainer, "control_weighting", "samples"))
        # staleness of every applied update, per tier ("edge": device→leader, "cloud"); only
        # asynchronous protocols record any (synchronous ones apply fresh updates only)
        self.staleness: dict[str, list[int]] = {}
        # lengths of the update queues (AHFL leaders and cloud, FedBuff's buffer) over virtual time
        self.queue_tracker = QueueTracker()
        self._wall0 = time.perf_counter()
        self.net = FlowNetwork(self._capacities(), contention=scenario.network.contention)
        self._transfers: dict[int, _Transfer] = {}
        self._delivery: dict[int, int] = {}           # delivery event seq → transfer id
        self._device_transfers: dict[int, set[int]] = {}
        self._device_events: dict[int, list[Event]] = {}  # pending train_done / lost events per device
        self._next_flow = 0
        self._net_event: Event | None = None
        for t in self.dyn.link_boundaries():
            self.queue.push(t, "_link", {}, Priority.WORLD)

    # -- time and randomness ------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time in seconds."""
        return self.queue.now

    def wall_s(self) -> float:
        """Real seconds since the run started (reported, never used for decisions)."""
        return time.perf_counter() - self._wall0

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        """The named random stream ``(seed, name, ids)``."""
        return stream(self.seed, name, *ids)

    def schedule(self, delay: float, kind: str, payload: dict[str, Any] | None = None,
                 priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` ``delay`` virtual seconds from now."""
        return self.queue.push_after(delay, kind, payload, priority)

    # -- work -----------------------------------------------------------------------------------
    def _duration(self, device: int, spec: TrainSpec, job_id: int) -> float:
        """Virtual seconds job ``job_id`` of ``device`` takes if it starts now: nominal time × per-task
        jitter (lognormal, mean 1), integrated over the device's slowdown windows."""
        work = self.world.compute_s(device, spec)
        dyn = self.dyn
        if dyn.jitter_sigma > 0:
            z = float(stream(self.seed, "jitter", device, job_id).standard_normal())
            work *= math.exp(dyn.jitter_sigma * z - dyn.jitter_sigma ** 2 / 2)
        return finish_time(self.now, work, dyn.windows[device]) - self.now if dyn.windows[device] else work

    def planned_compute_s(self, device: int, spec: TrainSpec | None = None) -> float:
        """How long ``device``'s next job would take if started now (what :meth:`start_training` will use)."""
        return self._duration(device, spec or self.spec, int(self._jobs_started[device]))

    def start_training(self, device: int, params: Any, spec: TrainSpec | None = None, control: Any = None) -> Job:
        """Submit ``device``'s next job now; the protocol schedules its end ``job.compute_s`` later.

        The duration integrates the device's slowdown windows and a per-task lognormal jitter. If
        the device will go offline, or the task fails (``devices.dropout``), before the job ends, the
        job is not run at all: ``job.lost_at`` says when the protocol will hear of it.
        ``control``: SCAFFOLD's server control handle (see :meth:`control`), for such trainers.
        """
        spec = spec or self.spec
        job_id = int(self._jobs_started[device])
        self._jobs_started[device] += 1
        seed = stream_seed(self.seed, "train", device, job_id)
        compute_s = self._duration(device, spec, job_id)
        dyn = self.dyn
        lost_at, reason = math.inf, None
        if dyn.dropout > 0:
            u = stream(self.seed, "dropout", device, job_id).random(2)
            if u[0] < dyn.dropout:
                lost_at, reason = self.now + float(u[1]) * compute_s, "dropout"
        if not dyn.availability.trivial:
            down = dyn.availability.next_down(device, self.now)
            if down < self.now + compute_s and down < lost_at:
                lost_at, reason = down, "offline"
        if math.isfinite(lost_at):
            self.recorder.span(("device", device), "train", self.now, lost_at - self.now, job=job_id, lost=reason)
            return Job(device, job_id, None, None, compute_s, self.now, -1, lost_at, reason)
        new, stats, host = self.executor.train(device, seed, spec, params, control)
        self.recorder.span(("device", device), "train", self.now, compute_s, job=job_id)
        return Job(device, job_id, new, stats, compute_s, self.now, host)

    # -- the world as it is now (protocols that adapt — re-clustering, deadlines — read these) ---
    def current_compute_s(self, spec: TrainSpec | None = None) -> np.ndarray:
        """(N,) seconds one job of ``spec`` would take on each device if started now (at today's slowdown)."""
        spec = spec or self.spec
        return np.array([self.world.compute_s(d, spec) * factor_at(self.dyn.windows[d], self.now)
                         for d in range(self.world.num_devices)])

    def current_upload_s(self) -> np.ndarray:
        """(N,) seconds one model upload device → its server would take if started now (no contention)."""
        return np.array([self.world.upload_s(d) for d in range(self.world.num_devices)])

    def current_download_s(self) -> np.ndarray:
        """(N,) seconds one model download server → device would take if started now (no contention)."""
        return np.array([self.world.download_s(d) for d in range(self.world.num_devices)])

    def finish_training(self, job: Job) -> dict[str, float]:
        """Collect a job whose virtual end has come (blocks only if it is still running for real)."""
        try:
            stats = self.executor.wait(job)
        except Exception as exc:
            raise RunError(f"t={self.now:.6g}s device {job.device} job {job.job}: training failed: {exc}") from exc
        self.counters["train_jobs"] += 1
        self.counters["compute_s"] += job.compute_s
        return stats

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of the weighted average of model handles, computed by a role (never in the driver)."""
        return self.executor.average(models, weights)

    # -- learning plug-ins: server optimizers (ALGORITHMS.md §5.7) and SCAFFOLD (§5.6) ------------
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

    def server_step(self, tier: str, entity: int, base: Any, delta_terms: list[Term]) -> Any:
        """The ``tier`` optimizer steps ``base`` with ``Δ = Σ c·(a − b)`` (asynchronous aggregations).

        Protocols call this only when :meth:`server_optimizer` is not None; with plain averaging they
        keep their own exact combination (``base + Δ`` in one pass).
        """
        opt = self.server_optimizer(tier)
        if opt is None:
            raise RuntimeError(f"no server optimizer at the {tier} tier: combine the terms instead")
        return self.executor.server_step(tier, entity, opt, base, delta_terms)

    def add_to_edge(self, edge: int, update: Any, weight: float, control_coef: float | None = None) -> None:
        """An update arrived at ``edge``: fold it into the edge's running aggregation now.

        ``control_coef``: the update is SCAFFOLD's packed ``[y; Δc]`` and ``κ·Δc`` joins the edge's relay sum.
        """
        self.executor.add_edge(edge, weight, update, control_coef)

    def commit_edge(self, edge: int, participants: list[int], base: Any = None, pack_control: bool = False) -> Any:
        """Finish ``edge``'s aggregation of device updates; returns the new edge-model handle.

        ``base``: the model the edge round started from (the ``edge`` server optimizer steps from it);
        ``pack_control``: return ``[model; Σ κ Δc]`` for the upload to the cloud (SCAFFOLD relay).
        """
        handle = self.executor.commit_edge(edge, self.server_optimizer("edge"), base, pack_control)
        self.counters["edge_aggregations"] += 1
        self.counters["device_updates"] += len(participants)
        self.recorder.instant(("edge", edge), "aggregate", self.now, participants=list(participants))
        self.recorder.metric({"t": self.now, "wall_s": self.wall_s(), "event": "edge_aggregate", "edge": edge,
                              "participants": len(participants)})
        return handle

    def add_to_cloud(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """A model arrived at the cloud: fold it into the running aggregation now (``control_coef``: packed SCAFFOLD)."""
        self.executor.add_cloud(weight, update, control_coef)

    def commit_cloud(self, participants: list[int], tier: str = "device", base: Any = None) -> Any:
        """Finish the cloud aggregation; ``tier`` says whether the updates came from devices or edges.

        ``base``: the global model the round started from (the ``cloud`` server optimizer steps from it).
        """
        handle = self.executor.commit_cloud(self.server_optimizer("cloud"), base)
        self.counters["cloud_aggregations"] += 1
        if tier == "device":
            self.counters["device_updates"] += len(participants)
        rounds = int(self.counters["cloud_aggregations"])
        self.recorder.instant(("cloud", 0), "aggregate", self.now, round=rounds, participants=list(participants))
        self.recorder.metric({"t": self.now, "wall_s": self.wall_s(), "event": "cloud_aggregate", "round": rounds,
                              "tier": tier, "participants": len(participants)})
        limit = self.scenario.stop.rounds
        if limit is not None and rounds >= limit:
            self.request_stop("rounds")
        return handle

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at ``tier`` (``edge`` or ``cloud``) by the executor."""
        return self.executor.combine(tier, terms)

    def record_async_aggregation(self, tier: str, entity: int, participants: list[int], weights: list[float],
                                 staleness: list[int], version: int, queue_len: int, source: str = "device") -> None:
        """Account one asynchronous aggregation at a leader (``tier="edge"``) or the cloud.

        ``participants`` are device ids (or leader ids when ``source="edge"``), ``weights`` the
        coefficient each update got, ``staleness`` each update's τ, ``version`` the aggregator's
        version after it, ``queue_len`` the updates waiting when it fired (dropped ones included).
        """
        self.staleness.setdefault(tier, []).extend(int(t) for t in staleness)
        args = {"participants": list(participants), "weights": list(weights), "staleness": list(staleness),
                "version": version, "queue_len": queue_len}
        if tier == "edge":
            self.counters["edge_aggregations"] += 1
            self.counters["device_updates"] += len(participants)
            self.recorder.instant(("edge", entity), "queue_aggregate", self.now, **args)
            self.recorder.metric({"t": self.now, "wall_s": self.wall_s(), "event": "edge_aggregate", "edge": entity,
                                  **args, "participants": len(participants), "ids": list(participants)})
            return
        self.counters["cloud_aggregations"] += 1
        if source == "device":
            self.counters["device_updates"] += len(participants)
        rounds = int(self.counters["cloud_aggregations"])
        self.recorder.instant(("cloud", 0), "queue_aggregate", self.now, round=rounds, **args)
        self.recorder.metric({"t": self.now, "wall_s": self.wall_s(), "event": "cloud_aggregate", "round": rounds,
                              "tier": source, **args, "participants": len(participants),
                              "ids": list(participants)})
        limit = self.scenario.stop.rounds
        if limit is not None and rounds >= limit:
            self.request_stop("rounds")

    def drop_update(self, tier: str, entity: int, source: int, staleness: int) -> None:
        """An update older than ``max_staleness`` reached ``tier`` and is discarded (counted)."""
        self.counters["updates_dropped"] += 1
        lane = ("edge", entity) if tier == "edge" else ("cloud", 0)
        self.recorder.instant(lane, "drop", self.now, source=source, staleness=staleness)
        self.recorder.metric({"t": self.now, "wall_s": self.wall_s(), "event": "update_dropped", "tier": tier,
                              "at": entity, "source": source, "staleness": staleness})

    def queue_length(self, tier: str, entity: int, length: int) -> None:
        """The queue of ``tier`` (``edge`` = a leader, ``cloud``) at ``entity`` holds ``length`` updates from now on.

        Call it on every change (arrival, aggregation, drop) and once with 0 at start; a change
        becomes one trace counter event, and ``summary.json`` gets the time-weighted mean and max.
        """
        if self.queue_tracker.set(self.now, tier, entity, length):
            lane = ("edge", entity) if tier == "edge" else ("cloud", 0)
            self.recorder.counter(lane, f"queue_len {tier} {entity}" if tier == "edge" else "queue_len cloud",
                                  self.now, updates=length)

    def staleness_summary(self) -> dict[str, Any]:
        """Per tier: histogram ``{τ: count}``, mean, max and count of applied updates' staleness."""
        out: dict[str, Any] = {}
        for tier, values in sorted(self.staleness.items()):
            arr = np.asarray(values, dtype=np.int64)
            hist = np.bincount(arr) if arr.size else np.zeros(0, dtype=np.int64)
            out[tier] = {"histogram": {str(t): int(c) for t, c in enumerate(hist) if c},
                         "mean": float(arr.mean()) if arr.size else None,
                         "max": int(arr.max()) if arr.size else None, "count": int(arr.size)}
        return out

    def set_global(self, handle: Any) -> None:
        """The cloud's model changed."""
        self.global_model = handle

    def request_stop(self, reason: str) -> None:
        """End the run after the current event."""
        if not self.stopping:
            self.stopping, self.stop_reason = True, reason




def run_scenario(scenario: Scenario, out_dir: str | Path, progress: ProgressFn | None = None,
                 source: str | None = None, built: Built | None = None) -> RunResult:
    """Run ``scenario`` and write its output files to ``out_dir``.

    Raises :class:`~hierfl.config.errors.ConfigError` before anything is written if the
    scenario cannot be built, and :class:`RunError` (after writing the metrics so far and a
    ``summary.json`` with ``status: failed``) if the run fails part-way.
    """
    wall0 = time.perf_counter()
    built = built or build(scenario, source)
    resolved = scenario.model_copy(update={"versions": package_versions()})
    rec = Recorder(Path(out_dir))
    rec.write_config(dump_scenario(resolved))
    dyn = built.dynamics or Dynamics.static(built.world.num_devices)
    rec.write_devices(built.world, [_availability_name(b) for b in dyn.availability.base],
                      [len(w) for w in dyn.windows])
    world = built.world
    rec.trace_lanes(world.num_edges, world.num_devices)
    rt = scenario.runtime
    executor: Executor | None = None
    summary: dict[str, Any] = {"name": scenario.name, "protocol": scenario.protocol.name, "seed": scenario.seed,
                               "status": "running"}
    run: _Run | None = None
    ctx: Context | None = None
    try:
        data = RunData(built.dataset.x_train, built.dataset.y_train, built.parts, built.dataset.x_test,
                       built.dataset.y_test, built.init_params,
                       (scenario.model, tuple(built.dataset.input_shape), built.dataset.num_classes, rt.torch_threads),
                       world.num_edges, built.spec)
        try:
            executor = make_executor(rt.executor, data, workers=rt.workers, address=rt.address)
        except Exception as exc:
            where = f" at {rt.address}" if rt.address else ""
            raise RunError(f"runtime: cannot start the {rt.executor} executor{where}: "
                           f"{type(exc).__name__}: {exc}") from exc
        startup_s = time.perf_counter() - wall0
        ctx = Context(scenario, built, executor, rec)
        protocol = scenario.protocol.create(ctx)
        grouping = protocol.clusters_record()
        if grouping is not None:
            rec.clusters(grouping)
        elif world.num_edges:
            members = [world.edge_members(e).tolist() for e in range(world.num_edges)]
            rec.clusters({"t": 0.0, "reason": "initial", "grouping": scenario.topology.grouping,
                          "members": members, "leaders": [f"edge {e}" for e in range(world.num_edges)]})
        else:
            rec.clusters({"t": 0.0, "reason": "initial", "grouping": "flat",
                          "members": [list(range(world.num_devices))], "leaders": ["cloud"]})
        rec.metric({"t": 0.0, "wall_s": ctx.wall_s(), "event": "run_start", "startup_s": startup_s,
                    "executor": executor.name, "workers": executor.workers, "devices": world.num_devices,
                    "num_params": built.num_params})
        run = _Run(ctx, progress)
        _trace_slowdowns(ctx)
        run.loop(protocol)
        _trace_offline(ctx)
        final = executor.fetch(ctx.global_model)
        rec.write_model(final)
        last = run.evals[-1]
        summary.update({
            "status": "completed", "stop_reason": ctx.stop_reason,
            "final_accuracy": last["accuracy"], "final_loss": last["loss"],
            "best_accuracy": max(e["accuracy"] for e in run.evals),
            "target_accuracy": run.target, "time_to_target_s": run.time_to_target,
            "rounds_to_target": run.rounds_to_target,
            "virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
            "wall_s": time.perf_counter() - wall0, "startup_s": startup_s,
            "executor": executor.name, "workers": executor.workers,
            "devices": world.num_devices, "edge_servers": world.num_edges,
            "num_params": built.num_params, "model_bytes": world.model_bytes,
            "totals": dict(ctx.counters),
        })
        if ctx.staleness:
            summary["staleness"] = ctx.staleness_summary()
        if dyn.warnings:
            summary["warnings"] = list(dyn.warnings)
        if ctx.queue_tracker.series:
            summary["queues"] = ctx.queue_tracker.summary(ctx.now)
        rec.metric({"t": ctx.now, "wall_s": ctx.wall_s(), "event": "run_end", "stop_reason": ctx.stop_reason})
        rec.write_summary(summary)
        return RunResult(Path(out_dir), summary, final, run.evals)
    except BaseException as exc:
        summary.update({"status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                        "error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - wall0})
        if ctx is not None:
            summary.update({"virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
                            "totals": dict(ctx.counters)})
        if run is not None and run.evals:
            summary["final_accuracy"] = run.evals[-1]["accuracy"]
        rec.write_summary(summary)
        raise
    finally:
        rec.close()
        if executor is not None:
            executor.close()
