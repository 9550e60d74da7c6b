"""``runtime.precision``: fp32 (the default, unchanged) and bf16 (forward passes under bfloat16 autocast).

The contract (docs/howto/batched-learning.md, "Precision"), tested here on CPU (the CUDA variant is
skipped without a GPU):

* fp32 enters no autocast region and keeps every fp32 code path (the hand-written Linear-chain
  gradients included), so its bits are those of a build without the setting;
* bf16 autocasts the forward pass of the single-job trainer, the batched (vmap) trainer,
  meta-learning's losses and evaluation, for every registry model; parameters, gradients and
  optimiser state stay float32; results are bit-identical run to run;
* bf16's final accuracy is within :data:`ACC_TOL` of fp32's on the shipped digits scenarios;
* emulated times, event order and counters are the same at both precisions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hierfl.methods.personal.math import PersonalJob
from hierfl.learn.batched import BatchedTrainer
from hierfl.learn.local import LocalTrainer, init_params
from hierfl.methods.personal.trainer import Personaliser
from hierfl.learn.precision import PRECISIONS, check_precision
from hierfl.learn.vmapped import VmapTrainer
from hierfl.models import CNNConfig, MLPConfig
from hierfl.runtime.roles import DeviceHost, precision_of
from tests.golden import bit_differences, contract_outputs
from tests.learn.test_batched_learning import (
    MODELS,
    SEEDS,
    SIZES,
    SPECS,
    _data,
    _group,
    _timeline,
)

ROOT = Path(__file__).resolve().parents[2]
ACC_TOL = 0.03
"""bf16's final accuracy against fp32's, absolute (measured on CPU: 0.000 on digits_mlp, 0.017 on
digits_cnn with the fast path)."""
PARAM_TOL = 0.05
"""bf16 against fp32 parameters after 3 local epochs on random N(0, 1) data (measured: at most 0.028)."""


def test_allowed_values():
    assert PRECISIONS == ("fp32", "bf16")
    assert check_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match=r"runtime\.precision must be one of fp32, bf16, got 'fp16'"):
        check_precision("fp16")
    with pytest.raises(ValueError, match="runtime.precision"):
        LocalTrainer(MLPConfig(hidden=[4]), (1, 8, 8), 10, precision="half")
    assert precision_of((None, (1,), 2, 1)) == "fp32" and precision_of((None, (1,), 2, 1, True, "cpu", "bf16")) == "bf16"


def test_bad_precision_is_a_load_time_error(tmp_path, capsys, monkeypatch):
    from hierfl.cli import main
    from hierfl.config.errors import ConfigError
    from hierfl.scenario.loader import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(f"extends: {ROOT / 'scenarios' / 'digits_mlp.yaml'}\nruntime: {{executor: local, precision: fp16}}\n")
    with pytest.raises(ConfigError, match="runtime.precision"):
        load_scenario(path)
    # the CLI in this process (the installed command's exit status: tests/scenario/test_config.py)
    monkeypatch.chdir(ROOT)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "runtime.precision" in err and "'fp32'" in err and "'bf16'" in err
    assert load_scenario(ROOT / "scenarios" / "digits_mlp.yaml").runtime.precision == "fp32"


def test_fp32_enters_no_autocast(monkeypatch):
    def refuse(*args, **kw):
        raise AssertionError("fp32 entered an autocast region")

    monkeypatch.setattr(torch, "autocast", refuse)
    for cfg in (MLPConfig(hidden=[16]), CNNConfig(channels=(4, 8), hidden=16)):
        trainer, x, y, rows, params, _ = _group(cfg, (1, 8, 8), 10, SPECS["momentum-wd"])
        assert trainer.precision == "fp32"
        trainer.train(params[0], x, y, SPECS["momentum-wd"], 1, rows=rows[0])
        trainer.evaluate(params[0], x, y)
        out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
        VmapTrainer(trainer).train_group(params, x, y, rows, SPECS["sgd"], SEEDS, out)
        pz = Personaliser(trainer, PersonalJob("maml", 1, inner_steps=1))
        pz.train(0, params[0], x, y, rows[0], SPECS["sgd"], 1, params[0])
    # Linear chains keep their hand-written fp32 gradients (one job and a group)
    chain = LocalTrainer(MLPConfig(hidden=[16]), (1, 8, 8), 10)
    assert chain._chain is not None and BatchedTrainer.of(chain) is not None


@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_bf16_one_job_and_groups(cfg, shape, classes):
    spec = SPECS["momentum-wd"]
    t32, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    t16 = LocalTrainer(cfg, shape, classes, precision="bf16")
    # autograd for every model (the hand-written chain gradients are fp32 only)
    assert t16._chain is None and BatchedTrainer.of(t16) is None
    for k in (0, 3):
        ref, st32 = t32.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])
        one, st = t16.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])
        again, st2 = t16.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])
        assert one.dtype == np.float32 and np.array_equal(one.view(np.uint32), again.view(np.uint32)) and st == st2
        assert 0 < np.abs(one - ref).max() <= PARAM_TOL  # autocast is on, and its effect is bounded
        assert st["steps"] == st32["steps"] and st["samples"] == st32["samples"]
    # vmap under autocast: run to run, and against the bf16 single-job path
    outs = []
    for _ in range(2):
        out = np.empty((len(SIZES), t16.num_params), dtype=np.float32)
        stats = VmapTrainer(t16).train_group(params, x, y, rows, spec, SEEDS, out)
        outs.append((out, stats))
    assert np.array_equal(outs[0][0].view(np.uint32), outs[1][0].view(np.uint32)) and outs[0][1] == outs[1][1]
    for k in range(len(SIZES)):
        one, st = t16.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])
        assert np.abs(outs[0][0][k] - one).max() <= PARAM_TOL
        assert outs[0][1][k]["steps"] == st["steps"] and outs[0][1][k]["samples"] == st["samples"]


def test_bf16_evaluation_and_meta_learning():
    cfg, shape, classes = CNNConfig(channels=(4, 8), hidden=32), (1, 8, 8), 10
    x, y, rows = _data(shape, classes, False, n=2000)
    p0 = init_params(cfg, shape, classes, 2)
    t32, t16 = LocalTrainer(cfg, shape, classes), LocalTrainer(cfg, shape, classes, precision="bf16")
    acc32, loss32 = t32.evaluate(p0, x, y)
    acc16, loss16 = t16.evaluate(p0, x, y)
    assert abs(acc16 - acc32) <= 0.02 and loss16 == pytest.approx(loss32, rel=1e-2) and loss16 != loss32
    assert t16.evaluate(p0, x, y) == (acc16, loss16)
    # FedMeta's second-order step through autocast's forward
    spec = SPECS["sgd"]
    got = []
    for trainer in (t32, t16, t16):
        pz = Personaliser(trainer, PersonalJob("maml", 1, inner_steps=2))
        got.append(pz.train(0, p0, x, y, rows[3], spec, 7, p0)[0])
    assert np.array_equal(got[1].view(np.uint32), got[2].view(np.uint32))
    assert 0 < np.abs(got[1] - got[0]).max() <= PARAM_TOL


def test_bf16_host_trains_chains_with_vmap():
    shape, classes = (1, 8, 8), 10
    x, y, rows = _data(shape, classes, False)
    host = DeviceHost(x, y, rows, (MLPConfig(hidden=[8]), shape, classes, 1, True, "cpu", "bf16"))
    assert host.trainer.precision == "bf16" and host.batched is None and host.vmapped is not None


def _run(stem: str, out: Path, *extra: str) -> dict:
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(ROOT / "scenarios" / f"{stem}.yaml",
                       ["runtime.executor=local", "evaluation.target_accuracy=null",
                        "runtime.checkpoint.enabled=false", *extra])
    run_scenario(sc, out)
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize(("stem", "extra"), [
    pytest.param("digits_mlp", (), id="digits_mlp-one-job"),        # autograd instead of the chain gradients
    pytest.param("digits_cnn", ("runtime.fast_path=true", "runtime.device=cpu", "runtime.cpu_batching=vmap"),
                 id="digits_cnn-vmap"),
])
@pytest.mark.slow
def test_bf16_accuracy_and_emulated_times(tmp_path, stem, extra):
    fp32 = _run(stem, tmp_path / "fp32", *extra)
    bf16 = _run(stem, tmp_path / "bf16", *extra, "runtime.precision=bf16")
    assert abs(bf16["final_accuracy"] - fp32["final_accuracy"]) <= ACC_TOL, (bf16["final_accuracy"],
                                                                             fp32["final_accuracy"])
    # times, event order and counters: identical; the model's numbers: not (autocast was on)
    assert _timeline(tmp_path / "bf16") == _timeline(tmp_path / "fp32")
    assert bf16["final_loss"] != fp32["final_loss"]
    if stem == "digits_cnn":  # run to run, whole outputs
        _run(stem, tmp_path / "again", *extra, "runtime.precision=bf16")
        assert not bit_differences(contract_outputs(tmp_path / "bf16"), contract_outputs(tmp_path / "again"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_cuda_bf16_is_repeatable_and_close_to_cpu(cfg, shape, classes):
    spec = SPECS["momentum-wd"]
    _, x, y, rows, params, _ = _group(cfg, shape, classes, spec)
    t16 = LocalTrainer(cfg, shape, classes, precision="bf16")
    outs = []
    for _ in range(2):
        out = np.empty((len(SIZES), t16.num_params), dtype=np.float32)
        VmapTrainer(t16, "cuda").train_group(params, x, y, rows, spec, SEEDS, out)
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    for k in range(len(SIZES)):
        assert np.abs(outs[0][k] - t16.train(params[k], x, y, spec, SEEDS[k], rows=rows[k])[0]).max() <= PARAM_TOL
