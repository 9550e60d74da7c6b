"""Golden runs: every shipped scenario runs, matches its readable snapshot within the stated
tolerances, and gives the same bits on the local and the Ray executor (see tests/golden.py).

Each scenario runs once per executor in the suite. The local run is also the smoke test of the
shipped scenario; the Ray run is compared with that local run of the same session, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import (
    SCENARIOS,
    bit_differences,
    check_against_golden,
    contract_outputs,
    golden_path,
    report,
    run_one,
    skip_reason,
)

pytestmark = pytest.mark.golden

# scale scenarios run on the local executor only here (their Ray run would dominate the suite)
RAY_MAX_DEVICES = 2000
IDS = [p.stem for p in SCENARIOS]


@pytest.fixture(scope="session")
def local_runs(tmp_path_factory):  # noqa: ANN201
    """Output folders of this session's local golden runs, by scenario stem (run once each)."""
    root = tmp_path_factory.mktemp("golden_local")
    done: dict[str, Path] = {}

    def get(path: Path) -> Path:
        if path.stem not in done:
            out = root / path.stem
            summary = run_one(path, "local", out)
            _smoke(path, summary)
            done[path.stem] = out
        return done[path.stem]

    return get


def _smoke(path: Path, summary: dict) -> None:
    """What every shipped scenario's short run must give, whatever the machine."""
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(path, ["runtime.executor=local"])
    assert summary["status"] == "completed", summary
    assert 1 <= summary["rounds"] <= 2 or summary["stop_reason"] != "rounds", summary
    assert summary["stop_reason"] in ("rounds", "virtual_time", "jobs", "events"), summary
    if sc.training.trainer.timing_only:  # no model is evaluated (training.trainer: none)
        assert summary["final_accuracy"] is None
    else:
        assert 0.0 <= summary["final_accuracy"] <= 1.0


def _skip_if_unrunnable(path: Path) -> None:
    reason = skip_reason(path)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("path", SCENARIOS, ids=IDS)
def test_golden_local(path, local_runs):
    _skip_if_unrunnable(path)
    assert golden_path(path.stem).exists(), (
        f"no golden snapshot for {path.stem}: record it with python -m tests.golden --update {path.stem}"
    )
    diffs = check_against_golden(path.stem, local_runs(path))
    assert not any(d.fatal for d in diffs), report(path.stem, diffs)


@pytest.mark.ray
@pytest.mark.parametrize("path", SCENARIOS, ids=IDS)
def test_golden_ray_gives_the_local_bits(path, tmp_path, local_runs, ray_session):
    _skip_if_unrunnable(path)
    from hierfl.scenario.loader import load_scenario

    if load_scenario(path).devices.count > RAY_MAX_DEVICES:
        pytest.skip(f"more than {RAY_MAX_DEVICES} devices: golden on the local executor only")
    summary = run_one(path, "ray", tmp_path / "ray")
    assert summary["status"] == "completed", summary
    diffs = bit_differences(contract_outputs(local_runs(path)), contract_outputs(tmp_path / "ray"))
    assert not diffs, f"{path.stem}: the Ray run differs from the local run:\n" + "\n".join(diffs)


def test_every_snapshot_belongs_to_a_shipped_scenario():
    stems = {p.stem for p in SCENARIOS}
    stale = sorted(p.stem for p in golden_path("x").parent.glob("*.json") if p.stem not in stems)
    assert not stale, f"snapshots without a scenario (delete them): {stale}"
