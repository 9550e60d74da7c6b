"""FCCL's per-device teacher snapshots survive a checkpoint: Ctrl-C, resume, and the uninterrupted run's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hierfl.driver import resume_run, run_scenario
from hierfl.driver.checkpoint import load_checkpoint
from hierfl.scenario.loader import load_scenario
from tests.driver.test_recovery import _stop_at, assert_same_run

SCENARIO = str(Path(__file__).resolve().parents[2] / "scenarios" / "fccl.yaml")
OVERRIDES = ["stop.rounds=3", "runtime.executor=local", "runtime.checkpoint.every_cloud_aggregations=1",
             "protocol.pretrain_epochs=2", "protocol.local_epochs=1"]


def test_resume_keeps_the_teacher_snapshots(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    run_scenario(load_scenario(SCENARIO, OVERRIDES), ref)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(SCENARIO, OVERRIDES), out, progress=_stop_at(1))
    # the checkpoint holds every party's pre-trained model and its previous-round snapshot (device state)
    held = load_checkpoint(out).roles["hosts"]
    assert sorted(held) == [0, 1, 2, 3]
    assert all({"fccl_star", "fccl_prev"} <= set(held[d]) for d in held)
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)

