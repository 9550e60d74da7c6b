"""The undertaker: a small process that writes a run's summary if the run's own process cannot.

Ray's core worker may end a driver's process itself (``_Exit(1)``: no Python exception, no
``finally``, no ``atexit``) the next time it touches the object store of a raylet that died, and a
driver can be killed outright (SIGKILL, the out-of-memory killer). The run's cluster watch
(:mod:`hierfl.runtime.cluster_watch`) usually writes the evidence first, but it races with Ray.
This process does not: a Ray run starts it with a pipe from the driver; when the pipe closes (the
run ended, or its process died), it looks at ``summary.json``. A summary with a final status is
left alone. Otherwise it writes one with ``status: failed`` and ``stop_reason`` ``cluster_lost``
(when the run's raylet or GCS stopped accepting connections while the run's process was alive; it
probes them while it waits) or ``killed``, the virtual time and
totals of the last metrics line, the resume command where a checkpoint exists, and prints one
``hierfl:`` line on the run's standard error.

It runs as a script (``python undertaker.py``), importing only the standard library, so it starts
in a few milliseconds and never loads torch, numpy or Ray.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

FINAL = ("completed", "failed", "interrupted", "diverged")


def start(out: Path, header: dict[str, Any], keys: tuple[str, ...],
          endpoints: tuple[tuple[str, tuple[str, int]], ...]) -> subprocess.Popen[bytes] | None:
    """Start the undertaker of the run writing to ``out`` (None where it cannot be started: the run
    goes on without it). Close its ``stdin`` when the run has ended (:func:`release`)."""
    spec = json.dumps({"out": str(out), "header": header, "keys": list(keys), "raylet_pid": own_raylet(),
                       "driver_logs": _driver_logs(),
                       "endpoints": [[name, host, port] for name, (host, port) in endpoints]})
    try:
        # its own session: a Ctrl-C at the terminal reaches the run, which then writes its own summary
        return subprocess.Popen([sys.executable, "-S", __file__, spec], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _driver_logs() -> str | None:
    """The glob of this process's Ray core-worker log (where Ray writes why it ends the process)."""
    ray = sys.modules.get("ray")
    try:
        session = ray._private.worker.global_worker.node.get_session_dir_path()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - no Ray here, or not connected: nothing to read later
        return None
    return os.path.join(session, "logs", f"python-core-driver-*_{os.getpid()}.log")


def _ray_ended_it(pattern: str | None) -> bool:
    """Whether Ray's own log says it ended the run's process because its raylet's store was gone."""
    import glob

    for path in glob.glob(pattern) if pattern else []:
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(path) - 65536))
                if b"plasma store is failed. Terminate the process" in fh.read():
                    return True
        except OSError:
            continue
    return False


