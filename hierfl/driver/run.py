"""``run_scenario``: build the executor, the telemetry and the protocol, run the loop, write the summary.

A run is a pure function of (scenario, seed): the real clock is read only to report ``wall_s``.
"""

from __future__ import annotations

import dataclasses
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hierfl import __version__
from hierfl.build import Built, build
from hierfl.scenario.loader import dump_scenario
from hierfl.scenario.schema import Scenario
from hierfl.core.dynamics import Dynamics
from hierfl.driver.context import Context, RunError
from hierfl.driver.loop import ProgressFn, RunLoop, trace_offline, trace_slowdowns
from hierfl.env.records import ClustersRecord, Recovered, RunEnd, RunStart
from hierfl.driver.robustness import robust_setup
from hierfl.output.files import write_config, write_model, write_summary
from hierfl.output.telemetry import RunTelemetry
from hierfl.runtime.executor import Executor, RunData
from hierfl.runtime.start import ExecutorStart, process_launch_time, start_executor

__all__ = ["run_scenario", "resume_run", "start_and_build", "RunResult", "RunError", "package_versions"]


@dataclass
class RunResult:
    """What :func:`run_scenario` returns."""

    out_dir: Path
    summary: dict[str, Any]
    final_params: np.ndarray
    evals: list[dict[str, Any]] = field(default_factory=list)


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


def _initial_clusters(scenario: Scenario, world: Any, protocol: Any) -> ClustersRecord:
    rec = protocol.clusters_record()
    if rec is not None:
        return rec
    if world.num_edges:
        members = [world.edge_members(e).tolist() for e in range(world.num_edges)]
        return ClustersRecord(0.0, "initial", scenario.topology.grouping, members,
                              [f"edge {e}" for e in range(world.num_edges)])
    return ClustersRecord(0.0, "initial", "flat", [list(range(world.num_devices))], ["cloud"])


def start_and_build(scenario: Scenario, source: str | None = None) -> tuple[ExecutorStart, Built]:
    """Begin the executor's start-up, then build the scenario while the executor's processes start.

    ``ray.init`` runs first, on this thread; the actors it then requests start (each imports
    torch) while the data is generated here. (The build does not run on a helper thread during
    ``ray.init``: ``ray.init`` forks Ray's daemons, and a fork while another thread is inside
    OpenBLAS deadlocks in OpenBLAS's fork handler.) Build errors
    (:class:`~hierfl.config.errors.ConfigError`) are raised here, after the start-up has been
    released.
    """
    rt = scenario.runtime
    start = start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
    try:
        built, start.marks["data_built"] = _build_timed(scenario, source, start)
    except BaseException:
        start.close()
        raise
    return start, built


def _build_timed(scenario: Scenario, source: str | None, start: ExecutorStart) -> tuple[Built, float]:
    # the model's torch work runs where the executor has torch (Ray: a host actor), not here
    built = build(scenario, source, model_call=start.model_call)
    return built, time.time()


def _share_dataset(built: Built, executor: Executor) -> None:
    """Point ``built``'s dataset at the executor's copy (Ray: the object store), freeing the driver's own."""
    views = getattr(executor, "data_views", lambda: None)()
    if views is not None:
        x, y, x_test, y_test = views
        built.dataset = dataclasses.replace(built.dataset, x_train=x, y_train=y, x_test=x_test, y_test=y_test)


def _startup_marks(executor: Executor, start: ExecutorStart, driver: dict[str, float]) -> dict[str, float]:
    """Epoch seconds at which the start-up steps ended (the actors' own, for a Ray executor)."""
    marks = getattr(executor, "startup_marks", None)
    return {**driver, **(marks() if marks is not None else start.marks)}


def _ready(marks: dict[str, float]) -> float:
    """When the executor could run jobs: the actors' warm-up end (Ray), else the executor's creation."""
    warm = [marks[k] for k in ("hosts_warm", "cloud_warm") if k in marks]
    return max(warm) if warm else marks["run_start"]


def _since_launch(marks: dict[str, float], run_start: float) -> dict[str, float | str]:
    """The marks in seconds since the process was launched (or, where that is unknown, since the run began)."""
    launch = process_launch_time()
    origin = launch if launch is not None and launch <= min(marks.values()) else run_start
    out: dict[str, float | str] = {"since": "launch" if origin != run_start else "run_start"}
    out.update({k: round(v - origin, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])})
    return out


def run_scenario(scenario: Scenario, out_dir: str | Path, progress: ProgressFn | None = None,
                 source: str | None = None, built: Built | None = None,
                 start: ExecutorStart | None = None) -> RunResult:
    """Run ``scenario`` and write its output files to ``out_dir``.

    Raises :class:`~hierfl.config.errors.ConfigError` before anything is written if the
    scenario cannot be built, and :class:`RunError` (after writing the metrics so far and a
    ``summary.json`` with ``status: failed``) if the run fails part-way; the run's last
    checkpoint (``checkpoint.pkl``) is left for ``hierfl resume``.

    ``start``: the executor's start-up, begun by the caller before it built the data (see
    :func:`start_and_build`); the run finishes it and closes it. Without one, it is begun here,
    before the data is built. Once the data is in Ray's object store,
    the dataset arrays of ``built`` are replaced by read-only views of that copy, so the driver
    does not hold the data twice.
    """
    return _execute(scenario, Path(out_dir), progress, source, built, start, None)


