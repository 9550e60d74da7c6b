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
from pathlib import Path
from typing import Any, TextIO

FINAL = ("completed", "failed", "interrupted", "diverged")


def start(out: Path, header: dict[str, Any], keys: tuple[str, ...],
          endpoints: tuple[tuple[str, tuple[str, int]], ...]) -> subprocess.Popen[bytes] | None:
    """Start the undertaker of the run writing to ``out`` (None where it cannot be started: the run
    goes on without it). Close its ``stdin`` when the run has ended (:func:`release`)."""
    spec = json.dumps({"out": str(out), "header": header, "keys": list(keys),
                       "endpoints": [[name, host, port] for name, (host, port) in endpoints]})
    try:
        # its own session: a Ctrl-C at the terminal reaches the run, which then writes its own summary
        return subprocess.Popen([sys.executable, "-S", __file__, spec], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError:
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
    """Virtual time, cloud rounds and totals of the last whole metrics line that has them."""
    try:
        lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "cloud_aggregations" in rec:  # an evaluation line carries the counters
            totals = {k: v for k, v in rec.items() if k not in ("t", "wall_s", "event", "round", "accuracy", "loss")
                      and isinstance(v, (int, float))}
            return {"virtual_time_s": rec.get("t"), "rounds": rec.get("cloud_aggregations"), "totals": totals}
    return {}


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


def wait(spec: dict[str, Any], every_s: float = 0.2) -> str | None:
    """Until the run's end of the pipe closes (nothing is ever sent on it), probe the cluster every
    ``every_s`` s; what was gone while the run's process was still alive, or None. A cluster that
    goes away only after the process died went with it (Ray's processes share its fate): that
    process was killed, it did not lose its cluster."""
    stdin = sys.stdin.buffer
    gone: str | None = None
    while True:
        try:
            ready, _, _ = select.select([stdin], [], [], every_s)
            if ready and not os.read(stdin.fileno(), 4096):
                return gone
        except (OSError, KeyboardInterrupt):
            return gone
        if gone is None and spec["endpoints"]:
            gone = _refused(spec["endpoints"])


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    bury(spec, sys.stderr, wait(spec))
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run handles Ctrl-C; this process outlives it
    os.environ.pop("PYTHONSTARTUP", None)
    sys.exit(main(sys.argv[1:]))
