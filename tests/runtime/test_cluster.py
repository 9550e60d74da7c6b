"""Clusters the Ray way, against a local head this test starts (its own ports; stopped by its process group):
``ray job submit -- hierfl run``, ``hierfl sweep --address`` and ``hierfl run --address ray://``, each giving
the same bits as a local run."""

from __future__ import annotations

import copy
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY

BIN = Path(sys.executable).parent
# minutes on a loaded 2-core machine (a head, a job, a sweep, a client): opt in with HIERFL_CLUSTER_TESTS=1
pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("HIERFL_CLUSTER_TESTS") != "1",
                                 reason="starts a Ray head; set HIERFL_CLUSTER_TESTS=1 to run")]


@pytest.fixture(autouse=True, scope="module")
def _cluster_extras() -> None:
    """Ray's dashboard (``ray[default]``) and Tune, imported where the tests run, not at collection (every
    xdist worker collects this module; importing them there costs each about 2 CPU s)."""
    pytest.importorskip("ray.dashboard")
    pytest.importorskip("ray.tune")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    gcs, dash, client = _port(), _port(), _port()
    tmp = tmp_path_factory.mktemp("head")
    # Ray >= 2.5x enables token authentication on a new head; the test's processes share one token
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=2",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                             f"--ray-client-server-port={client}", f"--temp-dir={tmp}", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:  # the job server answers once the head is up
        r = subprocess.run([str(BIN / "ray"), "job", "list", "--address", f"http://127.0.0.1:{dash}"],
                           capture_output=True, env=env)
        if r.returncode == 0:
            break
        time.sleep(2)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("the local Ray head did not start")
    yield {"gcs": f"127.0.0.1:{gcs}", "dash": f"http://127.0.0.1:{dash}", "client": f"ray://127.0.0.1:{client}",
           "env": env}
    os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops what it started
    proc.wait(timeout=60)


def _scenario(tmp_path: Path) -> Path:
    base = copy.deepcopy(TINY)
    base["runtime"] = {"executor": "ray", "workers": 2}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def _model(run_dir: Path) -> bytes:
    return (run_dir / "final_model.npy").read_bytes()


def test_job_submit_sweep_and_ray_client_against_a_head(head, tmp_path):
    sc = _scenario(tmp_path)
    env = head["env"]
    local = subprocess.run([str(BIN / "hierfl"), "run", str(sc), "--executor", "local", "--out",
                            str(tmp_path / "local"), "-q"], capture_output=True, text=True, env=env)
    assert local.returncode == 0, local.stderr
    # 1. ray job submit: the entrypoint runs on the head with RAY_ADDRESS set, so the ray executor joins it
    job = subprocess.run([str(BIN / "ray"), "job", "submit", "--address", head["dash"], "--",
                          str(BIN / "hierfl"), "run", str(sc), "--out", str(tmp_path / "job"), "-q"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "succeeded" in job.stdout
    assert json.loads((tmp_path / "job" / "summary.json").read_text())["executor"] == "ray"
    assert _model(tmp_path / "job") == _model(tmp_path / "local")
    # 2. hierfl sweep --address: the trials are scheduled on the head's cluster
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "c", "scenario": "tiny.yaml", "seeds": [3],
                                                     "grid": {"protocol.fraction": [0.5, 1.0]}}))
    sw = subprocess.run([str(BIN / "hierfl"), "sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "sw"),
                         "--address", head["gcs"], "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert sw.returncode == 0, sw.stderr
    trial = tmp_path / "sw" / "runs" / "t001_protocol.fraction=1.0_seed=3"
    assert _model(trial) == _model(tmp_path / "local")  # fraction 1.0, seed 3: the scenario as is
    # 3. ray:// (Ray Client, the cluster extra): the same run again
    cl = subprocess.run([str(BIN / "hierfl"), "run", str(sc), "--address", head["client"], "--out",
                         str(tmp_path / "client"), "-q"], capture_output=True, text=True, env=env, timeout=300)
    assert cl.returncode == 0, cl.stderr
    assert _model(tmp_path / "client") == _model(tmp_path / "local")
