"""Start-up: the executor starts before the data exists, without changing results; bad addresses fail fast."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.driver import run_scenario
from hierfl.runtime.executor import RunData
from hierfl.runtime.start import ExecutorStart, process_launch_time, start_executor
from tests.conftest import TINY, tiny


def _dead_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_probe_fails_at_once_where_nothing_listens():
    from hierfl.runtime.ray_executor import probe_address

    port = _dead_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ConnectionError, match=rf"nothing answers at {address} .*ray start --head"):
            probe_address(address, timeout_s=2.0)
    with pytest.raises(ConnectionError, match="cannot read a port"):
        probe_address("somewhere")
    probe_address("local")  # a new private instance: nothing to probe


def test_probe_passes_where_something_listens():
    from hierfl.runtime.ray_executor import probe_address

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe_address(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=2.0)


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_cli_run_with_a_dead_address_fails_with_a_clear_error(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({**TINY, "runtime": {"executor": "ray"}}))
    address = f"127.0.0.1:{_dead_port()}"
    proc = subprocess.run([sys.executable, "-m", "hierfl.cli", "run", str(scen), "--out", str(tmp_path / "run"),
                           "-q", "--address", address], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert f"cannot start the ray executor at {address}" in proc.stderr and "nothing answers" in proc.stderr


def test_local_start_builds_the_local_executor():
    start = start_executor("local")
    assert type(start) is ExecutorStart and "runtime_start" in start.marks
    start.close()  # nothing held: a no-op
    with pytest.raises(ValueError, match="unknown executor 'gpu'; allowed: local, ray"):
        start_executor("gpu")


def test_process_launch_time_is_in_the_past():
    launch = process_launch_time()
    if sys.platform.startswith("linux"):
        assert launch is not None and launch <= time.time()


@pytest.mark.ray
def test_ray_run_matches_local_and_records_its_start_up_in_order(tmp_path, ray_session):
    sc = tiny(stop={"rounds": 2})
    local = run_scenario(sc, tmp_path / "local")
    built = build(sc)
    x_before = built.dataset.x_train.copy()
    start = start_executor("ray", 2)  # begun before the run, as the CLI does
    ray_run = run_scenario(sc.model_copy(update={"runtime": sc.runtime.model_copy(update={"executor": "ray",
                                                                                          "workers": 2})}),
                           tmp_path / "ray", built=built, start=start)
    np.testing.assert_array_equal(ray_run.final_params, local.final_params)
    assert [e["accuracy"] for e in ray_run.evals] == [e["accuracy"] for e in local.evals]
    marks = ray_run.summary["startup"]
    # the run's clock starts when the executor's start-up began (run_scenario's start=): run_start is
    # runtime_start, and Ray is ready after it (at once here: the session's instance is up already)
    assert marks["run_start"] == marks["runtime_start"], marks
    order = ["runtime_start", "ray_ready", "data_in_store", "hosts_set_up", "hosts_warm"]
    assert [marks[k] for k in order] == sorted(marks[k] for k in order), marks
    assert ray_run.summary["startup_s"] >= marks["hosts_warm"] - marks["run_start"] - 2e-3
    # the driver now reads the object store's copy: equal values, read-only, not a second copy
    assert not built.dataset.x_train.flags.writeable
    np.testing.assert_array_equal(built.dataset.x_train, x_before)


@pytest.mark.ray
def test_a_failed_actor_set_up_is_the_error_reported(ray_session):
    sc = tiny()
    built = build(sc)
    bad = RunData(built.dataset.x_train, built.dataset.y_train, built.parts, built.dataset.x_test,
                  built.dataset.y_test, built.init_params, (sc.model, (5,), 3, 0), 0, built.spec)  # 0 torch threads
    executor = start_executor("ray", 1).executor(bad)
    try:
        with pytest.raises(Exception, match="torch_threads must be >= 1"):
            executor.evaluate(executor.initial_model())
    finally:
        executor.close()


@pytest.mark.ray
def test_an_abandoned_start_kills_its_actors(ray_session, monkeypatch):
    import ray

    start = start_executor("ray", 2)
    assert ray.get([h.ready.remote() for h in start.hosts])  # the actors exist before any data does
    assert ray.get(start.cloud.ready.remote())  # the cloud role, in this process: the same calls
    killed: list = []
    monkeypatch.setattr(ray, "kill", killed.append)
    start.close()
    start.close()  # idempotent
    monkeypatch.undo()
    assert killed == start.hosts  # Ray itself is the session's: left running; the cloud is no actor
    for actor in killed:
        ray.kill(actor)


def test_startup_bench_reads_a_process_tree():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analysis" / "bench"))
    from startup import measure

    m = measure([sys.executable, "-c", "import time; x = b\"x\" * 50_000_000; time.sleep(0.5)"], interval_s=0.02)
    assert m.returncode == 0 and m.processes >= 1 and m.pss_mb > 40 and m.rss_mb >= m.pss_mb * 0.9


def test_building_a_model_imports_neither_sympy_nor_dynamo():
    """Each process that builds a model paid ~0.4 CPU s and 34 MB for sympy (``to_empty`` of meta tensors)."""
    import subprocess
    import sys

    code = ("import sys\nfrom hierfl.models import MODELS\n"
            "m = MODELS.get('mlp')(name='mlp', hidden=[8]).build((4,), 3, seed=1)\n"
            "assert sum(p.numel() for p in m.parameters()) == 4 * 8 + 8 + 8 * 3 + 3\n"
            "print(sorted(k for k in ('sympy', 'torch._dynamo') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ray_init_is_tried_again_when_the_daemons_miss_their_deadline(monkeypatch):
    """Reliability: once, on a busy machine, Ray's start failed; a second attempt is made, then the error is named."""
    import hierfl.runtime.ray_cluster as rx

    calls: list[dict] = []

    def flaky(**kw):
        calls.append(kw)
        if len(calls) == 1:
            raise TimeoutError("raylet did not start in time")

    monkeypatch.setattr(rx.ray, "init", flaky)
    monkeypatch.setattr(rx.ray, "shutdown", lambda: None)
    monkeypatch.setattr(rx, "_INIT_RETRY_PAUSE_S", 0.0)
    rx._init_with_retry(None)
    assert len(calls) == 2

    calls.clear()
    monkeypatch.setattr(rx.ray, "init", lambda **kw: (_ for _ in ()).throw(TimeoutError("still not")))
    with pytest.raises(RuntimeError, match="Ray did not start after 2 attempts: TimeoutError: still not"):
        rx._init_with_retry(None)

    def refused(**kw):
        calls.append(kw)
        raise ConnectionError("nothing there")

    monkeypatch.setattr(rx.ray, "init", refused)
    with pytest.raises(ConnectionError):
        rx._init_with_retry("127.0.0.1:1")
    assert len(calls) == 1  # an unreachable address is not retried
