"""The ``digits`` dataset (scikit-learn's 8x8 handwritten digits, shipped offline) and its scenarios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import skip_unless_installed

skip_unless_installed("sklearn")

from hierfl.data import DATASETS, DigitsConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _build(seed: int, **knobs) -> object:
    return DigitsConfig(**knobs).build(4, np.random.default_rng(seed))


def test_digits_build_shapes_dtypes_and_split() -> None:
    assert DATASETS.get("digits") is DigitsConfig
    ds = _build(0)
    assert ds.name == "digits" and ds.input_shape == (1, 8, 8) and ds.num_classes == 10
    assert ds.x_train.shape == (1797 - 359, 64) and ds.x_test.shape == (359, 64)
    assert ds.x_train.dtype == ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    x = np.concatenate([ds.x_train, ds.x_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    assert x.min() == 0.0 and x.max() == 1.0 and np.array_equal(x * 16, np.round(x * 16))  # pixel / 16
    assert y.min() == 0 and y.max() == 9 and len(np.unique(ds.y_test)) == 10
    # Train and test together are the whole set, each image once.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    assert np.array_equal(np.bincount(y), np.bincount(bunch.target))
    rows = {r.tobytes() + bytes([int(t)]) for r, t in zip((bunch.data / 16).astype(np.float32), bunch.target)}
    ours = [r.tobytes() + bytes([int(t)]) for r, t in zip(x, y)]
    assert set(ours) <= rows
    half = _build(0, test_fraction=0.5)
    assert len(half.y_test) == round(0.5 * 1797) and len(half.y_train) + len(half.y_test) == 1797


def test_digits_split_is_seeded() -> None:
    a, b, c = _build(3), _build(3), _build(4)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.y_test, c.y_test) or not np.array_equal(a.x_test, c.x_test)


def test_digits_config_knobs() -> None:
    from pydantic import ValidationError

    assert DigitsConfig().test_fraction == 0.2
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValidationError):
            DigitsConfig(test_fraction=bad)


@pytest.mark.parametrize("model", [{"name": "cnn"}, {"name": "cnn", "channels": [8, 16], "hidden": 64},
                                   {"name": "mlp"}, {"name": "mlp", "hidden": [64]}])
def test_models_forward_on_digits(model) -> None:
    import torch
    from pydantic import TypeAdapter

    from hierfl.models import MODELS

    ds = _build(1)
    cfg = TypeAdapter(MODELS.union()).validate_python(model)
    assert cfg.check_input(ds.input_shape) is None
    net = cfg.build(ds.input_shape, ds.num_classes, seed=0)
    out = net(torch.from_numpy(ds.x_test[:7]))
    assert out.shape == (7, 10) and torch.isfinite(out).all()


@pytest.mark.slow  # two shipped-scenario runs (seconds): make test runs them, make test-fast leaves them out
@pytest.mark.parametrize("stem", ["digits_mlp", "digits_cnn"])
def test_digits_scenario_learns_in_two_rounds(stem, tmp_path) -> None:
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(ROOT / "scenarios" / f"{stem}.yaml",
                       ["runtime.executor=local", "stop.rounds=2", "evaluation.every_s=null"])
    assert sc.data.dataset.name == "digits"
    summary = run_scenario(sc, tmp_path).summary
    assert summary["status"] == "completed" and summary["rounds"] == 2
    assert summary["final_accuracy"] > 0.3  # chance is 0.1
