"""Determinism: same scenario and seed give identical metrics and model with any executor or worker count."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hierfl.scenario.loader import load_scenario
from hierfl.driver import run_scenario
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[2]


def metrics_without_wall(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append({k: v for k, v in rec.items()
                    if not k.startswith("wall") and k not in ("startup_s", "executor", "workers")})
    return out


def hier_tiny(**kw):
    return tiny(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}},
                data={"dataset": {"num_samples": 360}, "partition": {"name": "dirichlet", "alpha": 0.5,
                                                                     "min_require_size": 5}},
                protocol={"name": "hierfavg", "kappa1": 4, "kappa2": 2, "fraction": 0.7},
                training={"epochs": None, "momentum": 0.5},
                topology={"edge_servers": 2, "grouping": "random"}, stop={"rounds": 3}, **kw)


def hisyn_tiny(policy="average", **kw):
    return tiny(devices={"count": 6, "speed_sps": {"dist": "lognormal", "median": 150, "sigma": 0.8}},
                data={"dataset": {"num_samples": 360}, "partition": {"name": "dirichlet", "alpha": 0.5,
                                                                     "min_require_size": 5}},
                protocol={"name": "fedhisyn", "k": 2, "arrival_policy": policy},
                training={"momentum": 0.5}, stop={"rounds": 2}, **kw)


def test_same_seed_twice_identical_and_other_seed_differs(tmp_path):
    a = run_scenario(hier_tiny(), tmp_path / "a")
    b = run_scenario(hier_tiny(), tmp_path / "b")
    assert metrics_without_wall(tmp_path / "a") == metrics_without_wall(tmp_path / "b")
    assert np.array_equal(a.final_params, b.final_params)
    c = run_scenario(hier_tiny(seed=4), tmp_path / "c")
    assert not np.array_equal(a.final_params, c.final_params)


def ahfl_tiny(**kw):
    sc = hier_tiny(**kw)
    from hierfl.methods.ahfl.protocol import AHFLConfig

    return sc.model_copy(update={"protocol": AHFLConfig(leader_period=0.4, cloud_period=1.1, max_staleness=3),
                                 "stop": tiny(stop={"rounds": 4}).stop})


def fedasync_tiny(**kw):
    return tiny(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}},
                data={"dataset": {"num_samples": 360}}, protocol={"name": "fedasync", "concurrency": 4},
                training={"epochs": 1}, stop={"rounds": 12}, **kw)


def fedbuff_tiny(**kw):
    sc = fedasync_tiny(**kw)
    return sc.model_copy(update={"protocol": tiny(protocol={"name": "fedbuff", "K": 3, "concurrency": 4}).protocol})


def fedch_tiny(**kw):
    return tiny(devices={"count": 6, "speed_sps": {"dist": "lognormal", "median": 150, "sigma": 0.8}},
                data={"dataset": {"num_samples": 360}, "partition": {"name": "dirichlet", "alpha": 0.5,
                                                                     "min_require_size": 5}},
                protocol={"name": "fedch", "K": 2, "H": 4, "lr": 0.1, "recluster": {"name": "periodic", "rho": 2}},
                events=[{"at_s": 1.0, "slowdown": {"select": {"ids": [0, 1]}, "factor": 4}}],
                training={"momentum": 0.5}, stop={"rounds": 9}, **kw)


def fedat_tiny(**kw):
    # two tiers of different speeds whose rounds interleave at the cloud
    return tiny(devices={"count": 6, "speed_sps": {"dist": "uniform", "low": 30, "high": 300}},
                data={"dataset": {"num_samples": 360}}, protocol={"name": "fedat", "tiers": 2, "fraction": 0.7},
                training={"epochs": 1}, stop={"rounds": 6}, **kw)


@pytest.mark.ray
@pytest.mark.parametrize("make", [lambda **kw: tiny(protocol={"fraction": 0.5}, stop={"rounds": 4}, **kw), hier_tiny,
                                  hisyn_tiny, lambda **kw: hisyn_tiny("latest", **kw),
                                  ahfl_tiny, fedasync_tiny, fedbuff_tiny, fedch_tiny, fedat_tiny],
                         ids=["fedavg", "hierfavg", "fedhisyn-average", "fedhisyn-latest", "ahfl", "fedasync", "fedbuff",
                              "fedch", "fedat"])
def test_local_vs_ray_one_and_two_hosts(tmp_path, ray_session, make):
    local = run_scenario(make(), tmp_path / "local")
    ref = metrics_without_wall(tmp_path / "local")
    for workers in (1, 2):
        sc = make(runtime={"executor": "ray", "workers": workers})
        res = run_scenario(sc, tmp_path / f"ray{workers}")
        assert res.summary["workers"] == workers
        assert metrics_without_wall(tmp_path / f"ray{workers}") == ref
        assert np.array_equal(res.final_params, local.final_params)


@pytest.mark.ray
@pytest.mark.slow
def test_quickstart_on_two_node_cluster_matches_local(tmp_path):
    """A real 2-node Ray cluster (separate raylets) via ``hierfl run --address``."""
    from ray.cluster_utils import Cluster

    quick = ROOT / "scenarios" / "quickstart.yaml"
    run_scenario(load_scenario(quick, ["runtime.executor=local"]), tmp_path / "local")
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        proc = subprocess.run(
            [sys.executable, "-m", "hierfl.cli", "run", str(quick), "--address", cluster.address,
             "--out", str(tmp_path / "cluster"), "-q"],
            capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        cluster.shutdown()
    summary = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["executor"] == "ray"
    assert metrics_without_wall(tmp_path / "cluster") == metrics_without_wall(tmp_path / "local")
    assert np.array_equal(np.load(tmp_path / "cluster" / "final_model.npy"),
                          np.load(tmp_path / "local" / "final_model.npy"))
