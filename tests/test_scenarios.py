"""Every shipped scenario builds and runs (one cloud round, local executor)."""

from pathlib import Path

import pytest

from hierfl.scenario.loader import load_scenario
from hierfl.driver import run_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenario_runs(path, tmp_path):
    sc = load_scenario(path, ["runtime.executor=local", "stop.rounds=1", "evaluation.every_s=null"])
    root = getattr(sc.data.dataset, "root", None)
    if root is not None and not Path(root).exists():
        pytest.skip(f"dataset files not in {root} (tests/test_file_datasets.py runs it on generated files)")
    summary = run_scenario(sc, tmp_path).summary
    assert summary["status"] == "completed"
    assert summary["rounds"] == 1 and summary["stop_reason"] == "rounds"
    if sc.training.trainer.timing_only:  # no model is evaluated (training.trainer: none)
        assert summary["final_accuracy"] is None
    else:
        assert 0.0 <= summary["final_accuracy"] <= 1.0
