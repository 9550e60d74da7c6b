"""Local SGD trainer: hand-computed steps, data order, step counts, determinism, read-only input."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from hierfl.learn import (
    LocalTrainer,
    TrainSpec,
    effective_batch,
    init_params,
    num_steps,
    samples_processed,
)
from hierfl.models import CNNConfig, LogRegConfig, MLPConfig

D, C = 3, 3  # tiny logistic regression: 3 features, 3 classes


def _tiny_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.array([[1.0, 0.5, -1.0], [0.0, 2.0, 1.0], [-1.5, 0.3, 0.2], [0.7, -0.4, 1.1], [0.2, 0.1, -0.3]], dtype=np.float32)
    y = np.array([0, 2, 1, 2, 0])
    theta = np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.4, 0.2, 0.2, -0.1, 0.05, -0.05, 0.1], dtype=np.float32)
    return x, y, theta


def _loss_grad(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy of logreg (layout: W (C, D) row-major, then b) and its gradient."""
    theta = theta.astype(np.float64)
    x = x.astype(np.float64)
    w, b = theta[: C * D].reshape(C, D), theta[C * D :]
    z = x @ w.T + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y]).mean())
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return loss, np.concatenate([(p.T @ x).ravel(), p.sum(axis=0)])


@pytest.fixture(scope="module")
def logreg() -> LocalTrainer:
    return LocalTrainer(LogRegConfig(), (D,), C)


