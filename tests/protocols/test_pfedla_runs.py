"""pFedLA's runs: the server's store survives a checkpoint and resume, a run repeats bit for bit, and
personalised evaluation reaches the metrics lines and the Python API's frames (scenarios/pfedla*.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hierfl.driver import resume_run, run_scenario
from hierfl.scenario.loader import load_scenario
from tests.driver.test_recovery import _stop_at, assert_same_run

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SHORT = ["runtime.executor=local", "stop.virtual_time_s=null", "stop.rounds=30", "evaluation.every_s=1"]


@pytest.mark.parametrize("stem, checkpoint", [("pfedla", "every_cloud_aggregations=5"),
                                              ("pfedla_edges", "every_cloud_aggregations=1")])
def test_resume_carries_the_store_and_the_hypernetworks(tmp_path: Path, stem: str, checkpoint: str) -> None:
    """Ctrl-C half-way, resume: the uninterrupted run's files, its state bytes and its final model."""
    path = SCENARIOS / f"{stem}.yaml"
    sets = SHORT + [f"runtime.checkpoint.{checkpoint}"] + (["stop.rounds=6"] if stem == "pfedla_edges" else [])
    ref = tmp_path / "ref"
    whole = run_scenario(load_scenario(path, sets), ref)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, sets), out, progress=_stop_at(15 if stem == "pfedla" else 3))
    interrupted = json.loads((out / "summary.json").read_text())
    assert interrupted["status"] == "interrupted" and interrupted["checkpoint_t"] > 0
    resumed = resume_run(out)
    assert resumed.summary["status"] == "completed"
    assert_same_run(ref, out)
    assert np.array_equal(whole.final_params, resumed.final_params)
    assert resumed.summary["server_jobs"] == whole.summary["server_jobs"]


def test_store_bytes_per_role_and_personalised_evaluation(tmp_path: Path) -> None:
    """10 clients of an MLP 64-32-10 (P = 2410 floats) and their hypernetworks (an embedding of 100, three
    100-wide layers, 2 heads of 10 outputs: H = 32 420 floats): the cloud keeps N·(P + H) floats; the eval
    lines and the API's frames carry the devices' own accuracies; a second run gives the same bits."""
    from hierfl.api import run

    res = run(SCENARIOS / "pfedla.yaml", overrides=SHORT[1:], out=tmp_path / "a")
    p = 64 * 32 + 32 + 32 * 10 + 10
    h = 100 + 100 * 100 + 100 + 2 * (100 * 100 + 100) + 2 * (10 * 100 + 10)  # embedding, MLP, 2 heads
    assert res.summary["server_jobs"]["state_bytes"] == {"cloud": 4 * 10 * (p + h)}
    last = res.evals.iloc[-1]
    for key in ("device_accuracy_mean", "device_accuracy_worst10", "device_accuracy_std", "party_accuracy_min"):
        assert key in res.evals.columns, key
    assert 0.0 <= last["device_accuracy_worst10"] <= last["device_accuracy_mean"] <= 1.0
    assert last["device_accuracy_std"] >= 0.0
    # the same scenario and seed: the same bits
    again = run(SCENARIOS / "pfedla.yaml", overrides=SHORT[1:], out=tmp_path / "b")
    assert again.evals.drop(columns=["wall_s"]).equals(res.evals.drop(columns=["wall_s"]))
    a = np.load(tmp_path / "a" / "final_model.npy")
    assert np.array_equal(a, np.load(tmp_path / "b" / "final_model.npy"))
