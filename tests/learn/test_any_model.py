"""Any torch model on both training paths: batch norm's running statistics per job, dropout masks from each
job's own stream, normalisation layers' deterministic init, the ``torch`` factory model and ``pfl_cnn``.

Batched (``torch.func.vmap``) and job by job agree within float tolerance, the running statistics included,
and every run repeats bit for bit (docs/howto/models.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hierfl.core.work import TrainSpec
from hierfl.learn.local import LocalTrainer, count_params, init_params
from hierfl.learn.randomness import UnsupportedRandomness, dropout_sites
from hierfl.learn.vmapped import UnsupportedModel, VmapTrainer
from hierfl.models import CharLSTMConfig, ModelConfig, PflCNNConfig, TorchModelConfig

ROOT = Path(__file__).resolve().parents[2]

TOL = 1e-4
SIZES = [12, 7, 12, 3]  # unequal: different batch sizes in one step, jobs finishing early
SEEDS = [21, 22, 23, 24]
SPEC = TrainSpec(epochs=2, batch_size=4, lr=0.05, momentum=0.9, weight_decay=1e-3)


class _BnDropCNN(nn.Module):
    """Conv, batch norm, ReLU, channel dropout; a linear layer after a functional dropout."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.drop = nn.Dropout2d(0.3)
        self.fc = nn.Linear(3 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(F.relu(self.bn(self.conv(x.reshape(x.shape[0], 1, 4, 4)))))
        return self.fc(F.dropout(h.flatten(1), 0.5, self.training))


class _GroupNormNet(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.ln = nn.LayerNorm(4 * 4 * 4)
        self.fc = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.ln(F.relu(self.gn(self.conv(x.reshape(x.shape[0], 1, 4, 4)))).flatten(1)))


class _Net(ModelConfig):
    """A test model outside the registry, built (and initialised) like every registry model."""

    name: str = "test_net"
    kind: str = "bn_dropout"

    def _construct(self, input_shape, num_classes):
        if self.kind == "bn_dropout":
            return _BnDropCNN(num_classes)
        if self.kind == "groupnorm":
            return _GroupNormNet(num_classes)
        if self.kind == "bn1d":
            return nn.Sequential(nn.Linear(16, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(0.2), nn.Linear(6, num_classes))
        if self.kind == "randn":
            return _Noisy(num_classes)
        return nn.Sequential(nn.Linear(16, 6), nn.BatchNorm1d(6, momentum=None), nn.Linear(6, num_classes))


class _Noisy(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x + torch.randn_like(x))


MODELS = [
    pytest.param(_Net(kind="bn_dropout"), (1, 4, 4), 3, id="bn-dropout-cnn"),
    pytest.param(_Net(kind="bn1d"), (16,), 3, id="bn1d-dropout-mlp"),
    pytest.param(_Net(kind="groupnorm"), (1, 4, 4), 3, id="groupnorm"),
    pytest.param(CharLSTMConfig(vocab_size=6, embedding_dim=3, hidden=5, layers=1), (5,), 6, id="lstm"),
]


def _setup(cfg, shape, classes):
    rng = np.random.default_rng(0)
    d = int(np.prod(shape))
    tokens = isinstance(cfg, CharLSTMConfig)
    x = (rng.integers(0, classes, (40, d)) if tokens else rng.normal(size=(40, d))).astype(np.float32)
    y = rng.integers(0, classes, 40)
    rows = [rng.choice(40, s, replace=False) for s in SIZES]
    trainer = LocalTrainer(cfg, shape, classes)
    p0 = init_params(cfg, shape, classes, 1)
    return trainer, x, y, rows, [p0 + np.float32(0.01 * k) for k in range(len(SIZES))]


@pytest.mark.parametrize(("cfg", "shape", "classes"), MODELS)
def test_batched_with_buffers_and_streams_matches_job_by_job_and_repeats(cfg, shape, classes):
    trainer, x, y, rows, params = _setup(cfg, shape, classes)
    runs = []
    for _ in range(2):
        out = np.empty((len(SIZES), trainer.num_params), dtype=np.float32)
        stats = VmapTrainer(trainer).train_group(params, x, y, rows, SPEC, SEEDS, out)
        runs.append((out.copy(), stats))
    assert np.array_equal(runs[0][0].view(np.uint32), runs[1][0].view(np.uint32)) and runs[0][1] == runs[1][1]
    out, stats = runs[0]
    for k in range(len(SIZES)):
        ref, st = trainer.train(params[k], x, y, SPEC, SEEDS[k], rows=rows[k])
        again, _ = trainer.train(params[k], x, y, SPEC, SEEDS[k], rows=rows[k])
        assert np.array_equal(ref.view(np.uint32), again.view(np.uint32))
        assert np.abs(out[k] - ref).max() <= TOL, k
        assert stats[k]["steps"] == st["steps"] and stats[k]["loss"] == pytest.approx(st["loss"], abs=TOL)
        assert not np.array_equal(ref, params[k])
    if trainer.num_params > trainer.num_trainable:  # the running statistics moved, per job
        tail = out[:, trainer.num_trainable:]
        assert not np.allclose(tail, params[0][trainer.num_trainable:]) and not np.allclose(tail[0], tail[1])


def test_dropout_masks_follow_the_job_seed_never_the_global_generator():
    cfg, shape, classes = _Net(kind="bn1d"), (16,), 3
    trainer, x, y, rows, params = _setup(cfg, shape, classes)
    assert [(kind, p) for kind, p, _ in trainer.dropout] == [("element", 0.2)]
    state = torch.random.get_rng_state()
    a, _ = trainer.train(params[0], x, y, SPEC, 5, rows=rows[0])
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is neither read nor advanced
    torch.manual_seed(123)
    b, _ = trainer.train(params[0], x, y, SPEC, 5, rows=rows[0])
    c, _ = trainer.train(params[0], x, y, SPEC, 6, rows=rows[0])
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_state_vector_carries_running_statistics_and_evaluation_uses_them():
    cfg, shape, classes = _Net(kind="bn1d"), (16,), 3
    trainer, x, y, rows, params = _setup(cfg, shape, classes)
    assert [n for n, _ in trainer.layout][-2:] == ["1.running_mean", "1.running_var"]
    assert trainer.num_params == trainer.num_trainable + 12 == count_params(cfg, shape, classes)
    p = params[0].copy()
    assert np.array_equal(p[-12:], np.r_[np.zeros(6), np.ones(6)].astype(np.float32))  # init: mean 0, var 1
    acc0, loss0 = trainer.evaluate(p, x, y)
    p[-6:] = 4.0  # other running variances: another eval-mode output
    assert trainer.evaluate(p, x, y)[1] != loss0


def test_refused_models_say_why():
    with pytest.raises(UnsupportedRandomness, match="randn_like"):
        LocalTrainer(_Net(kind="randn"), (16,), 3)
    with pytest.raises(ValueError, match="momentum=None"):
        LocalTrainer(_Net(kind="cumulative"), (16,), 3)
    with pytest.raises(UnsupportedRandomness, match="recurrent dropout"):
        dropout_sites(nn.LSTM(3, 4, num_layers=2, dropout=0.5, batch_first=True), (2, 3))


def test_pfl_cnn_matches_the_reference_layers_and_init():
    cfg = PflCNNConfig()
    assert count_params(cfg, (3, 32, 32), 10) == 1_626_442
    module = cfg.build((3, 8, 8), 10, seed=3)
    kinds = [type(m).__name__ for m in module.layers]
    assert kinds == ["Conv2d", "ReLU", "Conv2d", "ReLU", "MaxPool2d", "Dropout", "Flatten", "Linear", "ReLU",
                     "Dropout", "Linear"]
    for m in (module.layers[0], module.layers[7]):  # Glorot-uniform bound sqrt(6 / (fan_in + fan_out))
        fan_in, fan_out = nn.init._calculate_fan_in_and_fan_out(m.weight)
        bound = (6.0 / (fan_in + fan_out)) ** 0.5
        assert m.weight.abs().max() <= bound and m.weight.abs().max() > 0.8 * bound
    again = cfg.build((3, 8, 8), 10, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), again.parameters()))


