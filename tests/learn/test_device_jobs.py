"""Jobs trained one at a time run on the run's device (``runtime.device``), and every trainer follows it.

No GPU is needed: a trainer given the device ``cpu:0`` takes every branch a GPU takes (the start vector
staged and copied up, batches moved, the loss summed on the device, the result copied down once), with CPU
kernels, so its results must be the CPU path's bits exactly. The runs below force the hosts and the cloud of
tiny scenarios onto ``cpu:0`` and compare every contract output with the plain run's; further tests count
the host reads per job and check where the trainers build their modules (``meta``: no memory).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn import local as local_module
from hierfl.learn.local import LocalTrainer, init_params
from hierfl.learn.reference import ReferenceTrainer
from hierfl.methods.distrans.trainer import OffsetTrainer
from hierfl.models import DualInputConfig, MLPConfig, PflCNNConfig
from hierfl.scenario.loader import validate_raw
from tests.conftest import TINY, tiny
from tests.golden import contract_outputs

OFF_CPU = "cpu:0"
"""A device string that is not ``cpu``: the trainers take their GPU branches, on CPU kernels."""

TIERS = {"slow": {"gflops": 1e-6, "uplink_mbps": 0.008, "downlink_mbps": 0.016, "rtt_ms": 0},
         "fast": {"gflops": 2e-6, "uplink_mbps": 0.016, "downlink_mbps": 0.032, "rtt_ms": 0}}
MLP = {"name": "mlp", "hidden": [6]}


def _parties(protocol: dict, public: dict, training: dict | None = None) -> dict:
    """Three parties of two architectures on a public split (the output-exchange methods' set-up)."""
    raw = copy.deepcopy(TINY)
    raw["data"]["public"] = public
    raw.update(devices={"count": 3, "tiers": {"slow": 2, "fast": 1}, "custom_tiers": TIERS},
               models={"fast": {"name": "mlp", "hidden": [4]}}, protocol=protocol,
               training=training or {"epochs": 1, "batch_size": 60, "lr": 0.1}, stop={"rounds": 1})
    return raw


SCENARIOS = {
    # momentum, FedProx's μ, weight decay; SCAFFOLD's correction; Adam with clipping and a device-kept state
    "prox_momentum": lambda: tiny(model=MLP, training={"trainer": {"name": "fedprox", "mu": 0.1}, "momentum": 0.9,
                                                       "weight_decay": 1e-3}, stop={"rounds": 2}),
    "scaffold": lambda: tiny(training={"trainer": {"name": "scaffold"}}, stop={"rounds": 2}),
    "adam_device_state": lambda: tiny(model=MLP, training={"optimizer": "adam", "clip_norm": 1.0, "lr": 0.01,
                                                           "optimizer_state": "per_device"}, stop={"rounds": 2}),
    # FedDC's drift; DisTrans's offset (a module of its own); FedAlign's loss; a personalised meta-learner
    "feddc": lambda: tiny(training={"trainer": {"name": "feddc", "alpha": 0.3}}, stop={"rounds": 2},
                          protocol={"name": "fedavg", "fraction": 1.0, "weighting": "uniform"}),
    "distrans": lambda: tiny(model={"name": "dual_input", "features": 4, "backbone": {"name": "mlp", "hidden": [6]}},
                             training={"trainer": "distrans"}, data={"local_test_fraction": 0.25}, stop={"rounds": 1},
                             protocol={"name": "fedavg", "fraction": 1.0, "weighting": "uniform"}),
    "fedalign": lambda: tiny(model={"name": "mlp", "hidden": [4, 4]}, training={"trainer": {"name": "fedalign"}},
                             stop={"rounds": 1}),
    "meta_sgd": lambda: tiny(model=MLP, training={"trainer": {"name": "fedmeta", "learner": "meta_sgd"}, "epochs": 1},
                             data={"local_test_fraction": 0.25}, stop={"rounds": 1}),
    # the output-exchange methods: class scores, digest, SCE training, probabilities, FCCL's own jobs
    "fedmd": lambda: validate_raw(_parties({"name": "fedmd", "align_size": 30, "transfer_public_epochs": 1,
                                            "transfer_batch_size": 60, "transfer_private_epochs": 1,
                                            "digest_epochs": 1, "digest_batch_size": 30, "revisit_epochs": 1},
                                           {"size": 60})),
    "rhfl": lambda: validate_raw(_parties({"name": "rhfl", "public_batch_size": 30, "pretrain_epochs": 1},
                                          {"size": 60, "labelled": False})),
    "fccl": lambda: validate_raw(_parties({"name": "fccl", "public_size": 30, "public_batch_size": 10,
                                           "pretrain_epochs": 1, "pretrain_batch_size": 60},
                                          {"size": 60, "labelled": False}, {"epochs": 1, "batch_size": 60})),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_trainer_on_the_run_device_gives_the_cpu_bits(name: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contract output of a run whose hosts and cloud train and evaluate on a device other than ``cpu``
    (the GPU code path on CPU kernels) equals the plain run's, byte for byte."""
    made: list[str] = []
    real = LocalTrainer.__init__

    def spy(self: LocalTrainer, *a: object, **kw: object) -> None:
        real(self, *a, **kw)  # type: ignore[arg-type]
        made.append(self.device)

    monkeypatch.setattr(LocalTrainer, "__init__", spy)
    run_scenario(SCENARIOS[name](), tmp_path / "cpu")
    assert made and set(made) == {"cpu"}
    made.clear()
    # every role that resolves runtime.device gets the off-CPU device
    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    run_scenario(SCENARIOS[name](), tmp_path / "dev")
    assert made and set(made) == {OFF_CPU}
    a, b = contract_outputs(tmp_path / "cpu"), contract_outputs(tmp_path / "dev")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key
    assert np.array_equal(np.load(tmp_path / "cpu" / "final_model.npy"), np.load(tmp_path / "dev" / "final_model.npy"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_job_reads_the_device_once_and_matches_the_cpu_job(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """pfl_cnn (dropout masks from the job's stream) with momentum and frozen leading entries: on the device the
    loss is summed there and read once, the result copied down once per job, and the bits are the CPU job's."""
    cfg, shape = PflCNNConfig(hidden=8), (3, 8, 8)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 192)).astype(np.float32)
    y = rng.integers(0, 10, 30)
    p0 = init_params(cfg, shape, 10, 1)
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.05, momentum=0.9, frozen=16)
    cpu = LocalTrainer(cfg, shape, 10, precision=precision)
    dev = LocalTrainer(cfg, shape, 10, precision=precision, device=OFF_CPU)
    reads = {"item": 0, "download": 0}
    item, download = torch.Tensor.item, local_module.download

    def counted_item(t: torch.Tensor) -> object:
        reads["item"] += 1
        return item(t)

    def counted_download(t: torch.Tensor) -> np.ndarray:
        reads["download"] += 1
        return download(t)

    want, want_stats = cpu.train(p0, x, y, spec, 5)
    monkeypatch.setattr(torch.Tensor, "item", counted_item)
    monkeypatch.setattr(local_module, "download", counted_download)
    got, stats = dev.train(p0, x, y, spec, 5)
    assert reads == {"item": 1, "download": 1}  # 8 steps, one read of the loss and one of the result
    assert np.array_equal(got, want) and stats == want_stats and stats["steps"] == 8
    assert np.array_equal(got[:16], p0[:16]) and not np.array_equal(got, p0)
    out = np.empty_like(want)
    assert dev.train(p0, x, y, spec, 5, out=out)[0] is out and np.array_equal(out, want)
    assert dev.evaluate(want, x, y) == cpu.evaluate(want, x, y)


def test_trainers_build_their_modules_on_the_device() -> None:
    """``meta`` tensors have no storage: the single-job trainer, the reference trainer and DisTrans's own module
    are built there, with their flat buffers and optimiser buffers."""
    t = LocalTrainer(MLPConfig(hidden=[4]), (5,), 3, device="meta")
    assert {p.device.type for p in t.module.parameters()} == {"meta"} and t._flat.device.type == "meta"
    t._sgd._buffer("momentum")
    assert t._sgd._buffers["momentum"][0].device.type == "meta"
    ref = ReferenceTrainer(MLPConfig(hidden=[4]), (5,), 3, device="meta")
    assert {p.device.type for p in ref.module.parameters()} == {"meta"}
    dual = DualInputConfig(features=4, backbone=MLPConfig(hidden=[6])).build((5,), 3)
    assert {p.device.type for p in OffsetTrainer(dual, 1, "meta").module.parameters()} == {"meta"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_job_is_repeatable_and_close_to_the_cpu_job(precision: str) -> None:
    """On a GPU a job alone is the same bits run to run and within the batched path's tolerance of the CPU job
    (bf16: within the precision's stated tolerance); evaluation on the GPU agrees with the CPU's."""
    cfg, shape = PflCNNConfig(hidden=16), (3, 8, 8)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((60, 192)).astype(np.float32)
    y = rng.integers(0, 10, 60)
    p0 = init_params(cfg, shape, 10, 3)
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.05, momentum=0.9, weight_decay=1e-4)
    gpu = LocalTrainer(cfg, shape, 10, precision=precision, device="cuda")
    a, sa = gpu.train(p0, x, y, spec, 7)
    b, sb = gpu.train(p0, x, y, spec, 7)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)) and sa == sb
    want, sw = LocalTrainer(cfg, shape, 10, precision=precision).train(p0, x, y, spec, 7)
    tol = 1e-4 if precision == "fp32" else 0.05
    assert np.abs(a - want).max() <= tol and sa["steps"] == sw["steps"] == 16
    assert sa["loss"] == pytest.approx(sw["loss"], rel=1e-3 if precision == "fp32" else 0.05)
    acc_g, loss_g = gpu.evaluate(want, x, y)
    acc_c, loss_c = LocalTrainer(cfg, shape, 10, precision=precision).evaluate(want, x, y)
    assert abs(acc_g - acc_c) <= 2 / len(y) and loss_g == pytest.approx(loss_c, rel=1e-3 if precision == "fp32" else 0.02)


@pytest.mark.parametrize("fields", [dict(optimizer="adam", clip_norm=0.5), dict(momentum=0.9)], ids=["adam", "sgd"])
def test_a_devices_kept_optimizer_state_stays_on_the_device_between_its_jobs(fields: dict) -> None:
    """``optimizer_state: device`` off the CPU: the state a job leaves is kept on the device (no crossing), the next
    job continues from it there with the CPU trainer's bits; a checkpoint's host copy (pickled) loads back with
    the same bits, its upload counted once per vector."""
    import pickle

    from hierfl.learn.kept import KeptTensor

    cfg, shape = MLPConfig(hidden=[6]), (5,)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((24, 5)).astype(np.float32)
    y = rng.integers(0, 3, 24)
    p0 = init_params(cfg, shape, 3, 4)
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.05, optimizer_state="device", **fields)
    cpu, dev = LocalTrainer(cfg, shape, 3), LocalTrainer(cfg, shape, 3, device=OFF_CPU)
    kept_cpu: dict = {}
    kept_dev: dict = {}
    a1, _ = cpu.train(p0, x, y, spec, 1, opt_state=kept_cpu)
    b1, _ = dev.train(p0, x, y, spec, 1, opt_state=kept_dev)
    moments = [k for k, v in kept_dev.items() if isinstance(v, KeptTensor)]
    assert len(moments) == (2 if "optimizer" in fields else 1)
    a2, _ = cpu.train(a1, x, y, spec, 2, opt_state=kept_cpu)
    b2, _ = dev.train(b1, x, y, spec, 2, opt_state=kept_dev)
    assert np.array_equal(a1, b1) and np.array_equal(a2, b2) and not np.array_equal(a1, a2)
    assert dev.transfers.as_dict() == {"h2d_calls": 0, "h2d_models": 0, "d2h_calls": 0, "d2h_models": 0}
    # a checkpoint holds host vectors (the format of a CPU run's), and a resumed job continues with the same bits
    saved = pickle.loads(pickle.dumps(kept_dev))
    assert all(type(v) is np.ndarray for v in saved.values())
    assert all(np.array_equal(saved[k], kept_cpu[k]) for k in kept_cpu)
    assert dev.transfers.d2h_models == len(moments)
    resumed = LocalTrainer(cfg, shape, 3, device=OFF_CPU)
    a3, _ = cpu.train(a2, x, y, spec, 3, opt_state=kept_cpu)
    b3, _ = resumed.train(b2, x, y, spec, 3, opt_state=saved)
    assert np.array_equal(a3, b3) and resumed.transfers.h2d_models == len(moments)


