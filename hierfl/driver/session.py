"""One run's phases: open, start (fresh or from a checkpoint), drive (rolling back to the last
checkpoint when a Ray actor or node is lost), and end: finish (completed) or fail (any exception).

Every ending leaves the same evidence (:mod:`hierfl.driver.summary` names the statuses):
``summary.json`` with ``status`` and ``stop_reason`` or ``error``, a ``trace.json`` that parses
(its closing bracket is rewritten at every flush, so even a process killed outright leaves a
valid array), whole ``metrics.jsonl`` lines, and for a run that did not complete, the command that
resumes it when a checkpoint exists.

A lost cluster (the raylet of the driver's node, or the GCS) is seen by a
:class:`~hierfl.runtime.cluster_watch.ClusterWatch` thread, since Ray's core worker may end the
process itself the next time the driver touches the dead raylet's object store. The watch writes
the summary at once, prints one line, interrupts the main thread (which then ends the run the
usual way) and, should the process still be alive after :data:`LOST_GRACE_S`, exits it with
status 1 (a run on another thread than the main one is neither interrupted nor exited).
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.assemble import Built
from hierfl.core.dynamics import Dynamics
from hierfl.driver.checkpoint import CHECKPOINT_FILE, Checkpoint, Checkpointer
from hierfl.driver.context import ClusterLostError, Context, RunError
from hierfl.driver.loop import ProgressFn, RunLoop, trace_offline, trace_slowdowns
from hierfl.driver.opening import (build_timed, initial_clusters, package_versions, resolve_group_max, run_data,
                                   share_dataset, start_and_build, startup_part, world_part)
from hierfl.driver.summary import CLUSTER_LOST, COMPLETED_KEYS, ENDED_KEYS, Summary, header
from hierfl.env.records import Recovered, RunEnd, RunStart
from hierfl.output.files import write_config, write_model, write_summary
from hierfl.output.telemetry import RunTelemetry
from hierfl.driver import undertaker
from hierfl.runtime.cluster_watch import ClusterWatch
from hierfl.runtime.executor import Executor
from hierfl.runtime.role_common import OutOfDeviceMemory
from hierfl.runtime.start import ExecutorStart, start_executor
from hierfl.scenario.loader import dump_scenario
from hierfl.scenario.schema import Scenario

__all__ = ["RunSession", "LOST_GRACE_S"]

LOST_GRACE_S = 20.0
"""Seconds a run whose cluster was lost gets to end by itself before the watch ends the process."""


class RunSession:
    """A run from its build to its summary; :meth:`execute` runs the phases in order."""

    def __init__(self, scenario: Scenario, out: Path, progress: ProgressFn | None, source: str | None,
                 resume: Checkpoint | None, launched: float | None = None) -> None:
        self.scenario, self.out, self.progress, self.source, self.resume = scenario, out, progress, source, resume
        # the run's real clock starts at `launched` (epoch seconds: when the caller began the executor's
        # start-up and the build), else now: wall_s and startup_s then count the build wherever it ran
        self.run_start = time.time() if launched is None else float(launched)
        self.wall0 = time.perf_counter() - (time.time() - self.run_start)
        self.built: Built | None = None
        self.start: ExecutorStart | None = None
        self.executor: Executor | None = None
        self.tel: RunTelemetry | None = None
        self.ctx: Context | None = None
        self.run: RunLoop | None = None
        self.protocol: Any = None
        self.ckpt: Checkpointer | None = None
        self.startup_s = 0.0
        self.lost: str | None = None       # what of the cluster stopped answering (the watch's line)
        self._watch: ClusterWatch | None = None
        self._undertaker: Any = None        # hierfl.driver.undertaker's process, for a Ray run
        self._ending = threading.Lock()    # summary.json is written by one ending only, whole
        self._ended = False
        self._announced = False            # the loss's line was printed by the watch
        # the watch interrupts the run's thread only where it is the main thread (KeyboardInterrupt
        # reaches no other); elsewhere (a sweep's trial thread) the run ends at its next call into Ray
        self._interruptible = threading.current_thread() is threading.main_thread()

    def execute(self, built: Built | None, start: ExecutorStart | None) -> Any:
        """Open, begin, drive and finish the run; any exception ends it through :meth:`fail`."""
        self.open(built, start)
        try:
            self.begin()
            return self.finish(self.drive())
        except BaseException as exc:
            ending = self.fail(exc)
            if ending is exc:
                raise
            raise ending from exc
        finally:
            self.close()

    # -- open ----------------------------------------------------------------------------------
    def open(self, built: Built | None, start: ExecutorStart | None) -> None:
        """Build (the executor starting meanwhile), then the telemetry, ``config.yaml`` and ``devices.csv``."""
        sc, rt = self.scenario, self.scenario.runtime
        if built is None:
            start, built = start_and_build(sc, self.source) if start is None else (start, build_timed(sc, self.source, start))
        self.built, self.start = built, start or start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
        # runtime.group_max: auto resolved once, from the device's total memory; config.yaml records the number
        self.scenario = sc = resolve_group_max(sc, built, self.start)
        self.dyn = built.dynamics or Dynamics.static(built.world.num_devices)
        self.trace_devices = sc.output.trace_devices(built.world.num_devices, sc.seed)
        if self.resume is None:
            self.resolved = sc.model_copy(update={"versions": package_versions()})
            self.tel = self._telemetry(None)
            (self.out / CHECKPOINT_FILE).unlink(missing_ok=True)  # an earlier run's: never resumed over this one
            write_config(self.out, dump_scenario(self.resolved))
            self.tel.lanes(built.world.num_edges, built.world.num_devices)
        else:
            self.resolved = sc
            self.tel = self._telemetry(self.resume.offsets)

    def _telemetry(self, offsets: dict[str, int] | None) -> RunTelemetry:
        """The run's telemetry (``offsets``: reopened at a checkpoint's sizes), ``devices.csv`` written."""
        sc, built = self.scenario, self.built
        assert built is not None
        tel = RunTelemetry(self.out, trace_devices=self.trace_devices, tensorboard=sc.output.tensorboard,
                           offsets=offsets, list_limit=sc.output.list_limit,
                           counter_s=sc.output.counter_s(self.trace_devices))
        tel.write_devices(built.world, built.availability_labels, [len(w) for w in self.dyn.windows])
        return tel

    # -- begin: fresh or resumed ---------------------------------------------------------------
    def begin(self) -> None:
        """The executor with the run's data, then the loop: new (a fresh run) or a checkpoint's."""
        self.executor = self._new_executor()
        share_dataset(self.built, self.executor)
        if self.resume is None:
            self._fresh()
        else:
            self._resumed(self.resume)
        self.ckpt = Checkpointer(self.scenario.runtime.checkpoint, self.out, self.resolved, self.source,
                                 self.startup_s, self.resume)
        self.run.between_events = self.ckpt
        self._watch_cluster()

    def _new_executor(self) -> Executor:
        rt = self.scenario.runtime
        data = run_data(self.scenario, self.built, self.dyn)
        try:
            return self.start.executor(data)
        except OutOfDeviceMemory as exc:  # a host's warm-up group did not fit: its message says what to change
            raise RunError(f"runtime: {getattr(exc, 'cause', exc)}") from exc
        except Exception as exc:
            where = f" at {rt.address}" if rt.address else ""
            raise RunError(f"runtime: cannot start the {rt.executor} executor{where}: "
                           f"{type(exc).__name__}: {exc}") from exc

    def _fresh(self) -> None:
        sc, built, tel = self.scenario, self.built, self.tel
        self.ctx = Context(sc, built, self.executor, tel)
        self.protocol = sc.protocol.create(self.ctx)
        self.startup_s = time.perf_counter() - self.wall0  # everything before the first event
        tel.clusters(initial_clusters(sc, built.world, self.protocol))
        tel.record(RunStart(self.startup_s, self.executor.name, self.executor.workers, built.world.num_devices,
                            built.num_params))
        self.run = RunLoop(self.ctx, self.progress)
        trace_slowdowns(self.ctx)

    def _resumed(self, checkpoint: Checkpoint) -> None:
        self.startup_s = checkpoint.startup_s
        self.run = checkpoint.restore(self.executor, self.tel, self.progress)
        self.ctx, self.protocol = self.run.ctx, self.run.protocol

    # -- drive and recover ---------------------------------------------------------------------
    def drive(self) -> np.ndarray:
        """Run the loop to its end; the final global model. A lost Ray actor or node rolls the run
        back to its last checkpoint on fresh roles (:meth:`recover`); anything else ends it."""
        resumed = self.resume is not None
        while True:
            try:
                self.run.loop(self.protocol, resumed=resumed)
                return self.executor.fetch(self.ctx.global_model)
            except BaseException as exc:
                if self.lost is not None or self.ckpt.latest is None or not self.executor.cluster.is_lost(exc):
                    raise
                self.recover(exc)
                resumed = True

    def recover(self, exc: BaseException) -> None:
        """Recreate every role and go back to the last checkpoint: what was lost is recomputed, bit
        for bit (a job is a pure function of its inputs). Raises when nothing can be recovered onto."""
        rt, ckpt = self.scenario.runtime, self.ckpt
        gone = self.executor.cluster.lost()
        if gone is not None:  # not an actor: the cluster itself; no role can be made again
            self.lost = gone
            raise ClusterLostError(self._lost_text(gone)) from exc
        if ckpt.recoveries >= rt.checkpoint.max_recoveries:
            raise RunError(f"t={self.ctx.now:.6g}s: a Ray actor or node was lost again after "
                           f"{ckpt.recoveries} recoveries (runtime.checkpoint.max_recoveries): "
                           f"{type(exc).__name__}: {exc}") from exc
        lost_t, old_tel = self.ctx.now, self.tel
        self._stop_watch()
        owned = self.executor.cluster.hand_over()  # Ray stays up: the dataset arrays are views of its store
        self.executor.close()
        self.executor = None
        old_tel.close()
        self.tel = self._telemetry(ckpt.latest.offsets)
        try:
            self.start = start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
            self.executor = self.start.executor(run_data(self.scenario, self.built, self.dyn))
        except Exception as err:
            raise RunError(f"runtime: cannot restart the {rt.executor} executor "
                           f"({type(err).__name__}: {err}) after {_loss_text(exc)}") from exc
        self.executor.cluster.take_over(owned)
        self.run = ckpt.latest.restore(self.executor, self.tel, self.progress)
        self.tel.continue_wall(old_tel.wall_s())  # wall_s keeps counting across the rollback
        self.ctx, self.protocol = self.run.ctx, self.run.protocol
        ckpt.recoveries += 1
        self.run.between_events = ckpt
        self.tel.record(Recovered(_loss_text(exc), lost_t, ckpt.recoveries, self.executor.workers))
        self._watch_cluster()

    # -- the cluster watch ---------------------------------------------------------------------
    def _watch_cluster(self) -> None:
        probe = self.executor.cluster.probe()
        if probe is not None:
            self._watch = ClusterWatch(probe, self._on_cluster_lost).start()
            if self._undertaker is None:  # writes the summary should Ray end this process first
                endpoints = getattr(probe, "args", ((),))[0]
                self._undertaker = undertaker.start(self.out, header(self.scenario, "failed"), ENDED_KEYS, endpoints)

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _lost_text(self, gone: str) -> str:
        t = f" at t={self.ctx.now:.6g}s" if self.ctx is not None else ""
        resume = (f"; resume it with: hierfl resume {self.out}" if self.ckpt is not None and self.ckpt.latest is not None
                  else " (no checkpoint to resume from)")
        return f"the run lost its Ray cluster{t}: {gone}{resume}"

    def _on_cluster_lost(self, gone: str) -> None:
        """The watch's thread: the evidence first (Ray may end the process any moment), then the line,
        then the main thread is interrupted to end the run; a process still alive later is ended."""
        with self._ending:
            if self._ended:
                return
            self.lost = gone
            err = ClusterLostError(self._lost_text(gone))
            try:
                write_summary(self.out, self._ended_summary("failed", err))
            except Exception:  # noqa: BLE001 - the main thread writes it again as it ends
                pass
            self.executor.cluster.silence()
            print(f"hierfl: run failed: {err}", file=sys.stderr, flush=True)
            self._announced = True
        if not self._interruptible:
            return
        timer = threading.Timer(LOST_GRACE_S, self._exit_if_running)
        timer.daemon = True
        timer.start()
        _thread.interrupt_main()

    def _exit_if_running(self) -> None:
        if not self._ended:  # the main thread is stuck in a call into the dead cluster
            os._exit(1)

    # -- endings -------------------------------------------------------------------------------
    def finish(self, final: np.ndarray) -> Any:
        """Completed: ``final_model.npy``, the last records, ``summary.json``; the checkpoint is removed."""
        from hierfl.driver.run import RunResult

        ctx, run, tel = self.ctx, self.run, self.tel
        if ctx.faults is not None:
            ctx.faults.finish(ctx.now)
        trace_offline(ctx)
        write_model(self.out, final)
        columns = {} if ctx.energy is None else dict(ctx.energy.columns())  # energy: per-device joules
        if hasattr(ctx.privacy, "columns"):  # privacy.dp_sgd: each device's ε and steps
            columns.update(ctx.privacy.columns())
        if columns:  # in devices.csv (the breakdowns go to the summary)
            tel.device_columns(columns)
        summary = self._completed_summary()
        tel.record(RunEnd(ctx.stop_reason))
        with self._ending:
            write_summary(self.out, summary)
            self._ended = True
        self.ckpt.remove()
        return RunResult(self.out, summary, final, run.evals)

    def _completed_summary(self) -> dict[str, Any]:
        ctx, tel, built = self.ctx, self.tel, self.built
        wall_s = tel.wall_s() if self.resume is not None else time.perf_counter() - self.wall0
        # start-up: everything before the first event, the checkpoint taken there included
        startup = startup_part(self.executor, self.start, self.run_start, wall_s, self.startup_s + self.ckpt.first_s)
        parts = Summary(COMPLETED_KEYS).add(header(self.scenario, "completed")).add(ctx.summary_part())
        parts.add(self.run.summary_part()).add(startup).add(self.executor.summary_part()).add(world_part(built))
        parts.add(tel.summary_part(ctx.now)).add({"warnings": list(self.dyn.warnings)} if self.dyn.warnings else None)
        parts.add(ctx.robust.summary_part() if ctx.robust is not None else None).add(self.ckpt.summary_part())
        parts.add(ctx.energy.summary_part(built.world.tier) if ctx.energy is not None else None)
        parts.add(ctx.aggregation.server_jobs.summary_part())
        parts.add(ctx.channels.summary_part() if ctx.channels is not None else None)
        parts.add(ctx.privacy.summary_part() if ctx.privacy is not None else None)
        return parts.as_dict()

    def fail(self, exc: BaseException) -> BaseException:
        """Any other ending: ``summary.json`` says how and where the run stopped; returns what to raise
        (``exc`` itself, a :class:`RunError` with the message of a host's :class:`OutOfDeviceMemory`, or a
        :class:`ClusterLostError` when the cluster was lost under the run)."""
        with self._ending:
            if isinstance(exc, OutOfDeviceMemory):  # its message, not Ray's wrapper with the host's traceback
                when = f"t={self.ctx.now:.6g}s: " if self.ctx is not None else ""
                exc = RunError(when + str(getattr(exc, "cause", exc)))
            if self.lost is not None and not isinstance(exc, ClusterLostError):
                exc = ClusterLostError(self._lost_text(self.lost))
            if isinstance(exc, ClusterLostError):
                exc.announced = self._announced
            self._ended = True
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else getattr(exc, "status", "failed")
            try:
                write_summary(self.out, self._ended_summary(status, exc))
            except OSError as werr:  # a full disk must not hide why the run stopped
                exc.add_note(f"and the summary could not be written: {werr}")
        return exc

    def _ended_summary(self, status: str, exc: BaseException) -> dict[str, Any]:
        parts = Summary(ENDED_KEYS).add(header(self.scenario, status))
        parts.add({"error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - self.wall0})
        ctx = self.ctx
        reason = ("diverged" if status == "diverged" else CLUSTER_LOST if self.lost is not None
                  else ctx.stop_reason if ctx is not None else None)
        if reason is not None:
            parts.add({"stop_reason": reason})
        if ctx is not None:
            parts.only(("virtual_time_s", "rounds", "totals"), ctx.summary_part())
        if self.run is not None:
            parts.add(self.run.ended_part())
        if self.ckpt is not None:
            parts.add(self.ckpt.resume_part())
        return parts.as_dict()

    def close(self) -> None:
        """Stop the watch, close the telemetry (the trace's held samples and closing bracket) and the
        executor (or the start it did not finish)."""
        self._stop_watch()
        if self.tel is not None:
            self.tel.close()
        undertaker.release(self._undertaker)  # the summary is written: it only checks and exits
        self._undertaker = None
        if self.lost is not None:
            return  # nothing of the cluster answers: shutting it down could wait forever
        (self.executor if self.executor is not None else self.start).close()


def _loss_text(exc: BaseException) -> str:
    """One line naming what was lost: the error's type and first line, and the actor class if Ray says."""
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    role = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.strip().startswith("class_name:")), None)
    return f"{type(exc).__name__}: {first[:200]}" + (f" ({role})" if role else "")