def own_raylet() -> int | None:
    """The pid of the raylet this process started (its own Ray instance), from Linux's /proc; None
    elsewhere or for a cluster joined by address."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
            if int(stat[stat.rindex(")") + 2:].split()[1]) != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if b"raylet/raylet" in fh.read():
                    return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return None


def release(proc: subprocess.Popen[bytes] | None) -> None:
    """The run has ended and written its summary: the undertaker checks it and exits."""
    if proc is None:
        return
    try:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _refused(endpoints: list[list[Any]]) -> str | None:
    for name, host, port in endpoints:
        try:
            socket.create_connection((host, int(port)), timeout=2.0).close()
        except ConnectionRefusedError:
            return f"the Ray {name} at {host}:{port} is gone"
        except OSError:
            continue
    return None


def _last_progress(out: Path) -> dict[str, Any]:
    """How far the run got by its whole metrics lines: the virtual time of the last one, the cloud
    rounds of the last cloud aggregation, and the totals of the last line that carries them."""
    try:
        lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    progress: dict[str, Any] = {}
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a line cut by the end of the process
        if "virtual_time_s" not in progress and isinstance(rec.get("t"), (int, float)):
            progress["virtual_time_s"] = rec["t"]
        if "rounds" not in progress and rec.get("event") == "cloud_aggregate":
            progress["rounds"] = rec.get("round")
        if "totals" not in progress and "cloud_aggregations" in rec:  # an evaluation line carries the counters
            progress["totals"] = {k: v for k, v in rec.items() if isinstance(v, (int, float))
                                  and k not in ("t", "wall_s", "round", "accuracy", "loss")}
            progress.setdefault("rounds", rec.get("cloud_aggregations"))
        if len(progress) == 3:
            break
    return {k: progress[k] for k in ("virtual_time_s", "rounds", "totals") if k in progress}


def bury(spec: dict[str, Any], err: TextIO, gone: str | None) -> bool:
    """Write the summary of a run that ended without one (see the module docstring); whether it did.
    ``gone``: what of its cluster stopped answering while the run's process was alive."""
    out = Path(spec["out"])
    path = out / "summary.json"
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("status") in FINAL:
            return False
    except (OSError, ValueError):
        pass
    progress = _last_progress(out)
    t = progress.get("virtual_time_s")
    at = f" at t={t:.6g}s" if isinstance(t, (int, float)) else ""
    resume = f"hierfl resume {out}" if (out / "checkpoint.pkl").exists() else None
    if gone is not None:
        reason, error = "cluster_lost", f"ClusterLostError: the run lost its Ray cluster{at}: {gone}"
    else:
        reason, error = "killed", f"the run's process ended{at} without writing its summary (killed)"
    summary = {**spec["header"], "status": "failed", "error": error, "stop_reason": reason, **progress}
    if resume is not None:
        summary["resume"] = resume
    order = spec["keys"]
    ordered = {k: summary[k] for k in order if k in summary}
    ordered.update({k: v for k, v in summary.items() if k not in ordered})
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(ordered, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        return False
    tail = f"; resume it with: {resume}" if resume else " (no checkpoint to resume from)"
    print(f"hierfl: run failed: {error.split(': ', 1)[1] if gone else error}{tail}", file=err, flush=True)
    return True


def _pidfd(pid: Any) -> int | None:
    """A descriptor that becomes readable when process ``pid`` exits (Linux), or None."""
    if not isinstance(pid, int) or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def wait(spec: dict[str, Any], every_s: float = 0.2, settle_s: float = 1.0) -> str | None:
    """Until the run's end of the pipe closes (nothing is ever sent on it), watch the cluster; what
    of it was lost while the run's process was alive, or None (the process was killed).

    Ray's processes share their driver's fate, so when the run's process is killed its raylet ends
    too, within a few milliseconds of it. A cluster therefore counts as lost when Ray's own log says
    it ended the run's process for it, or when it was seen gone (the run's raylet through a process
    descriptor, which wakes this process the instant it exits; the raylet and GCS addresses by a
    probe every ``every_s`` s) at least ``settle_s`` before the run's process ended."""
    stdin = sys.stdin.buffer
    watched = [stdin]
    raylet = _pidfd(spec.get("raylet_pid"))
    if raylet is not None:
        watched.append(raylet)
    gone: str | None = None
    gone_at = 0.0
    while True:
        try:
            ready, _, _ = select.select(watched, [], [], every_s)
        except (OSError, KeyboardInterrupt):
            ready = [stdin]
        closed = False
        if stdin in ready:
            try:
                closed = not os.read(stdin.fileno(), 4096)
            except OSError:
                closed = True
        if closed:
            if _ray_ended_it(spec.get("driver_logs")):
                return gone or "the Ray raylet of this node is gone"
            return gone if gone is not None and time.monotonic() - gone_at >= settle_s else None
        if raylet is not None and raylet in ready:
            gone, gone_at = f"the Ray raylet (process {spec['raylet_pid']}) is gone", time.monotonic()
            watched.remove(raylet)
            raylet = None
        if gone is None and spec["endpoints"]:
            gone = _refused(spec["endpoints"])
            gone_at = time.monotonic()


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    bury(spec, sys.stderr, wait(spec))
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run handles Ctrl-C; this process outlives it
    os.environ.pop("PYTHONSTARTUP", None)
    sys.exit(main(sys.argv[1:]))