NETS = ROOT / "examples" / "own_model" / "nets.py"


def test_torch_factory_model_from_a_plugin_file_trains_batched_like_alone():
    from hierfl.config.plugins import load_plugin

    load_plugin(str(NETS))
    cfg = TorchModelConfig(factory="nets:bn_dropout_cnn", kwargs={"channels": 2, "hidden": 6})
    shape = (1, 4, 4)
    assert cfg.check_dataset(shape, None) is None
    a, b = init_params(cfg, shape, 3, 4), init_params(cfg, shape, 3, 4)
    assert np.array_equal(a, b) and not np.array_equal(a, init_params(cfg, shape, 3, 5))
    trainer = LocalTrainer(cfg, shape, 3)
    assert len(trainer.dropout) == 2 and trainer.num_params == trainer.num_trainable + 4
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(20, 16)).astype(np.float32), rng.integers(0, 3, 20)
    rows = [np.arange(0, 10), np.arange(10, 17)]
    out = np.empty((2, trainer.num_params), dtype=np.float32)
    VmapTrainer(trainer).train_group([a, a], x, y, rows, SPEC, [1, 2], out)
    for k in range(2):
        assert np.abs(out[k] - trainer.train(a, x, y, SPEC, k + 1, rows=rows[k])[0]).max() <= TOL


