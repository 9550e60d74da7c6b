"""Checkpoints of a running emulation: what ``hierfl resume`` continues from, and what the driver
rolls back to when a Ray actor or node is lost.

A checkpoint is taken between two events (where the driver's state is consistent) and holds:

* the driver's state — the :class:`~hierfl.driver.loop.RunLoop` with its
  :class:`~hierfl.driver.context.Context` (event queue, virtual clock, network and dynamics
  state, job counters that seed every job's RNG stream), the protocol object (its models, queues,
  versions, random generators) and the telemetry's counters, staleness and queue series — pickled
  whole. The executor, the telemetry's open files and the progress callback are not pickled
  but named (``persistent_id``) and re-attached on load; executor handles (Ray object refs,
  job slots) are stored by value and put back into the new executor's object store;
* the roles' state — device-held state (a job method's per-device vectors), each leader's and the cloud's model,
  running aggregation and optimizer moments — from :meth:`ExecutorState.export_roles` (``executor.state``);
* the plug-ins the run was made with (:class:`~hierfl.config.plugins.PluginRef`: module name, file
  path, content hash), in a small header pickled before the rest: a resume loads them before it
  unpickles anything that may be a plug-in's class, and refuses (naming the plug-in) when one is
  missing or has changed;
* the byte sizes of ``metrics.jsonl``, ``clusters.jsonl`` and ``trace.json`` (flushed and
  fsync'ed first) and the content of ``devices.csv``: a resumed run cuts the files back to those
  sizes and appends, so its files are the uninterrupted run's (wall-clock fields aside).

Taking a checkpoint never changes a result: it only waits for values the run computes anyway.
Jobs of an open fast-path group are kept untrained (sealing the group early would change bits)
and re-form the same group on resume. The
file is written atomically (``checkpoint.pkl.tmp``, fsync, ``os.replace``, fsync of the folder),
so a SIGKILL or a power cut leaves the previous checkpoint or the new one, never a torn one.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hierfl.driver.context import RunError
from hierfl.runtime.executor import ExecutorState

__all__ = ["CHECKPOINT_FILE", "KILL_AFTER_ENV", "Checkpoint", "Checkpointer", "load_checkpoint"]

CHECKPOINT_FILE = "checkpoint.pkl"
# the pickled state names classes by module: a format written before a move of the classes it holds (2: the
# protocols moved into their methods' packages) is refused by its number, not by a failed import
FORMAT = 2
KILL_AFTER_ENV = "HIERFL_TEST_KILL_AFTER_CHECKPOINT"
"""Test hook: the driver SIGKILLs itself right after writing its k-th checkpoint (k = the value)."""


class _StatePickler(pickle.Pickler):
    """Pickles the driver's state; the executor, the telemetry, the progress callback and every
    executor handle are written by name or by value (``persistent_id``)."""

    def __init__(self, fh: io.BytesIO, executor: Any, telemetry: Any, progress: Any, hook: Any = None) -> None:
        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self._named = {id(executor): "executor", id(telemetry): "telemetry"}
        if progress is not None:
            self._named[id(progress)] = "progress"
        if hook is not None:  # the checkpointer itself (it holds the previous checkpoint): re-attached
            self._named[id(hook)] = "hook"
        self._state = executor.state
        # an executor without handles (the base class's is_handle: always False) is not asked about
        # each of the ~100 objects per device a checkpoint pickles
        self._has_handles = type(self._state).is_handle is not ExecutorState.is_handle
        self._handles: dict[int, int] = {}  # id(handle) -> index: one handle, one value, one identity
        self._keep: list[Any] = []  # keeps ids valid while pickling

    def persistent_id(self, obj: Any) -> Any:
        name = self._named.get(id(obj))
        if name is not None:
            return name
        if self._has_handles and self._state.is_handle(obj):
            index = self._handles.get(id(obj))
            if index is not None:
                return ("handle", index, None)
            index = self._handles[id(obj)] = len(self._handles)
            self._keep.append(obj)
            return ("handle", index, self._state.export_handle(obj))
        return None


class _StateUnpickler(pickle.Unpickler):
    """The reverse of :class:`_StatePickler`, re-attaching the new run's executor and telemetry."""

    def __init__(self, fh: io.BytesIO, executor: Any, telemetry: Any, progress: Any) -> None:
        super().__init__(fh)
        self._named = {"executor": executor, "telemetry": telemetry, "progress": progress, "hook": None}
        self._state = executor.state
        self._handles: dict[int, Any] = {}

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, str):
            return self._named[pid]
        _, index, value = pid
        if index not in self._handles:
            self._handles[index] = self._state.import_handle(value)
        return self._handles[index]


