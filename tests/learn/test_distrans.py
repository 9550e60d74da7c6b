"""DisTrans (Yuan et al., ECCV 2022): a device's first offset, one job's model and offset steps by hand
(joint, alternating), the offset as per-device state (memory, reset, checkpoint and resume), evaluation
of each device through its own offset (metrics lines and the Python API's frames), the dual input's
cost in virtual time, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from hierfl.methods.distrans.job import offset_trainer
from hierfl.assemble import build
from hierfl.cli import main
from hierfl.methods.distrans.math import OffsetSpec, initial_offset, mean_initial_offset
from hierfl.core.work import TrainSpec
from hierfl.driver import resume_run, run_scenario
from hierfl.methods.distrans.trainer import OffsetTrainer
from hierfl.models import DualInputConfig
from hierfl.models.nets import DualInput
from hierfl.runtime.roles import DeviceHost
from hierfl.scenario.loader import validate_raw as tiny_raw
from tests.conftest import TINY, tiny

DUAL = {"name": "dual_input", "features": 4, "backbone": {"name": "mlp", "hidden": [6]}}
UNIFORM = {"name": "fedavg", "fraction": 1.0, "weighting": "uniform"}
DISTRANS = {"training": {"trainer": "distrans"}, "model": DUAL, "protocol": UNIFORM}


def test_initial_offset():
    """U[0, 1) per value from the generator seeded (seed, device), standardised: (u − 1/2)·√12."""
    t = initial_offset(5, 7, 2)
    u = np.random.default_rng([7, 2]).random(5)
    np.testing.assert_array_equal(t, ((u - 0.5) * math.sqrt(12)).astype(np.float32))
    assert t.dtype == np.float32 and np.all(np.abs(t) < math.sqrt(3))
    assert not np.array_equal(t, initial_offset(5, 7, 3))
    with pytest.raises(ValueError, match="mode"):
        OffsetSpec(mode="hypernet")


def _tiny_trainer() -> tuple[OffsetTrainer, np.ndarray]:
    """φ = Linear(2 → 1) with w = [1, −1], b = 0; head = identity, bias 0; a = 0.5 (9 parameters)."""
    module = DualInput(nn.Linear(2, 1), 1, 2, a=0.5)
    params = np.array([1, -1, 0, 1, 0, 0, 1, 0, 0], dtype=np.float32)
    return OffsetTrainer(module), params


X = np.array([[2.0, 1.0]], dtype=np.float32)
Y = np.array([0])
ONE = TrainSpec(epochs=1, batch_size=1, lr=0.1, method=OffsetSpec(lr_offset=0.1))


def test_joint_step_by_hand():
    """x = [2, 1], t = [0, 2], a = 0.5: x_L = [1, 1.5], x_R = [3, 0.5]; φ(x_L) = −0.5 (ReLU off),
    φ(x_R) = 2.5; logits [0, 2.5], y = 0, p₁ = σ(2.5) = 0.924142, g = [−p₁, p₁].
    ∂ℓ/∂φ(x_R) = p₁; ∂ℓ/∂t = p₁·w·(−a) = [−p₁/2, p₁/2]; ∂ℓ/∂w = p₁·x_R = [3p₁, 0.5p₁]; ∂ℓ/∂b = p₁;
    ∂ℓ/∂head.W = g ⊗ [0, 2.5]; ∂ℓ/∂head.b = g. One SGD step at lr 0.1 on both."""
    trainer, params = _tiny_trainer()
    p1 = 1 / (1 + math.exp(-2.5))
    new, offset, stats = trainer.train(params, np.array([0.0, 2.0], dtype=np.float32), X, Y, np.array([0]), ONE, 0)
    np.testing.assert_allclose(offset, [0.05 * p1, 2 - 0.05 * p1], rtol=1e-6)
    want = [1 - 0.3 * p1, -1 - 0.05 * p1, -0.1 * p1, 1, 0.25 * p1, 0, 1 - 0.25 * p1, 0.1 * p1, -0.1 * p1]
    np.testing.assert_allclose(new, want, rtol=1e-6, atol=1e-7)
    assert stats["steps"] == 1 and stats["samples"] == 1
    assert stats["loss"] == pytest.approx(math.log(1 + math.exp(2.5)), rel=1e-6)


def test_alternating_takes_the_offset_step_at_the_moved_model():
    """The model steps as in the joint job; the offset then steps by −0.1·∂ℓ/∂t at the moved model."""
    trainer, params = _tiny_trainer()
    alt = TrainSpec(epochs=1, batch_size=1, lr=0.1, method=OffsetSpec(lr_offset=0.1, update="alternating"))
    t0 = np.array([0.0, 2.0], dtype=np.float32)
    joint_model, _, _ = trainer.train(params, t0, X, Y, np.array([0]), ONE, 0)
    model, offset, _ = trainer.train(params, t0, X, Y, np.array([0]), alt, 0)
    np.testing.assert_array_equal(model, joint_model)
    oracle = DualInput(nn.Linear(2, 1), 1, 2, a=0.5)
    torch.nn.utils.vector_to_parameters(torch.from_numpy(model), oracle.parameters())
    t = torch.from_numpy(t0.copy()).requires_grad_(True)
    nn.functional.cross_entropy(oracle.pair(*oracle.views(torch.from_numpy(X), t)), torch.from_numpy(Y)).backward()
    np.testing.assert_allclose(offset, t0 - 0.1 * t.grad.numpy(), rtol=1e-6)
    assert OffsetSpec(update="alternating").passes == 2 and OffsetSpec().passes == 1


def _host(**over) -> tuple[DeviceHost, TrainSpec, np.ndarray]:
    b = build(tiny(**{**DISTRANS, **over}, data={"local_test_fraction": 0.25}))
    host = DeviceHost(b.dataset.x_train, b.dataset.y_train, b.parts, (b.scenario.model, (5,), 3, 1),
                      eval_sets=b.eval_sets)
    return host, b.spec, b.init_params


def test_the_offset_is_device_state_and_each_device_is_evaluated_through_its_own():
    """After a job the device holds its 5-value offset (20 bytes); evaluation of its own test rows goes
    through that offset (the zero offset gives other numbers); a reset forgets it."""
    host, spec, w = _host()
    assert spec.method is not None and spec.method.init_seed != 0
    new, _ = host.train(0, 1, spec, w)
    offset = host.export_state()[0]["offset"]
    assert offset.shape == (5,) and host.state_bytes() == (1, 20)
    assert not np.array_equal(offset, initial_offset(5, spec.method.init_seed, 0))
    device, _, test = host.eval_sets[0]
    assert device == 0
    row = host.evaluate_devices([0], new, method=spec.method)[0]
    acc, loss = offset_trainer(host.method_context(0, spec)).evaluate(new, offset, host.x[test], host.y[test])
    np.testing.assert_allclose(row, [round(acc * test.size), test.size, loss * test.size], rtol=1e-12)
    plain = host.evaluate_devices([0], new)[0]
    assert plain[2] != row[2]
    host.reset_devices([0])
    assert host.state_bytes() == (0, 0)


def test_the_dual_input_costs_two_backbone_passes_in_virtual_time(tmp_path):
    """With speeds from device tiers, a job's time is samples·3·F/f: the dual model's F counts the
    backbone twice (tests/learn/test_model_taps.py). With a given speed (100 samples/s, 120 samples a job)
    the job takes 1.2 s, and 2.4 s with alternating updates (a second pass per batch); the dual model has
    91 parameters (364 bytes): round 1 ends at 0.022912 + 1.2 + 0.025824."""
    def first_round(out):
        return next(r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                    if r["event"] == "cloud_aggregate")["t"]

    joint = run_scenario(tiny(**DISTRANS, stop={"rounds": 1}), tmp_path / "a")
    run_scenario(tiny(**{**DISTRANS, "training": {"trainer": {"name": "distrans", "offset_update": "alternating"}}},
                            stop={"rounds": 1}), tmp_path / "b")
    assert joint.summary["model_bytes"] == 364
    assert first_round(tmp_path / "a") == pytest.approx(0.022912 + 1.2 + 0.025824, abs=1e-12)
    assert first_round(tmp_path / "b") == pytest.approx(0.022912 + 2.4 + 0.025824, abs=1e-12)
    raw = json.loads(json.dumps(TINY))
    raw["devices"] = {"count": 4, "tiers": {"laptop": 1}}
    tiers = build(tiny_raw({**raw, **DISTRANS}))
    backbone = build(tiny_raw({**raw, "model": {"name": "mlp", "hidden": [6, 4]}}))
    # F(dual) = 2·(2·(30 + 24)) + 2·24 = 264 and F(mlp 5 → 6 → 4 → 3) = 2·(30 + 24 + 12) = 132
    np.testing.assert_allclose(tiers.world.speed_sps * 264, backbone.world.speed_sps * 132, rtol=1e-12)
    assert DualInputConfig(**{k: v for k, v in DUAL.items() if k != "name"}).features == 4


def test_eval_lines_and_frames_carry_the_personalised_spread(tmp_path):
    """Each device on its own test split through its own offset: mean, worst decile and spread next to
    the global model's accuracy, in metrics.jsonl and in the Python API's frames."""
    from hierfl.api import run

    res = run(json.loads(json.dumps({**TINY, **DISTRANS, "data": {**TINY["data"], "local_test_fraction": 0.25},
                                     "stop": {"rounds": 2}})), out=tmp_path / "a")
    for key in ("accuracy", "device_accuracy_mean", "device_accuracy_worst10", "device_accuracy_std"):
        assert key in res.evals.columns and res.evals[key].notna().all()
    assert (res.evals["device_eval_devices"] == 4).all()
    assert res.summary["device_state"] == {"devices": 4, "bytes": 4 * 20, "bytes_per_device": 20}


def _stop_at(round_: int):
    def progress(t: float, rounds: int, acc: float | None) -> None:
        if rounds >= round_:
            raise KeyboardInterrupt
    return progress


def test_resume_keeps_the_offsets(tmp_path):
    """Ctrl-C after round 2 and resume: the uninterrupted run's final model and device metrics, bit for bit
    (every device's offset is in the checkpoint)."""
    cfg = {**DISTRANS, "protocol": {**UNIFORM, "fraction": 0.5}, "stop": {"rounds": 4},
           "data": {"local_test_fraction": 0.25},
           "runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1}}}
    whole = run_scenario(tiny(**cfg), tmp_path / "whole")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(tiny(**cfg), out, progress=_stop_at(2))
    resumed = resume_run(out)
    assert resumed.summary["status"] == "completed" and resumed.summary["rounds"] == 4
    assert np.array_equal(whole.final_params, resumed.final_params)
    assert resumed.summary["device_state"] == whole.summary["device_state"]

    def last_eval(path):
        return [r for r in map(json.loads, (path / "metrics.jsonl").read_text().splitlines()) if r["event"] == "eval"][-1]

    assert last_eval(out)["device_accuracy_mean"] == last_eval(tmp_path / "whole")["device_accuracy_mean"]


# -- offset_mode: mean ---------------------------------------------------------------------------------

MEAN = {**DISTRANS, "training": {"trainer": {"name": "distrans", "offset_mode": "mean"}}}


def test_mean_initial_offset_by_hand():
    """The mean of the devices' first offsets, summed in device order."""
    want = (initial_offset(5, 9, 0).astype(np.float64) + initial_offset(5, 9, 1) + initial_offset(5, 9, 2)) / 3
    np.testing.assert_array_equal(mean_initial_offset(5, 9, 3), want.astype(np.float32))
    with pytest.raises(ValueError, match="one device"):
        mean_initial_offset(5, 9, 0)


def test_mean_mode_jobs_start_from_the_received_offset_and_return_theirs():
    """A job's start vector is [w; t̄]: it trains from t̄ (not the device's own offset) and returns
    [θ⁺; t⁺], t⁺ also kept as the device's state; its evaluation goes through the t̄ it is given."""
    host, spec, w = _host(training={"trainer": {"name": "distrans", "offset_mode": "mean"}})
    p = offset_trainer(host.method_context(0, spec)).num_params
    assert w.size == p + 5 and spec.method.shared
    np.testing.assert_array_equal(w[p:], mean_initial_offset(5, spec.method.init_seed, 4))
    out, _ = host.train(1, 3, spec, w)
    assert out.shape == (p + 5,) and host.result_width(spec) == p + 5
    model, offset, _ = offset_trainer(host.method_context(0, spec)).train(w[:p], w[p:], host.x, host.y, host.parts[1], spec, 3)
    np.testing.assert_array_equal(out[:p], model)
    np.testing.assert_array_equal(out[p:], offset)
    np.testing.assert_array_equal(host.export_state()[1]["offset"], offset)
    _, _, test = host.eval_sets[1]
    row = host.evaluate_devices([1], out, method=spec.method)[0]
    acc, loss = offset_trainer(host.method_context(0, spec)).evaluate(out[:p], out[p:], host.x[test], host.y[test])
    np.testing.assert_allclose(row, [round(acc * test.size), test.size, loss * test.size], rtol=1e-12)


def test_mean_mode_sends_the_offset_and_averages_it(tmp_path):
    """Messages are [model; offset], 4·(91 + 5) = 384 bytes, so round 1 ends at 0.023072 + 1.2 + 0.026144;
    the cloud's vector after a round is the average of the devices' [θ⁺; t⁺]: its offset part moved from the
    first mean. With lr_offset 0 nobody moves the offset: it stays the first mean, bit for bit."""
    res = run_scenario(tiny(**MEAN, stop={"rounds": 1}), tmp_path / "a")
    first = next(r for r in map(json.loads, (tmp_path / "a" / "metrics.jsonl").read_text().splitlines())
                 if r["event"] == "cloud_aggregate")
    assert res.summary["model_bytes"] == 384
    assert first["t"] == pytest.approx(0.023072 + 1.2 + 0.026144, abs=1e-12)
    w0 = build(tiny(**MEAN)).init_params
    assert res.final_params.size == w0.size == 96 and not np.array_equal(res.final_params[91:], w0[91:])
    still = {**MEAN, "training": {"trainer": {"name": "distrans", "offset_mode": "mean", "lr_offset": 0.0}}}
    frozen = run_scenario(tiny(**still, stop={"rounds": 2}), tmp_path / "b")
    np.testing.assert_array_equal(frozen.final_params[91:], w0[91:])


@pytest.mark.parametrize(("override", "expected"), [
    ({"training": {"trainer": "distrans"}, "protocol": UNIFORM}, ["model.name", "allowed: dual_input"]),
    ({"training": {"trainer": "distrans"}, "model": DUAL}, ["protocol.weighting", "allowed: uniform"]),
    ({"training": {"trainer": {"name": "distrans", "offset_mode": "hypernet"}}, "model": DUAL, "protocol": UNIFORM},
     ["offset_mode", "local", "mean"]),
    ({"training": {"trainer": {"name": "distrans", "lr_offset": -1}}, "model": DUAL, "protocol": UNIFORM},
     ["lr_offset"]),
    ({"training": {"trainer": "distrans"}, "model": {**DUAL, "a": 2}, "protocol": UNIFORM}, ["model.a"]),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, override, expected):
    raw = json.loads(json.dumps(TINY))
    raw.update({key: value for key, value in override.items() if key != "training"})
    raw["training"] = {**TINY["training"], **override.get("training", {})}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