@pytest.mark.parametrize(("model", "needles"), [
    ({"name": "torch", "factory": "no_such_module_xyz:make"}, ["model.factory", "cannot import 'no_such_module_xyz'"]),
    ({"name": "torch", "factory": "nets:missing"}, ["model.factory", "no callable 'missing'"]),
    ({"name": "torch", "factory": "not a path"}, ["model.factory", "package.module:function"]),
    ({"name": "torch", "factory": "nets:BnDropoutCNN"}, ["model", "factory 'nets:BnDropoutCNN'"]),
    ({"name": "torch", "factory": "nets:bn_dropout_cnn", "kwargs": {"depth": 3}}, ["model", "depth"]),
])
def test_bad_factories_exit_2_naming_the_key(tmp_path, capsys, model, needles):
    import yaml

    from hierfl.cli import main
    from tests.conftest import TINY

    raw = {**TINY, "model": model, "plugins": [str(NETS)],
           "data": {"dataset": {"name": "blobs", "shape": [1, 4, 4], "num_classes": 3, "num_samples": 60}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["validate", str(path), "--build"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_cifar10_channel_normalisation_is_an_option(tmp_path):
    from hierfl.data import CIFAR10Config
    from hierfl.data.files import CIFAR10_MEAN, CIFAR10_STD
    from tests.datafiles import write_cifar_dir

    write_cifar_dir(tmp_path, per_batch=2, n_test=2)
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    plain = CIFAR10Config(root=str(tmp_path)).build(2, rng())
    assert CIFAR10Config(root=str(tmp_path)).normalize == "none"
    norm = CIFAR10Config(root=str(tmp_path), normalize="channel").build(2, rng())
    want = (plain.x_train.reshape(-1, 3, 1024) - np.float32(CIFAR10_MEAN)[:, None]) / np.float32(CIFAR10_STD)[:, None]
    np.testing.assert_allclose(norm.x_train.reshape(-1, 3, 1024), want, rtol=1e-6)
    assert norm.x_test.dtype == np.float32


def test_layers_with_a_deterministic_rule_are_initialised_by_it():
    from hierfl.models.nets import reset_parameters_

    net = nn.Sequential(nn.Embedding(5, 3, padding_idx=1), nn.Conv1d(3, 4, 2), nn.GroupNorm(2, 4), nn.PReLU(),
                        nn.LayerNorm(4), nn.BatchNorm1d(4), nn.GRU(4, 3))
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(7.0)
        net[5].running_var.fill_(7.0)
    reset_parameters_(net, 3)
    assert not net[0].weight[1].any() and net[0].weight[0].abs().max() < 7
    assert bool((net[2].weight == 1).all() and (net[2].bias == 0).all() and (net[4].weight == 1).all())
    assert float(net[3].weight.detach()) == 0.25 and bool((net[5].running_var == 1).all())
    bound = 1 / 3 ** 0.5
    assert all(float(p.detach().abs().max()) <= bound for p in net[6].parameters())
    again = reset_parameters_(nn.Sequential(nn.Embedding(5, 3, padding_idx=1), nn.Conv1d(3, 4, 2)), 3)
    assert torch.equal(again[1].weight, net[1].weight)
    with pytest.raises(TypeError, match="MultiheadAttention"):
        reset_parameters_(nn.MultiheadAttention(4, 2), 0)
