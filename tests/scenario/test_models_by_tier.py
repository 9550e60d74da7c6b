"""``models:``: a model per device tier, its FLOPs in the time model, and the weight-averaging refusal."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.scenario.loader import validate_raw
from tests.badinput import assert_refused
from tests.conftest import TINY

# blobs with 5 features and 3 classes: logreg F = 2·5·3 = 30 FLOPs, mlp [4] F = 2·(5·4 + 4·3) = 64
TIERED = {**copy.deepcopy(TINY), "devices": {"count": 4, "tiers": {"rpi4": 0.5, "phone_low": 0.5}}}


def _raw(**extra):
    return {**copy.deepcopy(TIERED), **extra}


def test_speed_follows_each_devices_own_model_flops():
    """speed = GFLOP/s·1e9 / (3·F): rpi4 (15 GFLOP/s) on mlp [4] (F = 64), phone_low (2 GFLOP/s) on logreg (F = 30)."""
    raw = _raw(models={"rpi4": {"name": "mlp", "hidden": [4]}}, protocol={"name": "fedavg"})
    # a weight-averaging protocol refuses the mlp (checked below); the world is built before that check
    from hierfl.assemble.hetero import device_models
    from hierfl.assemble.world import build_world
    from hierfl.learn.local import forward_flops

    scenario = validate_raw(raw)
    samples = np.full(4, 60, dtype=np.int64)
    world = build_world(scenario, samples,
                        lambda tiers: device_models(scenario, tiers).forward_flops(
                            lambda fn, *a: fn(*a), (5,), 3))
    assert forward_flops(scenario.models["rpi4"], (5,), 3) == 64
    for d in range(4):
        expected = 15e9 / (3 * 64) if world.tier[d] == "rpi4" else 2e9 / (3 * 30)
        assert world.speed_sps[d] == pytest.approx(expected, rel=1e-12)
    assert sorted(world.tier) == ["phone_low", "phone_low", "rpi4", "rpi4"]
    # 60 samples × 2 epochs on an rpi4 running the mlp: 120 / (15e9 / 192) s
    rpi = int(np.flatnonzero(world.tier == "rpi4")[0])
    assert 120 / world.speed_sps[rpi] == pytest.approx(120 * 192 / 15e9)


def test_without_models_every_device_runs_model():
    built = build(validate_raw(_raw()))
    assert built.models is not None and not built.models.heterogeneous
    assert built.models.of_device.tolist() == [0, 0, 0, 0]
    speeds = {str(t): s for t, s in zip(built.world.tier, built.world.speed_sps)}
    assert speeds == {"rpi4": pytest.approx(15e9 / 90), "phone_low": pytest.approx(2e9 / 90)}


def test_weight_averaging_refuses_a_different_layout_naming_the_tiers():
    with pytest.raises(ConfigError) as info:
        build(validate_raw(_raw(models={"rpi4": {"name": "mlp", "hidden": [4]}})))
    (problem,) = info.value.problems
    assert problem.path == "models.rpi4"
    text = problem.format()
    assert "fedavg averages weights" in text and "rpi4" in text and "phone_low" in text
    # mlp [4]: 5·4+4 + 4·3+3 = 39 parameters in 4 tensors; logreg: 5·3+3 = 18 in 2
    assert "39 parameters in 4 tensors" in text and "18 parameters in 2 tensors" in text


def test_the_same_layout_is_accepted_and_is_one_model():
    built = build(validate_raw(_raw(models={"rpi4": {"name": "logreg"}})))
    assert built.models is not None and not built.models.heterogeneous


def test_models_keys_must_be_tiers_of_the_devices(tmp_path, capsys):
    with pytest.raises(ConfigError) as info:
        validate_raw(_raw(models={"laptop": {"name": "logreg"}}))
    assert [p.path for p in info.value.problems] == ["models.laptop"]
    assert "allowed: rpi4, phone_low" in info.value.problems[0].format()
    with pytest.raises(ConfigError) as info:
        validate_raw({**copy.deepcopy(TINY), "models": {"rpi4": "logreg"}})
    assert [p.path for p in info.value.problems] == ["models"]


def test_cli_refuses_incompatible_layouts_with_exit_2(tmp_path, capsys):
    assert_refused(tmp_path, capsys, _raw(models={"rpi4": {"name": "mlp", "hidden": [4]}}), "models.rpi4")


def test_jobs_of_different_architectures_never_share_a_batched_group():
    """The driver stamps each job's spec with its device's model, and groups are keyed by spec."""
    import dataclasses

    from hierfl.core.work import TrainSpec
    from hierfl.learn.batched import JobGroups

    groups = JobGroups()
    spec = TrainSpec(epochs=1)
    g0, _ = groups.add("job a", spec, object())
    g0b, _ = groups.add("job b", spec, object())
    g1, closed = groups.add("job c", dataclasses.replace(spec, model=1), object())
    assert g0 == g0b and g1 != g0 and closed == ["job a", "job b"]


def test_a_heterogeneous_run_on_the_batched_path(tmp_path):
    """fedmd_digits with runtime.fast_path: logreg jobs train in groups, the MLP and CNN jobs and the
    public-data jobs alone; the run completes with the same schedule (virtual times) as without."""
    import json
    from pathlib import Path

    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    root = Path(__file__).resolve().parents[2]
    times = []
    for fast in (False, True):
        sc = load_scenario(root / "scenarios" / "fedmd_digits.yaml",
                           [f"runtime.fast_path={str(fast).lower()}", "stop.virtual_time_s=0.5"])
        out = tmp_path / str(fast)
        run_scenario(sc, out)
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        times.append([x["t"] for x in lines if x["event"] == "cloud_aggregate"])
        assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert times[0] == times[1] and len(times[0]) >= 5
