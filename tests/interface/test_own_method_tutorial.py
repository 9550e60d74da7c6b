"""The tutorial "Write your own method" (docs/tutorials/own-method.md), as a user follows it.

Its files (``examples/own_method/``) are copied to a folder outside the checkout; the plug-in
runs from the command line with ``--plugin`` on the local executor and on Ray with 2 workers,
with the same bits, and passes ``hierfl check``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hierfl.cli import main
from hierfl.plugin.testing import check_plugin, comparable_lines
from hierfl.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_method"


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "own_method"
    shutil.copytree(EXAMPLE, folder)
    assert ROOT not in folder.resolve().parents
    return folder


@pytest.mark.ray
def test_the_tutorial_plugin_runs_locally_and_on_ray_with_the_same_bits_and_passes_check(
        tmp_path, ray_session, monkeypatch, capsys):
    folder = _copy(tmp_path)
    monkeypatch.chdir(folder)
    assert main(["run", "scenario.yaml", "--plugin", "my_fedavg.py", "--out", "local", "-q"]) == 0
    assert main(["run", "scenario.yaml", "--plugin", "my_fedavg.py", "--executor", "ray", "--workers", "2",
                 "--out", "ray", "-q"]) == 0
    local, on_ray = folder / "local", folder / "ray"
    assert comparable_lines(local) == comparable_lines(on_ray)
    assert np.load(local / "final_model.npy").tobytes() == np.load(on_ray / "final_model.npy").tobytes()
    capsys.readouterr()

    report = check_plugin(folder / "my_fedavg.py")  # on the Ray instance already up
    assert report.passed, report.table()
    checks = {(r.method, r.check): r.status for r in report.results}
    for method in ("protocol my_fedavg", "straggler policy quorum"):
        for check in ("valid", "runs", "repeatable", "ray = local", "resume", "timing", "declarations"):
            assert checks[(method, check)] == "PASS", report.table()


def test_the_shipped_scenario_names_the_plugin_relative_to_itself():
    sc = load_scenario(ROOT / "scenarios" / "own_method.yaml")
    assert sc.plugins == [str(EXAMPLE / "my_fedavg.py")]
    assert (sc.protocol.name, sc.straggler.name, sc.runtime.executor) == ("my_fedavg", "quorum", "ray")


@pytest.mark.ray
def test_the_tutorial_trainer_keeps_device_state_with_the_same_bits_on_ray_and_passes_check(tmp_path, ray_session,
                                                                                              monkeypatch, capsys):
    """Part 5: the trainer plug-in's job method keeps each device's last update in its home host."""
    folder = _copy(tmp_path)
    monkeypatch.chdir(folder)
    args = ["scenario.yaml", "--plugin", "my_fedavg.py", "--plugin", "my_trainer.py", "--set", "training.trainer=carry"]
    assert main(["run", *args, "--out", "local", "-q"]) == 0
    assert main(["run", *args, "--executor", "ray", "--workers", "2", "--out", "ray", "-q"]) == 0
    assert main(["run", "scenario.yaml", "--plugin", "my_fedavg.py", "--out", "plain", "-q"]) == 0
    local, on_ray, plain = folder / "local", folder / "ray", folder / "plain"
    assert comparable_lines(local) == comparable_lines(on_ray)
    assert np.load(local / "final_model.npy").tobytes() == np.load(on_ray / "final_model.npy").tobytes()
    summary = json.loads((local / "summary.json").read_text())
    # every device that trained keeps one model-sized float32 vector (logreg on 10 features, 4 classes: 44)
    assert summary["device_state"]["bytes"] == 4 * 44 * summary["device_state"]["devices"] > 0
    assert json.loads((on_ray / "summary.json").read_text())["device_state"] == summary["device_state"]
    # the carried updates change the learning, not the emulated times
    assert np.load(local / "final_model.npy").tobytes() != np.load(plain / "final_model.npy").tobytes()
    times = [(ln["event"], ln["t"]) for ln in comparable_lines(local)]
    assert times == [(ln["event"], ln["t"]) for ln in comparable_lines(plain)]
    capsys.readouterr()

    report = check_plugin(folder / "my_trainer.py")
    assert report.passed, report.table()
    checks = {(r.method, r.check): r.status for r in report.results}
    for check in ("valid", "runs", "repeatable", "ray = local", "resume", "timing", "declarations"):
        assert checks[("trainer carry", check)] == "PASS", report.table()

