"""Joining a token-protected Ray head by its address, against a real ``ray start --head`` this module starts.

The head is started as a new user would: a token in ``~/.ray/auth_token`` (here a private HOME),
``RAY_AUTH_MODE`` unset, so Ray turns token authentication on by itself. The runs play another
node: another HOME, with no token of its own, and the head named by ``HOST:PORT``. The head is
stopped by its process group whatever happens (the fixture's ``finally``).
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    return {**env, "HOME": str(home)}


@pytest.fixture(scope="module")
def head():
    # a short temp dir: Ray's socket paths under it must stay within the OS's 107 characters
    root = Path(tempfile.mkdtemp(prefix="hierfl-auth-", dir="/tmp"))
    token = secrets.token_hex(32)
    head_home = root / "head-home"
    (head_home / ".ray").mkdir(parents=True)
    (head_home / ".ray" / "auth_token").write_text(token)
    port = _port()
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", f"--temp-dir={root / 'ray'}", "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=_clean_env(head_home))
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "Ray runtime started" in line:
                started.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not started.wait(120):
            pytest.fail("the Ray head did not start:\n" + "".join(lines[-30:]))
        assert any("Token authentication is enabled" in line for line in lines), "".join(lines)
        yield {"address": f"127.0.0.1:{port}", "token": token, "root": root}
    finally:
        _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the head: its whole process group (every Ray process it started, and only those).
    ``ray start --block`` stops its processes on SIGTERM, but can take half a minute at it: after
    a few seconds the group is killed."""
    for sig, grace in ((signal.SIGTERM, 8), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its children may linger a moment
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        break


def _run(head: dict, tmp_path: Path, name: str, token_file: bool = False,
         **env_extra: str) -> tuple[subprocess.CompletedProcess, float, Path]:
    """``hierfl run --address HOST:PORT`` from "another node": a HOME without a token (or with the
    head's in ``~/.ray/auth_token``: ``token_file``), plus ``env_extra``."""
    base = copy.deepcopy(TINY)
    base["runtime"] = {"executor": "ray", "workers": 1}
    scen = tmp_path / f"{name}.yaml"
    scen.write_text(yaml.safe_dump(base))
    home = tmp_path / f"{name}-home"
    home.mkdir()
    env = {**_clean_env(home), **env_extra}
    if token_file:
        (home / ".ray").mkdir()
        (home / ".ray" / "auth_token").write_text(head["token"])
    out = tmp_path / name
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hierfl.cli", "run", str(scen), "--address", head["address"],
                           "--out", str(out), "-q"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    return proc, time.perf_counter() - t0, out


def _completed(proc: subprocess.CompletedProcess, out: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["executor"] == "ray" and summary["rounds"] == 3, summary


# "fast": the whole CLI process (a Python start importing hierfl, on cores the other test workers share) ends
# within this many seconds; without the check Ray retries a refused connection for minutes
FAIL_FAST_S = 20.0


def test_without_the_token_a_run_fails_fast_naming_the_token_and_the_variable(head, tmp_path):
    proc, wall, _ = _run(head, tmp_path, "none")
    err = proc.stderr
    assert proc.returncode == 1, err
    assert wall < FAIL_FAST_S, f"took {wall:.1f}s: {err}"
    flat = " ".join(err.split())  # the console wraps long lines
    assert f"cannot start the ray executor at {head['address']}" in flat, err
    assert "requires an authentication token" in flat and "sent none" in flat, err
    assert "~/.ray/auth_token" in flat and "RAY_AUTH_MODE=token" in flat and "RAY_AUTH_TOKEN" in flat, err
    assert "ray get-auth-token" in flat, err
    assert "Unauthenticated" not in err and "Traceback" not in err, err  # none of Ray's retry lines


def test_a_wrong_token_fails_fast_saying_it_was_refused(head, tmp_path):
    proc, wall, _ = _run(head, tmp_path, "wrong", RAY_AUTH_TOKEN="0" * 64)
    flat = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and wall < FAIL_FAST_S, (wall, proc.stderr)
    assert "refused the authentication token from the RAY_AUTH_TOKEN variable" in flat, proc.stderr


def test_with_the_token_in_the_variable_a_run_joins_by_address_and_completes(head, tmp_path):
    # RAY_AUTH_TOKEN alone: Ray would not send it to an explicit address; hierfl turns token mode on
    proc, wall, out = _run(head, tmp_path, "variable", RAY_AUTH_TOKEN=head["token"])
    _completed(proc, out)


def test_with_the_token_file_and_token_mode_a_run_joins_by_address_and_completes(head, tmp_path):
    # the documented way for a node: the head's token in ~/.ray/auth_token, and RAY_AUTH_MODE=token
    proc, wall, out = _run(head, tmp_path, "file", token_file=True, RAY_AUTH_MODE="token")
    _completed(proc, out)


def test_without_the_token_a_sweep_fails_fast_too(head, tmp_path):
    base = copy.deepcopy(TINY)
    base["runtime"] = {"executor": "local"}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(base))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "auth", "scenario": "tiny.yaml", "seeds": [1]}))
    home = tmp_path / "sweep-home"
    home.mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hierfl.cli", "sweep", str(sweep), "--address", head["address"],
                           "--out", str(tmp_path / "sw"), "-q"], capture_output=True, text=True,
                          env=_clean_env(home), cwd=REPO, timeout=300)
    wall = time.perf_counter() - t0
    flat = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and wall < FAIL_FAST_S, (wall, proc.stderr)
    assert "sweep failed: cannot join the Ray cluster" in flat and "RAY_AUTH_MODE=token" in flat, proc.stderr
    assert "Unauthenticated" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