def test_a_run_keeps_per_device_optimizer_state_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with ``optimizer_state: per_device`` and momentum whose host trains off the CPU: its contract outputs
    are the CPU run's, and no kept state crosses between host and device in the whole run."""
    from hierfl.runtime import local_executor

    def scenario() -> dict:
        return tiny(model=MLP, training={"momentum": 0.9, "optimizer_state": "per_device"}, stop={"rounds": 3})

    run_scenario(scenario(), tmp_path / "cpu")
    hosts = []
    start = local_executor.LocalExecutor.__init__

    def counted(self: object, data: object) -> None:
        start(self, data)  # type: ignore[arg-type]
        self.host.staging.transfers.reset()  # type: ignore[attr-defined]
        hosts.append(self.host)  # type: ignore[attr-defined]

    monkeypatch.setattr(local_executor.LocalExecutor, "__init__", counted)
    monkeypatch.setattr("hierfl.runtime.device_host.resolve_device", lambda d: OFF_CPU)
    monkeypatch.setattr("hierfl.runtime.server_roles.resolve_device", lambda d: OFF_CPU)
    result = run_scenario(scenario(), tmp_path / "dev")
    assert result.summary["device_state"]["bytes"] > 0 and len(hosts) == 1
    assert hosts[0].staging.transfers.as_dict() == {"h2d_calls": 0, "h2d_models": 0, "d2h_calls": 0, "d2h_models": 0}
    from hierfl.learn.kept import KeptTensor

    kept = hosts[0].states.vectors
    assert kept and all(isinstance(v["opt_momentum"], KeptTensor) for v in kept.values())
    # a checkpoint's export holds host vectors, as a CPU run's does
    assert all(type(v) is np.ndarray for vecs in hosts[0].export_state().values() for v in vecs.values())
    a, b = contract_outputs(tmp_path / "cpu"), contract_outputs(tmp_path / "dev")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