@dataclass
class Checkpoint:
    """One checkpoint, as written to ``checkpoint.pkl``."""

    scenario: Any            # the resolved Scenario (with package versions)
    source: str | None       # the scenario file it came from (for error messages)
    t: float                 # virtual time
    rounds: int              # cloud aggregations so far
    count: int               # checkpoints taken so far in this run (this one included)
    roles: dict[str, Any]    # executor.state.export_roles()
    state: bytes             # the pickled driver state (_StatePickler)
    offsets: dict[str, int]  # output stream sizes
    devices_csv: bytes       # devices.csv as it was
    startup_s: float
    recoveries: int
    format: int = FORMAT

    def restore(self, executor: Any, telemetry: Any, progress: Any) -> Any:
        """The checkpoint's :class:`RunLoop`, on ``executor`` (fresh roles) and ``telemetry``
        (opened at :attr:`offsets`); the roles get their state first."""
        executor.state.import_roles(self.roles)
        run, tel_state, executor_state = _StateUnpickler(io.BytesIO(self.state), executor, telemetry,
                                                         progress).load()
        executor.state.set_driver_state(executor_state)
        telemetry.set_state(tel_state)
        ctx = run.ctx
        ctx.counters = telemetry.counters  # one dict, as in a fresh run (pickle kept the identity)
        telemetry.clock = lambda: ctx.queue.now
        (telemetry.out_dir / "devices.csv").write_bytes(self.devices_csv)
        return run


def load_checkpoint(run_dir: Path) -> Checkpoint:
    """Read ``RUN_DIR/checkpoint.pkl``; a :class:`RunError` says why it cannot be resumed."""
    path = Path(run_dir) / CHECKPOINT_FILE
    if not path.is_file():
        summary = Path(run_dir) / "summary.json"
        status = ""
        if summary.is_file():
            import json

            try:
                status = str(json.loads(summary.read_text(encoding="utf-8")).get("status", ""))
            except (OSError, ValueError):
                status = ""
        if status == "completed":
            raise RunError(f"{run_dir}: the run has completed; there is nothing to resume")
        raise RunError(f"{run_dir}: no {CHECKPOINT_FILE} (not a run directory, or the run had "
                       f"runtime.checkpoint.enabled: false)")
    try:
        with open(path, "rb") as fh:
            ckpt = pickle.load(fh)
            if isinstance(ckpt, dict) and ckpt.get("hierfl_checkpoint") == FORMAT:
                _require_plugins(ckpt.get("plugins", []), path)  # before the rest, which may hold their classes
                ckpt = pickle.load(fh)
    except RunError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable file is reported the same way
        raise RunError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(ckpt, Checkpoint) or ckpt.format != FORMAT:
        raise RunError(f"{path}: not a checkpoint of this hierfl version")
    return ckpt


def _require_plugins(recorded: list[dict[str, Any]], path: Path) -> None:
    """Load the plug-ins a checkpoint needs; a :class:`RunError` names each one missing or changed."""
    from hierfl.config.plugins import PluginRef, require

    problems = require([PluginRef.from_dict(r) for r in recorded], f"{path}")
    if problems:
        raise RunError("; ".join(problems))


def _header(scenario: Any) -> dict[str, Any]:
    """The checkpoint's header: the plug-ins the run needs (its scenario's and the installed entry points)."""
    from hierfl.config.plugins import refs_for

    refs = refs_for(list(getattr(scenario, "plugins", []) or []))
    return {"hierfl_checkpoint": FORMAT, "plugins": [r.without_source().as_dict() for r in refs]}


