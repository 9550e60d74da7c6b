"""Every way a run can end leaves the same evidence.

Completed, interrupted (SIGINT), diverged, failed (an exception in a protocol) and lost cluster
(the run's raylet killed): each leaves ``summary.json`` with its ``status`` and a reason
(``stop_reason`` or ``error``), a ``trace.json`` that ``json.loads`` parses, whole
``metrics.jsonl`` lines, and the documented exit status (0 completed, 130 interrupted, 1
otherwise; docs/howto/run-endings.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hierfl.cli import main
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def _scenario(tmp_path: Path, **sections: Any) -> str:
    raw = json.loads(json.dumps(TINY))
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return str(path)


def _evidence(out: Path, status: str) -> dict[str, Any]:
    """The files every ending leaves; the summary."""
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == status, summary
    assert summary.get("stop_reason") or summary.get("error"), summary
    if status != "completed":
        assert summary["error"], summary
    trace = json.loads((out / "trace.json").read_text(encoding="utf-8"))  # a whole array, bracket and all
    assert isinstance(trace, list) and trace
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    assert not (out / "summary.json.tmp").exists()
    return summary


def _wait_for_rounds(proc: subprocess.Popen, out: Path, rounds: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metrics = out / "metrics.jsonl"
        if metrics.exists() and metrics.read_text().count('"cloud_aggregate"') >= rounds:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"no {rounds} rounds within {timeout_s} s")


def test_completed(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", _scenario(tmp_path), "--out", str(out), "-q"]) == 0
    summary = _evidence(out, "completed")
    assert summary["stop_reason"] == "rounds" and "error" not in summary
    assert "done:" in capsys.readouterr().err
    assert not (out / "checkpoint.pkl").exists()


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_interrupted_by_sigint(tmp_path):
    scen = _scenario(tmp_path, stop={"rounds": 100000, "virtual_time_s": 1e7}, runtime={"workers": 1})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hierfl.cli", "run", scen, "--out", str(out), "-q"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_rounds(proc, out, 3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    summary = _evidence(out, "interrupted")
    assert summary["rounds"] >= 3 and summary["error"].startswith("KeyboardInterrupt")
    assert summary["resume"] == f"hierfl resume {out}"  # a checkpoint was left to resume from


def test_diverged(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--set", "training.lr=1e6", "--set", "runtime.executor=local", "--set", "stop.rounds=3"]
    assert main(["run", QUICKSTART, *args, "--out", str(out), "-q"]) == 1
    assert "run diverged" in capsys.readouterr().err
    summary = _evidence(out, "diverged")
    assert summary["stop_reason"] == "diverged" and "DivergedError" in summary["error"]


def test_failed_in_a_protocol_handler(tmp_path, capsys, monkeypatch):
    from hierfl.methods.fedavg.protocol import FedAvg

    calls = {"n": 0}
    real = FedAvg.on_upload_done

    def broken(self: Any, event: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 6:  # after the first round: there are metrics and trace events before it
            raise ValueError("a bug in a protocol")
        real(self, event)

    monkeypatch.setattr(FedAvg, "on_upload_done", broken)
    out = tmp_path / "out"
    assert main(["run", _scenario(tmp_path, stop={"rounds": 5}), "--out", str(out), "-q"]) == 1
    err = " ".join(capsys.readouterr().err.split())  # (the console wraps long lines)
    assert "run failed" in err and "a bug in a protocol" in err, err
    summary = _evidence(out, "failed")
    assert "ValueError: a bug in a protocol" in summary["error"] and summary["rounds"] >= 1


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of ``pid``'s child processes (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append((int(entry), cmd))
    return out


def _long_ray_run(out: Path) -> subprocess.Popen:
    """``hierfl run`` of the quickstart on its own Ray instance, with no end in sight."""
    return subprocess.Popen([sys.executable, "-m", "hierfl.cli", "run", QUICKSTART, "--set", "runtime.executor=ray",
                             "--set", "runtime.workers=2", "--set", "stop.virtual_time_s=100000",
                             "--set", "stop.rounds=null", "--out", str(out), "-q"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the run's raylet in /proc")
def test_lost_cluster_when_the_raylet_is_killed(tmp_path):
    out = tmp_path / "out"
    # the run's own Ray instance (no --address): its raylet is a child of the driver, and only that one is killed
    proc = _long_ray_run(out)
    try:
        _wait_for_rounds(proc, out, 3)
        raylets = [pid for pid, cmd in _children(proc.pid) if "raylet/raylet" in cmd]
        assert len(raylets) == 1, _children(proc.pid)
        t0 = time.monotonic()
        os.kill(raylets[0], signal.SIGKILL)
        stdout, err = proc.communicate(timeout=60)
        ended_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert ended_s < 30, ended_s
    lines = [line for line in err.splitlines() if line.startswith("hierfl:")]
    assert len(lines) == 1 and "lost its Ray cluster" in lines[0] and f"hierfl resume {out}" in lines[0], err
    assert "Raylet is terminated" not in stdout + err and "Traceback" not in err  # Ray's own notice is not relayed
    summary = _evidence(out, "failed")
    assert summary["stop_reason"] == "cluster_lost" and "ClusterLostError" in summary["error"]
    assert summary["resume"] == f"hierfl resume {out}" and (out / "checkpoint.pkl").exists()


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_run_still_leaves_its_summary(tmp_path):
    # SIGKILL: no handler of the run's own can write anything; its undertaker process does
    out = tmp_path / "out"
    proc = _long_ray_run(out)
    try:
        _wait_for_rounds(proc, out, 3)
        proc.kill()
        _, err = proc.communicate(timeout=60)  # (stderr closes when the undertaker, which shares it, is done)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    summary = _evidence(out, "failed")
    assert summary["stop_reason"] == "killed" and "without writing its summary" in summary["error"], summary
    assert summary["rounds"] >= 3 and summary["virtual_time_s"] > 0 and summary["contract_version"] == 1
    lines = [line for line in err.splitlines() if line.startswith("hierfl:")]
    assert len(lines) == 1 and "without writing its summary" in lines[0], err


def test_the_undertaker_leaves_a_final_summary_alone_and_names_a_lost_cluster(tmp_path):
    import io

    from hierfl.driver import undertaker

    spec = {"out": str(tmp_path), "header": {"contract_version": 1, "name": "x", "status": "failed"},
            "keys": ["contract_version", "name", "status", "error", "stop_reason"], "endpoints": []}
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed"}))
    assert not undertaker.bury(spec, io.StringIO(), None)
    assert json.loads((tmp_path / "summary.json").read_text()) == {"status": "completed"}
    (tmp_path / "summary.json").unlink()
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"t": 2.5, "event": "eval", "cloud_aggregations": 4,
                                                        "train_jobs": 9, "accuracy": 0.5}) + "\n{\"t\": 3")
    (tmp_path / "checkpoint.pkl").write_bytes(b"")
    err = io.StringIO()
    assert undertaker.bury(spec, err, "the Ray raylet at 127.0.0.1:1 is gone")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary)[:5] == ["contract_version", "name", "status", "error", "stop_reason"]
    assert summary["stop_reason"] == "cluster_lost" and summary["status"] == "failed"
    assert summary["virtual_time_s"] == 2.5 and summary["rounds"] == 4 and summary["totals"]["train_jobs"] == 9
    assert summary["resume"] == f"hierfl resume {tmp_path}"
    assert err.getvalue().startswith("hierfl: run failed: the run lost its Ray cluster at t=2.5s: the Ray raylet")
