"""Trainers and protocols with loops of their own on the module refuse the model features they cannot honour.

Plain jobs draw dropout masks from each job's stream and carry running statistics; distillation, output
exchange, meta-learning and FedFTG's server steps do not, so such a combination must exit 2 at build time
with the trainer's or protocol's key, the model's key and the reason — and the same model must still
build and train under the plain trainer (docs/howto/models.md, "Limits").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BN_DROP = {"name": "torch", "factory": "hierfl.models.nets:bn_mlp", "kwargs": {"hidden": 8, "dropout": 0.25}}
BN_ONLY = {"name": "torch", "factory": "hierfl.models.nets:bn_mlp", "kwargs": {"hidden": 8, "dropout": 0.0}}
DROP_ONLY = {"name": "pfl_cnn", "hidden": 8}


def _scenario(stem: str, **override: object) -> dict:
    raw = yaml.safe_load((ROOT / "scenarios" / f"{stem}.yaml").read_text())
    raw.update(override)
    return raw


def _tiny(**override: object) -> dict:
    from tests.conftest import TINY

    return {**TINY, "data": {**TINY["data"], "dataset": {"name": "blobs", "shape": [1, 6, 6], "num_classes": 3,
                                                        "num_samples": 120, "test_samples": 40}},
            **override}


def _build(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: dict) -> tuple[int, str]:
    from hierfl.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["validate", str(path), "--build"])
    return code, capsys.readouterr().err


REFUSED = [
    # (scenario, key, the model's key, words of the reason)
    (lambda: _scenario("rhfl", model=BN_DROP, models={}), "protocol.name", "`model`", "dropout"),
    (lambda: _scenario("rhfl", models={"rpi4": DROP_ONLY}), "protocol.name", "`models.rpi4`", "dropout"),
    (lambda: _scenario("fccl", model=BN_DROP, models={}), "protocol.name", "`model`", "dropout"),
    (lambda: _scenario("fedftg", model=BN_ONLY), "protocol.name", "`model`", "running statistics"),
    (lambda: _tiny(model=BN_DROP, training={**_tiny()["training"], "trainer": {"name": "fedmeta"}}),
     "training.trainer", "`model`", "dropout"),
    (lambda: _tiny(model=BN_ONLY, training={**_tiny()["training"], "trainer": {"name": "fedmeta"}}),
     "training.trainer", "`model`", "running statistics"),
    (lambda: _tiny(model=BN_ONLY, training={**_tiny()["training"], "trainer": {"name": "fedper"}}),
     "training.trainer", "`model`", "count as a layer"),
    (lambda: _tiny(model=DROP_ONLY, data={**_tiny()["data"], "local_test_fraction": 0.2},
                   training={**_tiny()["training"], "trainer": {"name": "fedavgmeta"}}),
     "training.trainer", "`model`", "test-time steps"),
]


@pytest.mark.parametrize(("make", "key", "model_key", "why"), REFUSED,
                         ids=["rhfl", "rhfl_tier", "fccl", "fedftg", "fedmeta_dropout", "fedmeta_bn",
                              "fedper_bn", "fedavgmeta_dropout"])
def test_refused_models_exit_2_with_the_key(tmp_path, capsys, make, key, model_key, why):
    code, err = _build(tmp_path, capsys, make())
    assert code == 2 and "Traceback" not in err, err
    for needle in (key, model_key, why, "allowed:"):
        assert needle in err, (needle, err)


ALLOWED = [
    # what a declaration does not name, or the same model under the plain loop
    lambda: _scenario("fedftg", model=DROP_ONLY) | {"protocol": {"name": "fedavg", "fraction": 0.5}},
    lambda: _scenario("fedmd_digits", model=BN_DROP, models={"rpi4": DROP_ONLY}),  # FedMD honours both
    lambda: _tiny(model=DROP_ONLY, training={**_tiny()["training"], "trainer": {"name": "fedper"}}),
    lambda: _tiny(model=BN_DROP, training={**_tiny()["training"], "trainer": {"name": "fedavgmeta"}}),
]


@pytest.mark.parametrize("make", ALLOWED, ids=["fedavg_dropout", "fedmd", "fedper_dropout", "fedavgmeta_plain"])
def test_what_a_loop_honours_still_builds(tmp_path, capsys, make):
    code, err = _build(tmp_path, capsys, make())
    assert code == 0, err


def test_the_refused_model_trains_under_the_plain_trainer():
    """The model fedmeta refuses runs under ``sgd`` and repeats bit for bit (its masks are the jobs')."""
    from hierfl.api import run

    raw = _tiny(model=BN_DROP, stop={"rounds": 2})
    a, b = run(raw).evals, run(raw).evals
    assert len(a) >= 2 and a["loss"].notna().all()
    assert a[["accuracy", "loss"]].to_numpy().tobytes() == b[["accuracy", "loss"]].to_numpy().tobytes()


def test_fedmd_public_training_draws_its_masks_from_the_job_stream():
    """A public-data job (FedMD's transfer learning and digest, RHFL's alignment) with dropout: its masks come
    from the job's seed, so two runs under different global seeds give the same bits and leave torch's global
    generator as it was; and they are drawn (the same job without dropout trains to other values)."""
    import torch

    from hierfl.core.work import PublicTask, TrainSpec
    from hierfl.learn.local import LocalTrainer, init_params
    from hierfl.learn.outputs import run_public_task
    from hierfl.models import TorchModelConfig

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 6)).astype(np.float32), rng.integers(0, 3, 40)
    spec = TrainSpec(epochs=1, batch_size=8, lr=0.1, method=PublicTask("pretrain", (0, 40), 40))
    out = {}
    for drop in (0.5, 0.0):
        cfg = TorchModelConfig.model_validate({**BN_DROP, "kwargs": {"hidden": 8, "dropout": drop}})
        trainer, params = LocalTrainer(cfg, (6,), 3), init_params(cfg, (6,), 3, 1)
        runs = []
        for global_seed in (0, 1):
            torch.manual_seed(global_seed)
            state = torch.get_rng_state()
            runs.append(run_public_task(trainer, params, x, y, spec, 7, None)[0])
            assert torch.equal(torch.get_rng_state(), state)
        assert runs[0].tobytes() == runs[1].tobytes()
        out[drop] = runs[0]
    assert out[0.5].shape == out[0.0].shape and np.abs(out[0.5] - out[0.0]).max() > 1e-4