# -- step counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "spec", "b", "k", "s"),
    [
        (100, TrainSpec(epochs=2, batch_size=32), 32, 8, 200),  # 4 batches per epoch, last partial
        (100, TrainSpec(epochs=None, steps=5, batch_size=32), 32, 5, 160),
        (50, TrainSpec(epochs=3, batch_size=None), 50, 3, 150),  # full batch
        (50, TrainSpec(epochs=None, steps=4, batch_size=None), 50, 4, 200),
        (10, TrainSpec(epochs=1, batch_size=32), 10, 1, 10),  # n < batch
        (10, TrainSpec(epochs=None, steps=3, batch_size=32), 10, 3, 30),
        (7, TrainSpec(epochs=1, batch_size=2), 2, 4, 7),
    ],
)
def test_step_and_sample_counts(n: int, spec: TrainSpec, b: int, k: int, s: int) -> None:
    assert effective_batch(n, spec) == b
    assert num_steps(n, spec) == k
    assert samples_processed(n, spec) == s
    # The trainer does exactly that much work.
    trainer = LocalTrainer(LogRegConfig(), (2,), 2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    y = rng.integers(0, 2, n)
    _, stats = trainer.train(init_params(LogRegConfig(), (2,), 2, 0), x, y, spec, seed=1)
    assert stats["steps"] == k
    assert stats["samples"] == s


def test_trainspec_validation() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TrainSpec(epochs=1, steps=1)
    with pytest.raises(ValueError, match="exactly one"):
        TrainSpec(epochs=None, steps=None)
    with pytest.raises(ValueError, match="batch_size"):
        TrainSpec(batch_size=0)
    with pytest.raises(ValueError, match="lr"):
        TrainSpec(lr=-0.1)
    with pytest.raises(ValueError, match="at least one sample"):
        effective_batch(0, TrainSpec())


# -- hand-computed SGD ---------------------------------------------------------------------


def test_single_sgd_step_matches_hand_gradient(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    spec = TrainSpec(epochs=1, batch_size=None, lr=0.5)
    new, stats = logreg.train(theta, x, y, spec, seed=0)
    loss, g = _loss_grad(theta, x, y)
    np.testing.assert_allclose(new, theta - 0.5 * g, rtol=0, atol=1e-6)
    assert abs(stats["loss"] - loss) < 1e-6
    assert stats["steps"] == 1 and stats["samples"] == 5
    assert new.dtype == np.float32 and new.flags.c_contiguous and new.flags.writeable
    assert not np.array_equal(new, theta)


def test_momentum_two_steps_match_hand(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    spec = TrainSpec(epochs=None, steps=2, batch_size=None, lr=0.3, momentum=0.9)
    new, stats = logreg.train(theta, x, y, spec, seed=0)
    l1, g1 = _loss_grad(theta, x, y)
    buf = g1  # torch SGD: first momentum buffer is the gradient itself
    t1 = theta - 0.3 * buf
    l2, g2 = _loss_grad(t1, x, y)
    buf = 0.9 * buf + g2
    t2 = t1 - 0.3 * buf
    np.testing.assert_allclose(new, t2, rtol=0, atol=1e-6)
    assert abs(stats["loss"] - (l1 + l2) / 2) < 1e-6


def test_weight_decay_matches_closed_form(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    spec = TrainSpec(epochs=1, batch_size=None, lr=0.5, weight_decay=0.1)
    new, _ = logreg.train(theta, x, y, spec, seed=0)
    _, g = _loss_grad(theta, x, y)
    np.testing.assert_allclose(new, theta - 0.5 * (g + 0.1 * theta), rtol=0, atol=1e-6)
    # With momentum and decay over three steps.
    spec3 = TrainSpec(epochs=None, steps=3, batch_size=None, lr=0.2, momentum=0.5, weight_decay=0.05)
    new3, _ = logreg.train(theta, x, y, spec3, seed=0)
    t = theta.astype(np.float64)
    buf = None
    for _ in range(3):
        d_p = _loss_grad(t, x, y)[1] + 0.05 * t
        buf = d_p if buf is None else 0.5 * buf + d_p
        t = t - 0.2 * buf
    np.testing.assert_allclose(new3, t, rtol=0, atol=1e-6)


def test_epoch_data_order_is_rng_permutation(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    spec = TrainSpec(epochs=2, batch_size=2, lr=0.4)
    new, stats = logreg.train(theta, x, y, spec, seed=7)
    rng = np.random.default_rng(7)
    t = theta.astype(np.float64)
    losses = []
    for _ in range(2):
        perm = rng.permutation(5)
        for batch in (perm[0:2], perm[2:4], perm[4:5]):  # last batch partial
            loss, g = _loss_grad(t, x[batch], y[batch])
            losses.append(loss)
            t = t - 0.4 * g
    np.testing.assert_allclose(new, t, rtol=0, atol=1e-6)
    assert stats["steps"] == 6 and stats["samples"] == 10
    assert abs(stats["loss"] - float(np.mean(losses))) < 1e-6


def test_step_mode_chunks_cross_epoch_boundaries(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    spec = TrainSpec(epochs=None, steps=4, batch_size=3, lr=0.4)
    new, stats = logreg.train(theta, x, y, spec, seed=3)
    rng = np.random.default_rng(3)
    stream = np.concatenate([rng.permutation(5) for _ in range(3)])  # 12 samples needed
    t = theta.astype(np.float64)
    for i in range(4):
        t = t - 0.4 * _loss_grad(t, x[stream[3 * i : 3 * i + 3]], y[stream[3 * i : 3 * i + 3]])[1]
    np.testing.assert_allclose(new, t, rtol=0, atol=1e-6)
    assert stats["samples"] == 12


def test_evaluate_matches_hand(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    acc, loss = logreg.evaluate(theta, x, y, batch_size=2)  # several batches
    w, b = theta[: C * D].reshape(C, D).astype(np.float64), theta[C * D :]
    pred = (x @ w.T + b).argmax(axis=1)
    assert acc == pytest.approx(float((pred == y).mean()), abs=0)
    assert loss == pytest.approx(_loss_grad(theta, x, y)[0], abs=1e-6)


def test_bad_shapes_raise(logreg: LocalTrainer) -> None:
    x, y, theta = _tiny_data()
    with pytest.raises(ValueError, match="parameter vector"):
        logreg.train(theta[:-1], x, y, TrainSpec(), seed=0)
    with pytest.raises(ValueError, match="labels"):
        logreg.train(theta, x, y[:-1], TrainSpec(), seed=0)
    with pytest.raises(ValueError, match="features"):
        logreg.train(theta, x[:, :2], y, TrainSpec(), seed=0)


# -- determinism and read-only input -------------------------------------------------------


def _mlp_problem(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    x = rng.standard_normal((n, 10)).astype(np.float32)
    y = rng.integers(0, 4, n)
    return x, y


def test_training_is_deterministic() -> None:
    cfg = MLPConfig(hidden=[16, 8])
    x, y = _mlp_problem()
    p0 = init_params(cfg, (10,), 4, seed=1)
    spec = TrainSpec(epochs=2, batch_size=8, lr=0.1, momentum=0.9)
    trainer = LocalTrainer(cfg, (10,), 4)
    np_state = np.random.get_state()[1].copy()
    a, sa = trainer.train(p0, x, y, spec, seed=9)
    b, sb = trainer.train(p0, x, y, spec, seed=9)
    c, _ = trainer.train(p0, x, y, spec, seed=10)
    d, sd = LocalTrainer(cfg, (10,), 4).train(p0, x, y, spec, seed=9)
    assert np.array_equal(a, b) and sa == sb
    assert np.array_equal(a, d) and sa == sd
    assert not np.array_equal(a, c)
    assert np.array_equal(np_state, np.random.get_state()[1])  # global numpy RNG untouched


def test_training_identical_in_another_process() -> None:
    code = (
        "import sys, numpy as np\n"
        "from hierfl.models import MLPConfig\n"
        "from hierfl.learn import LocalTrainer, TrainSpec, init_params\n"
        "rng = np.random.default_rng(42)\n"
        "x = rng.standard_normal((64, 10)).astype(np.float32); y = rng.integers(0, 4, 64)\n"
        "cfg = MLPConfig(hidden=[16, 8])\n"
        "p = init_params(cfg, (10,), 4, seed=1)\n"
        "v, _ = LocalTrainer(cfg, (10,), 4).train(p, x, y, TrainSpec(epochs=2, batch_size=8, lr=0.1, momentum=0.9), seed=9)\n"
        "sys.stdout.write(v.tobytes().hex())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cfg = MLPConfig(hidden=[16, 8])
    x, y = _mlp_problem()
    here, _ = LocalTrainer(cfg, (10,), 4).train(
        init_params(cfg, (10,), 4, seed=1), x, y, TrainSpec(epochs=2, batch_size=8, lr=0.1, momentum=0.9), seed=9
    )
    assert out.stdout == here.tobytes().hex()


def test_read_only_inputs_train_without_warnings() -> None:
    cfg = MLPConfig(hidden=[16])
    x, y = _mlp_problem()
    p0 = init_params(cfg, (10,), 4, seed=2)
    ref, _ = LocalTrainer(cfg, (10,), 4).train(p0, x, y, TrainSpec(steps=5, epochs=None, batch_size=8), seed=1)
    x_ro, y_ro, p_ro = x.copy(), y.copy(), p0.copy()
    for arr in (x_ro, y_ro, p_ro):
        arr.setflags(write=False)
    trainer = LocalTrainer(cfg, (10,), 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new, _ = trainer.train(p_ro, x_ro, y_ro, TrainSpec(steps=5, epochs=None, batch_size=8), seed=1)
        trainer.evaluate(new, x_ro, y_ro)
    assert np.array_equal(new, ref)
    assert np.array_equal(p_ro, p0) and np.array_equal(x_ro, x) and np.array_equal(y_ro, y)
    new[0] += 1.0  # the result is the caller's own writable copy


def test_returned_vector_does_not_alias_trainer_state() -> None:
    cfg = LogRegConfig()
    x, y, theta = _tiny_data()
    trainer = LocalTrainer(cfg, (D,), C)
    first, _ = trainer.train(theta, x, y, TrainSpec(epochs=1, batch_size=None, lr=0.5), seed=0)
    kept = first.copy()
    trainer.train(theta, x, y, TrainSpec(epochs=3, batch_size=None, lr=0.5), seed=0)
    assert np.array_equal(first, kept)


# -- learning ------------------------------------------------------------------------------


def test_mlp_learns_separable_problem() -> None:
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((4, 20)) * 3.0
    y = rng.integers(0, 4, 400)
    x = (centers[y] + rng.standard_normal((400, 20))).astype(np.float32)
    cfg = MLPConfig(hidden=[32, 32])
    trainer = LocalTrainer(cfg, (20,), 4)
    p0 = init_params(cfg, (20,), 4, seed=0)
    acc0, loss0 = trainer.evaluate(p0, x, y)
    p, stats = trainer.train(p0, x, y, TrainSpec(epochs=5, batch_size=16, lr=0.05, momentum=0.9), seed=0)
    acc, loss = trainer.evaluate(p, x, y)
    assert loss < 0.5 * loss0
    assert acc > 0.9
    assert stats["loss"] < loss0


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_cnn_trains(shape: tuple[int, int, int]) -> None:
    cfg = CNNConfig(channels=[4, 8], hidden=16)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, int(np.prod(shape)))).astype(np.float32)
    y = rng.integers(0, 10, 6)
    trainer = LocalTrainer(cfg, shape, 10)
    p0 = init_params(cfg, shape, 10, seed=3)
    p, stats = trainer.train(p0, x, y, TrainSpec(epochs=None, steps=2, batch_size=4, lr=0.05), seed=0)
    assert p.shape == (trainer.num_params,) and np.isfinite(p).all()
    assert not np.array_equal(p, p0)
    assert stats["steps"] == 2 and stats["samples"] == 8
    # (n, C, H, W) samples are accepted too and give the same result.
    p_shaped, _ = trainer.train(p0, x.reshape(6, *shape), y, TrainSpec(epochs=None, steps=2, batch_size=4, lr=0.05), seed=0)
    assert np.array_equal(p, p_shaped)
    acc, loss = trainer.evaluate(p, x, y)
    assert 0.0 <= acc <= 1.0 and np.isfinite(loss)
