"""Model plug-ins: configs, shape checks, parameter counts, FLOPs, deterministic init."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from hierfl.learn import count_params, forward_flops, init_params, param_layout
from hierfl.models import MODELS, CNNConfig, LogRegConfig, MLPConfig, ModelConfig

# One accepted input shape per registered model (conformance suite below runs over MODELS).
SAMPLE_SHAPES: dict[str, tuple[int, ...]] = {"logreg": (6,), "mlp": (6,), "cnn": (2, 8, 4), "char_lstm": (7,),
                                            "dual_input": (6,), "pfl_cnn": (2, 8, 6), "torch": (6,)}
SMALL_CONFIGS: dict[str, dict[str, object]] = {"logreg": {}, "mlp": {"hidden": [5, 4]}, "cnn": {"channels": [3, 4], "hidden": 7},
                                               "char_lstm": {"vocab_size": 9, "embedding_dim": 3, "hidden": 5},
                                               "dual_input": {"features": 3, "backbone": {"name": "mlp", "hidden": [5]}},
                                               "pfl_cnn": {"hidden": 6},
                                               "torch": {"factory": "hierfl.models.nets:bn_mlp", "kwargs": {"hidden": 5}}}


def test_import_does_not_import_torch() -> None:
    code = "import sys, hierfl.models; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_registry_names_and_union() -> None:
    assert all(MODELS.get(n).model_fields["name"].default == n for n in MODELS.names())
    adapter = TypeAdapter(MODELS.union())
    cfg = adapter.validate_python({"name": "mlp", "hidden": [10, 3]})
    assert isinstance(cfg, MLPConfig) and cfg.hidden == [10, 3]
    cnn = adapter.validate_python({"name": "cnn", "channels": [16, 8]})
    assert isinstance(cnn, CNNConfig) and cnn.channels == (16, 8) and cnn.hidden == 512
    with pytest.raises(ValidationError):
        adapter.validate_python({"name": "resnet"})


def test_config_defaults_and_validation() -> None:
    assert MLPConfig().hidden == [200, 200]
    assert CNNConfig().channels == (32, 64)
    with pytest.raises(ValidationError):
        MLPConfig(hidden=[0])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        CNNConfig(channels=[32])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        CNNConfig(chanels=[32, 64])  # type: ignore[call-arg]  # misspelled key is rejected
    with pytest.raises(ValidationError):
        LogRegConfig().name = "mlp"  # type: ignore[misc]  # frozen


def test_check_input() -> None:
    cnn = CNNConfig()
    assert cnn.check_input((1, 28, 28)) is None
    assert cnn.check_input((3, 32, 32)) is None
    reason = cnn.check_input((60,))
    assert reason is not None and "cnn" in reason and "(60,)" in reason and "divisible by 4" in reason
    assert cnn.check_input((1, 30, 30)) is not None
    assert cnn.check_input((1, 28, 30)) is not None
    assert LogRegConfig().check_input((60,)) is None
    assert MLPConfig().check_input((1, 28, 28)) is None
    assert MLPConfig().check_input(()) is not None
    with pytest.raises(ValueError, match="divisible by 4"):
        cnn.build((1, 30, 30), 10)
    with pytest.raises(ValueError, match="num_classes"):
        LogRegConfig().build((4,), 1)


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_cnn_builds_and_runs(shape: tuple[int, int, int]) -> None:
    module = CNNConfig().build(shape, 10)
    x = torch.zeros(2, math.prod(shape))
    with torch.no_grad():
        out = module(x)
    assert out.shape == (2, 10)
    assert out.dtype == torch.float32


def test_param_counts_by_hand() -> None:
    d, c = 60, 10
    assert count_params(LogRegConfig(), (d,), c) == d * c + c
    assert count_params(MLPConfig(hidden=[200, 200]), (784,), 10) == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10
    # McMahan et al. (2017) report 1,663,370 parameters for the MNIST CNN.
    assert count_params(CNNConfig(), (1, 28, 28), 10) == 1_663_370
    cifar = 3 * 32 * 25 + 32 + 32 * 64 * 25 + 64 + 64 * 8 * 8 * 512 + 512 + 512 * 10 + 10
    assert count_params(CNNConfig(), (3, 32, 32), 10) == cifar


def test_layout() -> None:
    module = MLPConfig(hidden=[5]).build((3,), 2)
    assert param_layout(module) == [
        ("layers.0.weight", (5, 3)),
        ("layers.0.bias", (5,)),
        ("layers.2.weight", (2, 5)),
        ("layers.2.bias", (2,)),
    ]
    assert param_layout(LogRegConfig().build((4,), 3)) == [("linear.weight", (3, 4)), ("linear.bias", (3,))]


def test_forward_flops_by_hand() -> None:
    assert forward_flops(LogRegConfig(), (60,), 10) == 2 * 60 * 10
    assert forward_flops(LogRegConfig(), (1, 4, 4), 3) == 2 * 16 * 3
    assert forward_flops(MLPConfig(hidden=[7, 5]), (12,), 3) == 2 * (12 * 7 + 7 * 5 + 5 * 3)
    conv1 = 32 * 28 * 28 * (1 * 5 * 5)
    conv2 = 64 * 14 * 14 * (32 * 5 * 5)
    fc = 64 * 7 * 7 * 512 + 512 * 10
    assert forward_flops(CNNConfig(), (1, 28, 28), 10) == 2 * (conv1 + conv2 + fc)


def test_init_params_deterministic() -> None:
    cfg = MLPConfig(hidden=[16])
    a = init_params(cfg, (8,), 3, seed=5)
    b = init_params(cfg, (8,), 3, seed=5)
    c = init_params(cfg, (8,), 3, seed=6)
    assert a.dtype == np.float32 and a.shape == (8 * 16 + 16 + 16 * 3 + 3,)
    assert a.flags.c_contiguous and a.flags.writeable
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_init_matches_pytorch_default_and_leaves_global_rng_alone() -> None:
    before = torch.random.get_rng_state().clone()
    ours = init_params(MLPConfig(hidden=[16]), (8,), 3, seed=11)
    assert torch.equal(before, torch.random.get_rng_state())
    # Reference: PyTorch's own default init drawing from the global generator seeded the same
    # way; fork_rng restores the global state afterwards.
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(11)
        ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        ref_vec = torch.nn.utils.parameters_to_vector(ref.parameters()).detach().numpy()
    assert np.array_equal(ours, ref_vec)
    # Bias bounds follow U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    first_bias = ours[8 * 16 : 8 * 16 + 16]
    assert np.all(np.abs(first_bias) <= 1 / math.sqrt(8))


def test_init_identical_in_another_process() -> None:
    code = (
        "import sys, numpy as np\n"
        "from hierfl.models import CNNConfig\n"
        "from hierfl.learn import init_params\n"
        "v = init_params(CNNConfig(channels=[3, 4], hidden=7), (1, 8, 8), 3, seed=123)\n"
        "sys.stdout.write(v.tobytes().hex())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = init_params(CNNConfig(channels=[3, 4], hidden=7), (1, 8, 8), 3, seed=123)
    assert out.stdout == here.tobytes().hex()


@pytest.mark.parametrize("name", MODELS.names())
def test_conformance(name: str) -> None:
    """Every registered model: flat input, logits out, layout consistent with the flat vector."""
    cls = MODELS.get(name)
    cfg: ModelConfig = cls(**SMALL_CONFIGS[name])
    shape = SAMPLE_SHAPES[name]
    assert cfg.check_input(shape) is None
    module = cfg.build(shape, 4)
    layout = param_layout(module)
    total = sum(math.prod(s) for _, s in layout)
    assert total == count_params(cfg, shape, 4)
    vec = init_params(cfg, shape, 4, seed=0)
    assert vec.shape == (total,) and vec.dtype == np.float32
    with torch.no_grad():
        out = module(torch.zeros(5, math.prod(shape)))
    assert out.shape == (5, 4)
    assert forward_flops(cfg, shape, 4) > 0
