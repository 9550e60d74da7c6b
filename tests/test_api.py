"""The Python API: hierfl.run / load_run give the run's summary and frames; the walkthrough example runs."""

from __future__ import annotations

import json
import os
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest

import hierfl
from hierfl.config.errors import ConfigError
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def test_run_returns_frames_equal_to_the_files(tmp_path):
    r = hierfl.run(TINY, overrides=["protocol.fraction=0.5"], seed=9, out=tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["event"] == "eval"]
    assert r.summary == json.loads((tmp_path / "run" / "summary.json").read_text())
    assert r.summary["seed"] == 9 and r.config["protocol"]["fraction"] == 0.5
    assert list(r.evals["accuracy"]) == [e["accuracy"] for e in evals]
    assert list(r.evals["t"]) == [e["t"] for e in evals] and len(r.events) == len(lines)
    assert r.evals["accuracy"].iloc[-1] == r.summary["final_accuracy"]
    assert list(r.devices["device"]) == [0, 1, 2, 3] and r.clusters is None  # flat: no clusters frame
    # without out=: the same numbers, nothing left behind
    r2 = hierfl.run(TINY, overrides=["protocol.fraction=0.5"], seed=9)
    assert r2.dir is None and r2.summary["final_accuracy"] == r.summary["final_accuracy"]
    assert np.array_equal(r2.evals["loss"].to_numpy(), r.evals["loss"].to_numpy())
    loaded = hierfl.load_run(tmp_path / "run")
    assert loaded.summary == r.summary and loaded.evals.equals(r.evals)


def test_clusters_frame_and_bad_input(tmp_path):
    r = hierfl.run(TINY, overrides=["topology.edge_servers=2", "protocol={name: hierfavg, kappa1: 2, kappa2: 1}"])
    assert sorted(r.clusters["device"]) == [0, 1, 2, 3] and set(r.clusters["cluster"]) == {0, 1}
    with pytest.raises(ConfigError, match="protocol.fraction"):
        hierfl.run(TINY, overrides=["protocol.fraction=3"])
    with pytest.raises(ValueError, match="file not found"):
        hierfl.load_run(tmp_path)


def test_the_walkthrough_example_runs(tmp_path, capsys):
    # the notebook-style example, run as a script from a copy of the repository layout it expects
    (tmp_path / "scenarios").mkdir()
    shutil.copy(ROOT / "scenarios" / "hierfavg.yaml", tmp_path / "scenarios")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        runpy.run_path(str(ROOT / "examples" / "api_walkthrough.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "RunResultFrames('hierfavg', status='completed'" in out and "first >= 0.5 at t =" in out
    assert (tmp_path / "runs" / "api_walkthrough" / "summary.json").is_file()
