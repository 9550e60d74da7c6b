"""PFNM and FedMA in real runs: resume after Ctrl-C, the server's state in the summary, refused settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hierfl.cli import main
from hierfl.driver import resume_run, run_scenario
from hierfl.scenario.loader import load_scenario
from tests.driver.test_recovery import _stop_at, assert_same_run

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["runtime.executor=local", "devices.count=6", "training.epochs=2", "runtime.checkpoint.every_cloud_aggregations=1"]


def test_fedma_resume_keeps_widths_and_server_state(tmp_path: Path) -> None:
    """FedMA in edges: the devices' models of growing width, the edges' assignments and the rounds in flight
    survive Ctrl-C after round 1; the resumed run is the uninterrupted one."""
    path = str(ROOT / "scenarios" / "fedma_edges.yaml")
    overrides = [*SHORT, "stop.rounds=3", "protocol.retrain_epochs=1"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, overrides), ref)
    summary = json.loads((ref / "summary.json").read_text())
    # the edges keep one int32 assignment per member and matched layer, the cloud one per edge
    assert summary["server_jobs"]["state_bytes"]["edge"] > 0
    assert summary["server_jobs"]["state_bytes"]["edge"] % 4 == 0
    assert summary["server_jobs"]["tasks"]["cloud"] == 3  # one matching of the 2 edges per round
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, overrides), out, progress=_stop_at(1))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_pfnm_one_round_widens_the_global_model(tmp_path: Path) -> None:
    """The one-shot matching of 6 devices with 16 active neurons each opens more than 16 global neurons."""
    path = str(ROOT / "scenarios" / "pfnm.yaml")
    run_scenario(load_scenario(path, SHORT), tmp_path / "r")
    trace = json.loads((tmp_path / "r" / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    match = [e for e in events if e.get("name") == "server_job:pfnm_match"]
    assert len(match) == 1
    width = match[0]["args"]["width0"]
    assert 16 < width <= 48
    # the span lasts the operations at the cloud CPU's 400 GFLOP/s (trace times in µs)
    assert match[0]["dur"] == pytest.approx(match[0]["args"]["ops"] / 400e9 * 1e6, rel=1e-9)


@pytest.mark.parametrize("override, key", [
    (["model=logreg"], "model.name"),
    (["protocol.local_width=[64]"], "protocol.local_width"),
    (["training.trainer=fedprox"], "training.trainer"),
])
def test_refused_settings_exit_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               override: list[str], key: str) -> None:
    args = ["run", str(ROOT / "scenarios" / "pfnm.yaml"), "--out", str(tmp_path / "x"), "-q"]
    for item in override:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


def test_fedma_two_hidden_layers_runs_one_sub_round_per_layer(tmp_path: Path) -> None:
    """A 2-hidden-layer MLP, flat: per round two layer matchings and one class average at the cloud, and
    every device trains 1 + 3 jobs (local training, then a retraining after each of the 3 uploads but the
    last); the widths grow past the devices' 8 + 8 but stay within the capacity."""
    path = str(ROOT / "scenarios" / "pfnm.yaml")
    overrides = [*SHORT, "model.hidden=[20, 12]", "protocol={name: fedma, local_width: [8, 8], retrain_epochs: 1}",
                 "stop.rounds=1"]
    run_scenario(load_scenario(path, overrides), tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["server_jobs"]["tasks"]["cloud"] == 1 + 2 + 1  # init, layers 0 and 1, the output layer
    assert summary["totals"]["train_jobs"] == 6 * 3  # local training, retraining after layer 0 and after layer 1
    trace = json.loads((tmp_path / "r" / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    widths = [e["args"]["width"] for e in events if e.get("name") == "server_job:fedma_layer"]
    assert len(widths) == 2 and 8 <= widths[0] <= 20 and 8 <= widths[1] <= 12
    assert summary["final_accuracy"] > 0.1  # better than chance on 10 classes


def test_pfnm_resume_cuts_sub_networks_from_the_checkpointed_assignments(tmp_path: Path) -> None:
    """PFNM in edges with later_rounds: submodel reads the servers' kept assignments in every later round:
    interrupted after round 1 and resumed, the run is the uninterrupted one (the state came back)."""
    path = str(ROOT / "scenarios" / "fedma_edges.yaml")
    overrides = [*SHORT, "stop.rounds=3", "protocol={name: pfnm, local_width: [16]}"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, overrides), ref)
    summary = json.loads((ref / "summary.json").read_text())
    assert summary["server_jobs"]["tasks"]["edge"] == 2 + 3 * 2 + 2 * 2  # inits, matchings, sub-network cuts
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, overrides), out, progress=_stop_at(1))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)