def resume_run(run_dir: str | Path, progress: ProgressFn | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (``hierfl resume``).

    The files are cut back to the checkpoint's sizes and the run goes on: they end as the
    uninterrupted run's would (wall-clock fields aside). :class:`RunError` if there is nothing to
    resume.
    """
    from hierfl.driver.checkpoint import load_checkpoint

    ckpt = load_checkpoint(Path(run_dir))
    return _execute(ckpt.scenario, Path(run_dir), progress, ckpt.source, None, None, ckpt)


def _run_data(scenario: Scenario, built: Built, dyn: Dynamics) -> RunData:
    rt = scenario.runtime
    return RunData(built.dataset.x_train, built.dataset.y_train, built.parts, built.dataset.x_test,
                   built.dataset.y_test, built.init_params,
                   (scenario.model, tuple(built.dataset.input_shape), built.dataset.num_classes, rt.torch_threads,
                    rt.fast_path, rt.device),
                   built.world.num_edges, built.spec, robust=robust_setup(scenario, dyn),
                   eval_sets=tuple(built.eval_sets), gpus_per_host=rt.gpus_per_host)


def _execute(scenario: Scenario, out: Path, progress: ProgressFn | None, source: str | None,
             built: Built | None, start: ExecutorStart | None, resume: Any) -> RunResult:
    """A fresh run (``resume`` None) or one resumed from a checkpoint; recovers from lost Ray roles."""
    from hierfl.driver.checkpoint import CHECKPOINT_FILE, Checkpointer

    wall0 = time.perf_counter()
    run_start = time.time()
    rt = scenario.runtime
    if built is None:
        if start is None:
            start, built = start_and_build(scenario, source)
        else:
            try:
                built, start.marks["data_built"] = _build_timed(scenario, source, start)
            except BaseException:
                start.close()
                raise
    start = start or start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
    executor: Executor | None = None
    trace_devices = scenario.output.trace_devices(built.world.num_devices, scenario.seed)
    bounds = {"list_limit": scenario.output.list_limit, "counter_s": scenario.output.counter_s(trace_devices)}
    tensorboard = scenario.output.tensorboard
    if resume is None:
        resolved = scenario.model_copy(update={"versions": package_versions()})
        tel = RunTelemetry(out, trace_devices=trace_devices, tensorboard=tensorboard, **bounds)
        (out / CHECKPOINT_FILE).unlink(missing_ok=True)  # an earlier run's: never resumed over this one
        write_config(out, dump_scenario(resolved))
    else:
        resolved = scenario
        tel = RunTelemetry(out, trace_devices=trace_devices, tensorboard=tensorboard, offsets=resume.offsets, **bounds)
    dyn = built.dynamics or Dynamics.static(built.world.num_devices)
    world = built.world
    tel.write_devices(world, built.availability_labels, [len(w) for w in dyn.windows])
    if resume is None:
        tel.lanes(world.num_edges, world.num_devices)
    summary: dict[str, Any] = {"name": scenario.name, "protocol": scenario.protocol.name, "seed": scenario.seed,
                               "status": "running"}
    run: RunLoop | None = None
    ctx: Context | None = None
    ckpt: Checkpointer | None = None
    try:
        data = _run_data(scenario, built, dyn)
        try:
            executor = start.executor(data)
        except Exception as exc:
            where = f" at {rt.address}" if rt.address else ""
            raise RunError(f"runtime: cannot start the {rt.executor} executor{where}: "
                           f"{type(exc).__name__}: {exc}") from exc
        del data
        _share_dataset(built, executor)
        if resume is None:
            ctx = Context(scenario, built, executor, tel)
            protocol = scenario.protocol.create(ctx)
            startup_s = time.perf_counter() - wall0  # everything before the first event
            tel.clusters(_initial_clusters(scenario, world, protocol))
            tel.record(RunStart(startup_s, executor.name, executor.workers, world.num_devices, built.num_params))
            run = RunLoop(ctx, progress)
            trace_slowdowns(ctx)
        else:
            startup_s = resume.startup_s
            run = resume.restore(executor, tel, progress)
            ctx, protocol = run.ctx, run.protocol
        ckpt = Checkpointer(rt.checkpoint, out, resolved, source, startup_s, resume)
        run.between_events = ckpt
        resumed = resume is not None
        while True:
            try:
                run.loop(protocol, resumed=resumed)
                final = executor.fetch(ctx.global_model)
                break
            except BaseException as exc:
                if ckpt.latest is None or not executor.is_lost(exc):
                    raise
                if ckpt.recoveries >= rt.checkpoint.max_recoveries:
                    raise RunError(f"t={ctx.now:.6g}s: a Ray actor or node was lost again after "
                                   f"{ckpt.recoveries} recoveries (runtime.checkpoint.max_recoveries): "
                                   f"{type(exc).__name__}: {exc}") from exc
                # every role is recreated and the run goes back to its last checkpoint: what was
                # lost is recomputed, bit for bit (a job is a pure function of its inputs)
                lost_t, wall_base = ctx.now, tel._wall0  # wall_s keeps counting across the rollback
                owns_ray = bool(getattr(getattr(executor, "_start", None), "owns_ray", False))
                if owns_ray:  # keep Ray up: the driver's dataset arrays are views of its object store
                    executor._start.owns_ray = False  # type: ignore[attr-defined]
                executor.close()
                executor = None
                tel.close()
                latest = ckpt.latest
                tel = RunTelemetry(out, trace_devices=trace_devices, tensorboard=tensorboard, offsets=latest.offsets,
                                   **bounds)
                tel.write_devices(world, built.availability_labels, [len(w) for w in dyn.windows])
                try:
                    start = start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
                    executor = start.executor(_run_data(scenario, built, dyn))
                except Exception as err:
                    raise RunError(f"runtime: cannot restart the {rt.executor} executor "
                                   f"({type(err).__name__}: {err}) after {_loss_text(exc)}") from exc
                if owns_ray:
                    executor._start.owns_ray = True  # type: ignore[attr-defined]
                run = latest.restore(executor, tel, progress)
                tel._wall0 = wall_base
                ctx, protocol = run.ctx, run.protocol
                ckpt.recoveries += 1
                run.between_events = ckpt
                tel.record(Recovered(_loss_text(exc), lost_t, ckpt.recoveries, executor.workers))
                resumed = True
        if ctx.faults is not None:
            ctx.faults.finish(ctx.now)
        trace_offline(ctx)
        write_model(out, final)
        last = run.evals[-1]
        startup = _startup_marks(executor, start, {"run_start": run_start})
        summary.update({
            "status": "completed", "stop_reason": ctx.stop_reason,
            "final_accuracy": last["accuracy"], "final_loss": last["loss"],
            "best_accuracy": max((e["accuracy"] for e in run.evals if e["accuracy"] is not None), default=None),
            **({"final_device_accuracy": last["device_accuracy_mean"]} if "device_accuracy_mean" in last else {}),
            "target_accuracy": run.target, "time_to_target_s": run.time_to_target,
            "rounds_to_target": run.rounds_to_target,
            "virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
            "wall_s": tel.wall_s() if resume is not None else time.perf_counter() - wall0,
            # start-up: everything before the first event, the checkpoint taken there included
            "startup_s": max(startup_s + ckpt.first_s, _ready(startup) - run_start),
            "startup": _since_launch(startup, run_start),
            "executor": executor.name, "workers": executor.workers,
            "devices": world.num_devices, "edge_servers": world.num_edges,
            "num_params": built.num_params, "model_bytes": world.model_bytes,
            "totals": dict(ctx.counters), "events": run.events,
        })
        if tel.staleness:
            summary["staleness"] = tel.staleness_summary()
        if dyn.warnings:
            summary["warnings"] = list(dyn.warnings)
        if tel.queues.series:
            summary["queues"] = tel.queues.summary(ctx.now)
        if ctx.robust is not None:
            summary["robustness"] = ctx.robust.summary()
        if ckpt.recoveries:
            summary["recoveries"] = ckpt.recoveries
        if ctx.energy is not None:  # energy: per-device joules in devices.csv, a breakdown in the summary
            tel.device_columns(ctx.energy.columns())
            summary["energy"] = ctx.energy.summary(world.tier)
        tel.record(RunEnd(ctx.stop_reason))
        write_summary(out, summary)
        ckpt.remove()
        return RunResult(out, summary, final, run.evals)
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else getattr(exc, "status", "failed")
        summary.update({"status": status, "error": f"{type(exc).__name__}: {exc}",
                        "wall_s": time.perf_counter() - wall0})
        reason = "diverged" if status == "diverged" else (ctx.stop_reason if ctx is not None else None)
        if reason is not None:
            summary["stop_reason"] = reason
        if ctx is not None:
            summary.update({"virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
                            "totals": dict(ctx.counters)})
        if run is not None and run.evals:
            summary["final_accuracy"] = run.evals[-1]["accuracy"]
        if ckpt is not None and ckpt.latest is not None:
            summary["resume"] = f"hierfl resume {out}"
            summary["checkpoint_t"] = ckpt.latest.t
        try:
            write_summary(out, summary)
        except OSError as werr:  # a full disk must not hide why the run stopped
            exc.add_note(f"and the summary could not be written: {werr}")
        raise
    finally:
        tel.close()
        (executor if executor is not None else start).close()


def _loss_text(exc: BaseException) -> str:
    """One line naming what was lost: the error's type and first line, and the actor class if Ray says."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    role = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.strip().startswith("class_name:")), None)
    return f"{type(exc).__name__}: {first[:200]}" + (f" ({role})" if role else "")
