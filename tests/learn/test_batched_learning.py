"""Batched local training for every model (torch.func vmap over stacked parameters).

The numerical contract (docs/howto/batched-learning.md): within float tolerance of the
single-job path (max abs diff <= 1e-4 after a few local epochs, for every registry model, with
momentum, weight decay, FedProx, SCAFFOLD corrections and unequal sample counts), the same data
order, steps and samples per job, bit-identical run to run for the same groups; emulated times,
event order and counters never depend on the path or the device.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from hierfl.methods.personal.math import PersonalJob
from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn.local import LocalTrainer, index_blocks, init_params
from hierfl.methods.personal.trainer import Personaliser
from hierfl.learn.vmapped import UnsupportedModel, VmapTrainer, check_module, resolve_device, step_plan
from hierfl.models import CharLSTMConfig, CNNConfig, LogRegConfig, MLPConfig, ModelConfig
from hierfl.runtime.roles import DeviceHost

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4

MODELS = [
    pytest.param(LogRegConfig(), (1, 8, 8), 10, id="logreg"),
    pytest.param(MLPConfig(hidden=[32, 16]), (1, 8, 8), 10, id="mlp"),
    pytest.param(CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10, id="cnn"),
    pytest.param(CNNConfig(channels=(4, 8), hidden=16), (3, 8, 8), 10, id="cnn-rgb"),
    pytest.param(CharLSTMConfig(vocab_size=20, embedding_dim=4, hidden=16, layers=2), (12,), 20, id="char_lstm"),
]

SPECS = {
    "sgd": TrainSpec(epochs=3, batch_size=8, lr=0.05),
    "momentum-wd": TrainSpec(epochs=3, batch_size=8, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "fedprox": TrainSpec(epochs=3, batch_size=8, lr=0.05, momentum=0.5, mu=0.1),
    "prox-rho": TrainSpec(epochs=2, batch_size=None, lr=0.05, prox=0.3),
    "steps": TrainSpec(epochs=None, steps=9, batch_size=8, lr=0.05, momentum=0.9),
}

SIZES = [30, 17, 5, 40, 8]  # unequal: different step counts, partial and padded batches
SEEDS = [11, 12, 13, 14, 15]


def _data(shape: tuple[int, ...], classes: int, tokens: bool, n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    d = int(np.prod(shape))
    x = (rng.integers(0, classes, (n, d)).astype(np.float32) if tokens
         else rng.normal(size=(n, d)).astype(np.float32))
    y = rng.integers(0, classes, n)
    rows = [rng.choice(n, s, replace=False) for s in SIZES]
    return x, y, rows


def _group(cfg, shape, classes, spec, corrections=False):
    tokens = isinstance(cfg, CharLSTMConfig)
    x, y, rows = _data(shape, classes, tokens)
    trainer = LocalTrainer(cfg, shape, classes)
    p0 = init_params(cfg, shape, classes, 1)
    params = [p0 + np.float32(0.01 * k) for k in range(len(SIZES))]
    rng = np.random.default_rng(5)
    corr = ([(0.01 * rng.normal(size=p0.size)).astype(np.float32) for _ in SIZES] if corrections else None)
    return trainer, x, y, rows, params, corr


@pytest.mark.parametrize("spec_name", list(SPECS))
@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_batched_is_close_to_single_job(cfg, shape, classes, spec_name):
    spec = SPECS[spec_name]
    trainer, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
    stats = VmapTrainer(trainer).train_group(params, x, y, rows, spec, SEEDS, out)
    for k in range(len(SIZES)):
        ref, st = trainer.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])
        assert np.abs(out[k] - ref).max() <= TOL
        assert stats[k]["steps"] == st["steps"] and stats[k]["samples"] == st["samples"]
        assert stats[k]["loss"] == pytest.approx(st["loss"], abs=TOL)


@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_scaffold_corrections_per_job(cfg, shape, classes):
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.05, momentum=0.5, control_variates=True)
    trainer, x, y, rows, params, corr = _group(cfg, shape, classes, spec, corrections=True)
    out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
    VmapTrainer(trainer).train_group(params, x, y, rows, spec, SEEDS, out, corrections=corr)
    for k in range(len(SIZES)):
        ref, _ = trainer.train(params[k], x, y, spec, SEEDS[k], correction=corr[k], rows=rows[k])
        assert np.abs(out[k] - ref).max() <= TOL


def test_step_plan_is_the_single_job_data_order():
    for spec in SPECS.values():
        pos, weight, active, samples = step_plan(SIZES, spec, SEEDS)
        for k, (n, seed) in enumerate(zip(SIZES, SEEDS)):
            b = effective_batch(n, spec)
            batches = [blk[s: s + b] for blk in index_blocks(n, b, spec, np.random.default_rng(seed))
                       for s in range(0, blk.size, b)]
            assert active[:, k].sum() == len(batches) and not active[len(batches):, k].any()
            for t, batch in enumerate(batches):
                m = batch.size
                assert np.array_equal(pos[t, k, :m], batch)
                assert np.all(weight[t, k, :m] == np.float32(1 / m)) and not weight[t, k, m:].any()
            assert samples[k] == sum(bt.size for bt in batches)


@pytest.mark.parametrize(("cfg", "shape", "classes"), [MODELS[2], MODELS[4]])
def test_bit_identical_run_to_run(cfg, shape, classes):
    spec = SPECS["momentum-wd"]
    trainer, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    outs = []
    for _ in range(2):
        out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
        stats = VmapTrainer(trainer).train_group(params, x, y, rows, spec, SEEDS, out)
        outs.append((out.view(np.uint32).copy(), stats))
    assert np.array_equal(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]


def test_personal_layers_batched():
    cfg, shape, classes = CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10
    spec = SPECS["momentum-wd"]
    trainer, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    for pspec in (PersonalJob("split", 1, from_end=True), PersonalJob("split", 2, from_end=False)):
        pz = Personaliser(trainer, pspec)
        rng = np.random.default_rng(3)
        # devices' own local layers (near the initial ones); device 0 has none yet: the initial model's
        states = [(params[0][pz.mask] + 0.01 * rng.normal(size=pz.state_len)).astype(np.float32)
                  for _ in range(len(SIZES))]
        states[0] = params[0]
        got = pz.train_group(list(range(len(SIZES))), params, x, y, rows, spec, SEEDS, states, VmapTrainer(trainer))
        for k in range(len(SIZES)):
            upd, st, new_state = pz.train(k, params[k], x, y, rows[k], spec, SEEDS[k], states[k])
            assert np.abs(got[k][0] - upd).max() <= TOL and np.abs(got[k][2] - new_state).max() <= TOL
            assert not got[k][0][pz.mask].any()
            assert got[k][1]["steps"] == st["steps"]


class _Custom(ModelConfig):
    """A model outside the registry: any nn.Module batches."""

    name: str = "custom"
    kind: str = "tanh"

    def _construct(self, input_shape, num_classes):
        d = int(np.prod(input_shape))
        layers = [nn.Flatten(), nn.Linear(d, 12), nn.Tanh()]
        if self.kind == "dropout":
            layers.append(nn.Dropout(0.5))
        return nn.Sequential(*layers, nn.Linear(12, num_classes))


def test_any_module_batches_and_global_randomness_is_refused():
    cfg, shape = _Custom(), (6,)
    trainer, x, y, rows, params, _ = _group(cfg, shape, 3, SPECS["sgd"])
    out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
    VmapTrainer(trainer).train_group(params, x, y, rows, SPECS["sgd"], SEEDS, out)
    for k in range(len(SIZES)):
        assert np.abs(out[k] - trainer.train(params[k], x, y, SPECS["sgd"], SEEDS[k], rows=rows[k])[0]).max() <= TOL
    # dropout and batch norm batch (tests/learn/test_any_model.py); what draws from torch's global generator does not
    with pytest.raises(UnsupportedModel, match="recurrent dropout"):
        check_module(nn.LSTM(3, 4, num_layers=2, dropout=0.5, batch_first=True), (2, 3))
    assert check_module(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.1)), (3,))[0][:2] == ("element", 0.1)


def test_host_group_of_unequal_devices_is_close_to_train():
    cfg, shape, classes = CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10
    x, y, rows = _data(shape, classes, False)
    spec = SPECS["momentum-wd"]
    exact = DeviceHost(x, y, rows, (cfg, shape, classes, 1))
    fast = DeviceHost(x, y, rows, (cfg, shape, classes, 1, True, "cpu", "fp32", "vmap"))
    assert fast.vmapped is not None and fast.batched is None
    p0 = init_params(cfg, shape, classes, 1)
    devices = [0, 1, 2, 3, 4]
    out, stats = fast.train_group(devices, SEEDS, spec, [p0] * 5)
    for k, d in enumerate(devices):
        ref, st = exact.train(d, SEEDS[k], spec, p0)
        assert np.abs(out[k] - ref).max() <= TOL and stats[k]["steps"] == st["steps"]
    # Linear chains on CPU keep the hand-written group trainer
    chain = DeviceHost(x, y, rows, (MLPConfig(hidden=[8]), shape, classes, 1, True, "cpu"))
    assert chain.batched is not None and chain.vmapped is None


def test_a_cpu_host_trains_a_cnn_group_job_by_job_unless_asked_for_vmap():
    # on CPU kernels vmap's grouped convolutions are slower than one job after another, so by default
    # (cpu_batching auto) a CNN group is trained job by job: exactly the bits of the path without groups
    cfg, shape, classes = CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10
    x, y, rows = _data(shape, classes, False)
    spec = SPECS["momentum-wd"]
    exact = DeviceHost(x, y, rows, (cfg, shape, classes, 1))
    auto = DeviceHost(x, y, rows, (cfg, shape, classes, 1, True, "cpu"))
    assert auto.vmapped is None and auto.batched is None
    p0 = init_params(cfg, shape, classes, 1)
    out, stats = auto.train_group([0, 1, 2], SEEDS[:3], spec, [p0] * 3)
    for k in range(3):
        ref, st = exact.train(k, SEEDS[k], spec, p0)
        assert np.array_equal(out[k], ref) and stats[k] == st
    with pytest.raises(Exception, match="cpu_batching"):
        from hierfl.scenario.loader import load_scenario

        load_scenario(ROOT / "scenarios" / "digits_cnn.yaml", ["runtime.cpu_batching=always"])


def test_gpus_per_host_is_ignored_by_the_local_executor():
    from hierfl.runtime.start import ExecutorStart, start_executor

    start = start_executor("local", gpus_per_host=0.5)
    assert type(start) is ExecutorStart
    start.close()


def test_device_setting():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="runtime.device"):
        resolve_device("tpu")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_a_load_time_error(tmp_path, capsys, monkeypatch):
    from hierfl.cli import main
    from hierfl.config.errors import ConfigError
    from hierfl.scenario.loader import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(f"extends: {ROOT / 'scenarios' / 'digits_cnn.yaml'}\nruntime: {{executor: local, device: cuda}}\n")
    with pytest.raises(ConfigError, match="runtime.device"):
        load_scenario(path)
    # the CLI in this process (the installed command's exit status: tests/scenario/test_config.py)
    monkeypatch.chdir(ROOT)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "runtime.device" in err and "auto" in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_cuda_is_close_to_single_job(cfg, shape, classes):
    spec = SPECS["momentum-wd"]
    trainer, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    outs = []
    for _ in range(2):
        out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
        VmapTrainer(trainer, "cuda").train_group(params, x, y, rows, spec, SEEDS, out)
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))  # run to run, same GPU
    for k in range(len(SIZES)):
        assert np.abs(outs[0][k] - trainer.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])[0]).max() <= TOL


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_evaluation_is_close_to_cpu():
    cfg, shape, classes = CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10
    x, y, _ = _data(shape, classes, False, n=5000)
    p0 = init_params(cfg, shape, classes, 2)
    acc_c, loss_c = LocalTrainer(cfg, shape, classes).evaluate(p0, x, y)
    acc_g, loss_g = LocalTrainer(cfg, shape, classes, device="cuda").evaluate(p0, x, y)
    assert abs(acc_c - acc_g) <= 2 / len(y) and loss_g == pytest.approx(loss_c, abs=1e-5)


def _timeline(run_dir: Path) -> list[dict]:
    """metrics.jsonl without accuracy, loss and wall-clock fields: times, event order, counters."""
    import json

    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append({k: v for k, v in rec.items() if not k.startswith("wall") and "accuracy" not in k
                    and "loss" not in k and k not in ("startup_s", "executor", "workers")})
    return out


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_emulated_times_do_not_depend_on_the_batched_path(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario
    from hierfl.learn import vmapped
    from hierfl.scenario.loader import load_scenario

    def scenario(*extra: str):
        return load_scenario(ROOT / "scenarios" / "digits_cnn.yaml",
                             ["runtime.executor=local", "stop.virtual_time_s=6", "evaluation.every_s=3",
                              "evaluation.target_accuracy=null", "runtime.checkpoint.enabled=false", *extra])

    exact = run_scenario(scenario(), tmp_path / "exact")
    calls = []
    real_group = vmapped.VmapTrainer.train_resident  # (what train_group and the device-resident path both run)

    def spy(self, params, *args, **kw):
        calls.append(len(params))
        return real_group(self, params, *args, **kw)

    monkeypatch.setattr(vmapped.VmapTrainer, "train_resident", spy)
    fast = run_scenario(scenario("runtime.fast_path=true", "runtime.device=cpu", "runtime.cpu_batching=vmap"),
                        tmp_path / "fast")
    assert calls and max(calls) > 1  # CNN jobs were trained in groups
    assert _timeline(tmp_path / "fast") == _timeline(tmp_path / "exact")
    assert not np.array_equal(fast.final_params, exact.final_params)
    np.testing.assert_allclose(fast.final_params, exact.final_params, rtol=0, atol=1e-3)


@pytest.mark.slow
def test_local_run_does_not_import_ray(tmp_path):
    code = (
        "import sys\nfrom hierfl.driver import run_scenario\nfrom hierfl.scenario.loader import load_scenario\n"
        f"s = load_scenario({str(ROOT / 'scenarios' / 'digits_cnn.yaml')!r}, ['runtime.executor=local', "
        "'stop.virtual_time_s=1', 'evaluation.every_s=null', 'evaluation.target_accuracy=null', "
        "'runtime.fast_path=true', 'runtime.device=auto', 'runtime.checkpoint.enabled=false'])\n"
        f"run_scenario(s, {str(tmp_path / 'run')!r})\n"
        "print('RAY' if 'ray' in sys.modules else 'NORAY')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "NORAY"
