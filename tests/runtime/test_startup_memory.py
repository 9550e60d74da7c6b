"""Start-up memory (scale, item 5): a Ray run's driver and cloud actor hold no torch, with identical results.

The driver imported torch only to make the initial model, and the cloud actor only to evaluate:
about 1.6 CPU s and 0.2 GB each. Now the build's model work runs in a host actor
(``ExecutorStart.model_call``) and the Ray executor evaluates on a host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.driver import run_scenario
from hierfl.learn.local import init_params
from hierfl.runtime.roles import Cloud
from tests.conftest import TINY, tiny

ROOT = Path(__file__).resolve().parents[2]

_DRIVER = """
import sys
from hierfl.cli import main
sys.argv = ["hierfl", "run", sys.argv[1], "--out", sys.argv[2], "-q", "--address", sys.argv[3]]
rc = main()
print("RC", rc)
print("HEAVY", sorted(m for m in ("torch", "scipy.optimize", "networkx") if m in sys.modules))
"""


@pytest.mark.ray
def test_a_ray_runs_driver_imports_no_torch_and_gives_the_local_bits(tmp_path, ray_address):
    raw = {**TINY, "stop": {"rounds": 2}, "runtime": {"executor": "ray", "workers": 2}}
    scen = tmp_path / "tiny.yaml"
    scen.write_text(yaml.safe_dump(raw))
    # attach to the session's instance: no second Ray instance to start
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(scen), str(tmp_path / "ray"), ray_address],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "RC 0" in proc.stdout, proc.stderr[-3000:]
    assert "HEAVY []" in proc.stdout, proc.stdout  # neither torch nor the lazily imported scipy/networkx
    local = run_scenario(tiny(stop={"rounds": 2}), tmp_path / "local")
    # the initial model made in a host actor, the evaluations made on a host: the same bits as in-process
    np.testing.assert_array_equal(np.load(tmp_path / "ray" / "final_model.npy"), local.final_params)
    evals = [line for line in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    ray_evals = [json.loads(line) for line in evals]
    assert [(e["accuracy"], e["loss"]) for e in ray_evals] == [(e["accuracy"], e["loss"]) for e in local.evals]
    assert len(ray_evals) == len(local.evals) >= 2


def test_model_call_runs_in_process_without_a_started_ray(monkeypatch):
    """A start that failed (or the local executor) makes the model here: the same array, errors as before."""
    from hierfl.runtime.ray_executor import RayStart
    from hierfl.runtime.start import ExecutorStart

    sc = tiny()
    want = init_params(sc.model, (5,), 3, 7)
    assert np.array_equal(ExecutorStart().model_call(init_params, sc.model, (5,), 3, 7), want)
    failed = RayStart.__new__(RayStart)  # as __init__ leaves it when ray.init failed
    failed._error, failed.hosts = ConnectionError("nothing answers"), []
    assert np.array_equal(failed.model_call(init_params, sc.model, (5,), 3, 7), want)
    # the build takes its model from the call it is given
    calls: list[str] = []

    def spy(fn, *args):  # noqa: ANN001, ANN202
        calls.append(fn.__name__)
        return fn(*args)

    assert np.array_equal(build(sc, model_call=spy).init_params, build(sc).init_params)
    assert calls == ["init_params"]


def test_the_cloud_role_makes_no_torch_model_until_it_evaluates():
    sc = tiny()
    built = build(sc)
    cloud = Cloud(built.init_params, built.dataset.x_test, built.dataset.y_test, (sc.model, (5,), 3, 1))
    cloud.add(1.0, built.init_params * 0.5)
    cloud.add(1.0, built.init_params * 1.5)
    np.testing.assert_allclose(cloud.commit(), built.init_params, rtol=1e-6)
    assert cloud.work._trainers == {}  # aggregation is numpy only
    acc, loss = cloud.evaluate(cloud.model)
    assert list(cloud.work._trainers) == [0] and 0.0 <= acc <= 1.0 and loss > 0