class Checkpointer:
    """Takes the run's checkpoints when due (the loop's ``between_events`` hook) and keeps the latest."""

    def __init__(self, config: Any, out_dir: Path, scenario: Any, source: str | None, startup_s: float,
                 latest: Checkpoint | None = None) -> None:
        self.config = config
        self.out_dir = Path(out_dir)
        self.scenario = scenario
        self.source = source
        self.startup_s = startup_s
        self.latest = latest
        self.count = latest.count if latest is not None else 0
        self.recoveries = latest.recoveries if latest is not None else 0
        self._last_wall = time.perf_counter()
        self._last_rounds = latest.rounds if latest is not None else 0
        self.first_s = 0.0  # wall seconds of a fresh run's checkpoint before its first event (start-up)
        # the loop asks every ``stride`` events: every one when checkpoints go by rounds (taken right
        # at the round), else every 8th (the wall-clock test costs more than a fast event's share)
        self.stride = 1 if config.every_cloud_aggregations is not None else 8
        self._header: bytes | None = None

    def due(self, run: Any) -> bool:
        """Whether a checkpoint is due now (one before the first event; then by rounds or wall time)."""
        if not self.config.enabled:
            return False
        if self.latest is None:
            return True
        every_n = self.config.every_cloud_aggregations
        if every_n is not None and int(run.ctx.counters["cloud_aggregations"]) - self._last_rounds >= every_n:
            return True
        every_s = self.config.every_s
        return every_s is not None and time.perf_counter() - self._last_wall >= every_s

    def __call__(self, run: Any) -> None:
        """The loop's hook: take a checkpoint if one is due."""
        if self.due(run):
            first = self.latest is None
            t0 = time.perf_counter()
            self.take(run)
            if first:  # before the first event: paid before any job, so it counts as start-up
                self.first_s = time.perf_counter() - t0

    def take(self, run: Any) -> Checkpoint:
        """Checkpoint ``run`` now (between two events) and write it atomically."""
        ctx = run.ctx
        executor, tel = ctx.executor, ctx.telemetry
        roles = executor.state.export_roles()  # first: it checks every earlier call succeeded
        buf = io.BytesIO()
        pickler = _StatePickler(buf, executor, tel, run.progress, run.between_events)
        pickler.dump((run, tel.state(), executor.state.driver_state()))
        offsets = tel.sync()
        devices = tel.out_dir / "devices.csv"
        self.count += 1
        ckpt = Checkpoint(self.scenario, self.source, ctx.now, int(ctx.counters["cloud_aggregations"]), self.count,
                          roles, buf.getvalue(), offsets, devices.read_bytes() if devices.is_file() else b"",
                          self.startup_s, self.recoveries)
        if self._header is None:  # the plug-ins do not change during a run
            self._header = pickle.dumps(_header(self.scenario), protocol=pickle.HIGHEST_PROTOCOL)
        _write_atomic(self.out_dir / CHECKPOINT_FILE,
                      self._header + pickle.dumps(ckpt, protocol=pickle.HIGHEST_PROTOCOL))
        self.latest = ckpt
        self._last_wall = time.perf_counter()
        self._last_rounds = ckpt.rounds
        if os.environ.get(KILL_AFTER_ENV) == str(self.count):
            os.kill(os.getpid(), signal.SIGKILL)  # test hook: die as a killed driver would
        return ckpt

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part: how often the run recovered from a lost Ray actor or node (if ever)."""
        return {"recoveries": self.recoveries} if self.recoveries else {}

    def resume_part(self) -> dict[str, Any]:
        """``summary.json``'s part of a run that did not complete: how to resume it, and from when."""
        if self.latest is None:
            return {}
        return {"resume": f"hierfl resume {self.out_dir}", "checkpoint_t": self.latest.t}

    def remove(self) -> None:
        """The run completed: its checkpoint is no longer needed."""
        (self.out_dir / CHECKPOINT_FILE).unlink(missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, whatever happens (tmp, fsync, rename, fsync dir)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # some systems cannot open a folder: the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
