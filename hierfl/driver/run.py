"""``run_scenario``: build the executor, the telemetry and the protocol, run the loop, write the summary.

A run is a pure function of (scenario, seed): the real clock is read only to report ``wall_s``.
"""

from __future__ import annotations

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
from hierfl.output.files import write_config, write_model, write_summary
from hierfl.output.telemetry import RunTelemetry
from hierfl.runtime.executor import Executor, RunData, make_executor

__all__ = ["run_scenario", "resume_run", "RunResult", "RunError", "package_versions"]


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


def run_scenario(scenario: Scenario, out_dir: str | Path, progress: ProgressFn | None = None,
                 source: str | None = None, built: Built | None = None) -> RunResult:
    """Run ``scenario`` and write its output files to ``out_dir``.

    Raises :class:`~hierfl.config.errors.ConfigError` before anything is written if the
    scenario cannot be built, and :class:`RunError` (after writing the metrics so far and a
    ``summary.json`` with ``status: failed``) if the run fails part-way; the run's last
    checkpoint (``checkpoint.pkl``) is left for ``hierfl resume``.
    """
    return _execute(scenario, Path(out_dir), progress, source, built, None)


def resume_run(run_dir: str | Path, progress: ProgressFn | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (``hierfl resume``).

    The files are cut back to the checkpoint's sizes and the run goes on: they end as the
    uninterrupted run's would (wall-clock fields aside). :class:`RunError` if there is nothing to
    resume.
    """
    from hierfl.driver.checkpoint import load_checkpoint

    ckpt = load_checkpoint(Path(run_dir))
    return _execute(ckpt.scenario, Path(run_dir), progress, ckpt.source, None, ckpt)


def _execute(scenario: Scenario, out: Path, progress: ProgressFn | None, source: str | None,
             built: Built | None, resume: Any) -> RunResult:
    """A fresh run (``resume`` None) or one resumed from a checkpoint; recovers from lost Ray roles."""
    from hierfl.driver.checkpoint import CHECKPOINT_FILE, Checkpointer

    wall0 = time.perf_counter()
    built = built or build(scenario, source)
    rt = scenario.runtime
    world = built.world
    dyn = built.dynamics or Dynamics.static(built.world.num_devices)
    trace_devices = scenario.output.trace_devices(built.world.num_devices, scenario.seed)
    if resume is None:
        resolved = scenario.model_copy(update={"versions": package_versions()})
        tel = RunTelemetry(out, trace_devices=trace_devices)
        (out / CHECKPOINT_FILE).unlink(missing_ok=True)  # an earlier run's: never resumed over this one
        write_config(out, dump_scenario(resolved))
    else:
        resolved = scenario
        tel = RunTelemetry(out, trace_devices=trace_devices, offsets=resume.offsets)
    tel.write_devices(world, built.availability_labels, [len(w) for w in dyn.windows])
    if resume is None:
        tel.lanes(world.num_edges, world.num_devices)
    executor: Executor | None = None
    summary: dict[str, Any] = {"name": scenario.name, "protocol": scenario.protocol.name, "seed": scenario.seed,
                               "status": "running"}
    run: RunLoop | None = None
    ctx: Context | None = None
    data = RunData(built.dataset.x_train, built.dataset.y_train, built.parts, built.dataset.x_test,
                   built.dataset.y_test, built.init_params,
                   (scenario.model, tuple(built.dataset.input_shape), built.dataset.num_classes, rt.torch_threads,
                    rt.fast_path),
                   world.num_edges, built.spec)

    def start_executor() -> Executor:
        try:
            return make_executor(rt.executor, data, workers=rt.workers, address=rt.address)
        except Exception as exc:
            where = f" at {rt.address}" if rt.address else ""
            raise RunError(f"runtime: cannot start the {rt.executor} executor{where}: "
                           f"{type(exc).__name__}: {exc}") from exc

    ckpt: Checkpointer | None = None
    try:
        executor = start_executor()
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
                executor.close()
                executor = None
                tel.close()
                latest = ckpt.latest
                tel = RunTelemetry(out, trace_devices=trace_devices, offsets=latest.offsets)
                tel.write_devices(world, built.availability_labels, [len(w) for w in dyn.windows])
                try:
                    executor = start_executor()
                except RunError as err:
                    raise RunError(f"{err}; cannot recover from {type(exc).__name__}: {exc}") from exc
                run = latest.restore(executor, tel, progress)
                tel._wall0 = wall_base
                ctx, protocol = run.ctx, run.protocol
                ckpt.recoveries += 1
                run.between_events = ckpt
                tel.record(Recovered(_loss_text(exc), lost_t, ckpt.recoveries, executor.workers))
                resumed = True
        trace_offline(ctx)
        write_model(out, final)
        last = run.evals[-1]
        summary.update({
            "status": "completed", "stop_reason": ctx.stop_reason,
            "final_accuracy": last["accuracy"], "final_loss": last["loss"],
            "best_accuracy": max((e["accuracy"] for e in run.evals if e["accuracy"] is not None), default=None),
            "target_accuracy": run.target, "time_to_target_s": run.time_to_target,
            "rounds_to_target": run.rounds_to_target,
            "virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
            "wall_s": tel.wall_s() if resume is not None else time.perf_counter() - wall0, "startup_s": startup_s,
            "executor": executor.name, "workers": executor.workers,
            "devices": world.num_devices, "edge_servers": world.num_edges,
            "num_params": built.num_params, "model_bytes": world.model_bytes,
            "totals": dict(ctx.counters), "events": run.events,
        })
        if ckpt.recoveries:
            summary["recoveries"] = ckpt.recoveries
        if tel.staleness:
            summary["staleness"] = tel.staleness_summary()
        if dyn.warnings:
            summary["warnings"] = list(dyn.warnings)
        if tel.queues.series:
            summary["queues"] = tel.queues.summary(ctx.now)
        tel.record(RunEnd(ctx.stop_reason))
        write_summary(out, summary)
        ckpt.remove()
        return RunResult(out, summary, final, run.evals)
    except BaseException as exc:
        summary.update({"status": "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed",
                        "error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - wall0})
        if ctx is not None:
            summary.update({"virtual_time_s": ctx.now, "rounds": int(ctx.counters["cloud_aggregations"]),
                            "totals": dict(ctx.counters)})
        if run is not None and run.evals:
            summary["final_accuracy"] = run.evals[-1]["accuracy"]
        if ckpt is not None and ckpt.latest is not None:
            summary["resume"] = f"hierfl resume {out}"
            summary["checkpoint_t"] = ckpt.latest.t
        write_summary(out, summary)
        raise
    finally:
        tel.close()
        if executor is not None:
            executor.close()


def _loss_text(exc: BaseException) -> str:
    """One line naming what was lost: the error's type and first line, and the actor class if Ray says."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    role = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.strip().startswith("class_name:")), None)
    return f"{type(exc).__name__}: {first[:200]}" + (f" ({role})" if role else "")
