"""RHFL's device jobs against hand calculations: probabilities, the alignment step, SCE training with its
loss report, the public batch windows, and what each job costs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierfl.methods.rhfl.math import SCESpec
from hierfl.core.work import PublicTask, TrainSpec, work_samples
from hierfl.learn.local import LocalTrainer
from hierfl.learn.outputs import run_public_task, subset_rows
from hierfl.methods.rhfl.trainer import private_sce_loss, train_sce
from hierfl.models import LogRegConfig

A = math.log(1e-4)
X = np.array([[9.0, 9.0], [1.0, 2.0]], dtype=np.float32)  # row 1 is the sample the jobs use
Y = np.array([2, 0])


def _trainer():
    return LocalTrainer(LogRegConfig(), (2,), 3)


def test_probs_are_the_softmax_of_the_logits():
    params = np.arange(1, 10, dtype=np.float32) / 10  # logits at (1, 2): (1.2, 1.9, 2.6)
    spec = TrainSpec(epochs=1, method=PublicTask("probs", (1, 2), 1))
    probs, _ = run_public_task(_trainer(), params, X, Y, spec, 0, None)
    e = [math.exp(z) for z in (1.2, 1.9, 2.6)]
    assert probs.tolist() == pytest.approx([v / sum(e) for v in e], rel=1e-6)


def test_the_alignment_step_follows_the_weighted_kl_gradient():
    """From zero parameters p_k = (⅓, ⅓, ⅓); the target q = Σ_{j≠k} W_j p_j = (½, ¼, 0) has mass 3/4, so the
    gradient in the logits is ¾·p_k − q = (−¼, 0, ¼) and one SGD step of lr 0.4 at x = (1, 2) gives
    W = 0.1·[(1, 2), (0, 0), (−1, −2)], b = (0.1, 0, −0.1); the loss reported, −Σ q log p_k = ¾ ln 3."""
    task = PublicTask("align", (1, 2), 1, loss="soft_ce", teacher_is_prob=True, reuse_forward=True)
    spec = TrainSpec(epochs=1, batch_size=None, lr=0.4, method=task)
    new, stats = run_public_task(_trainer(), np.zeros(9, dtype=np.float32), X, Y, spec, 0,
                                 np.array([0.5, 0.25, 0.0], dtype=np.float32))
    assert new.tolist() == pytest.approx([0.1, 0.2, 0.0, 0.0, -0.1, -0.2, 0.1, 0.0, -0.1], abs=1e-7)
    assert stats["loss"] == pytest.approx(0.75 * math.log(3.0), rel=1e-6)


def test_sce_training_step_and_its_loss_report():
    """One SCE step (a = 0.1, b = 1) from zero parameters on x = (1, 2), label 0: p = (⅓, ⅓, ⅓); the CE
    gradient in z is p − e_0 = (−⅔, ⅓, ⅓), the RCE's (RCE = −A(1 − p_0)) is A·p_0(e_0 − p) = A·(2/9, −1/9, −1/9)."""
    trainer = _trainer()
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    y = np.array([0])
    spec = TrainSpec(epochs=1, batch_size=1, lr=0.1, method=SCESpec(0.1, 1.0))
    new, stats = train_sce(trainer, np.zeros(9, dtype=np.float32), x, y, np.array([0]), spec, 0)
    g = [0.1 * c + A * r for c, r in zip((-2 / 3, 1 / 3, 1 / 3), (2 / 9, -1 / 9, -1 / 9))]
    expected = [-0.1 * gc * xi for gc in g for xi in (1.0, 2.0)] + [-0.1 * gc for gc in g]
    assert new.tolist() == pytest.approx(expected, abs=1e-6)
    assert stats["loss"] == pytest.approx(0.1 * math.log(3.0) - A * 2 / 3, rel=1e-6)  # before the step
    # the report: the mean SCE of the *final* model on the device's samples
    assert stats["ccr_loss"] == pytest.approx(private_sce_loss(trainer, new, x, y, np.array([0]), 0.1, 1.0, None))
    z = [sum(w * xi for w, xi in zip(new[2 * c: 2 * c + 2], (1.0, 2.0))) + new[6 + c] for c in range(3)]
    p0 = math.exp(z[0]) / sum(math.exp(v) for v in z)
    assert stats["ccr_loss"] == pytest.approx(0.1 * -math.log(p0) - A * (1 - p0), rel=1e-5)
    # no report asked: no statistic; init_seed: a fresh start, whatever the parameters given
    plain = TrainSpec(epochs=1, batch_size=1, lr=0.1, method=SCESpec(0.1, 1.0, report=False, init_seed=5))
    a, st = train_sce(trainer, np.zeros(9, dtype=np.float32), x, y, np.array([0]), plain, 0)
    b, _ = train_sce(trainer, np.ones(9, dtype=np.float32), x, y, np.array([0]), plain, 0)
    assert "ccr_loss" not in st and a.tolist() == b.tolist()


def test_batch_windows_partition_the_round_subset():
    y = np.zeros(12, dtype=np.int64)
    whole = PublicTask("probs", (2, 12), 10, subset_seed=7, stratified=False)
    parts = [PublicTask("probs", (2, 12), 10, subset_seed=7, stratified=False, window=w) for w in ((0, 4), (4, 8),
                                                                                                   (8, 10))]
    rows = [subset_rows(t, y) for t in parts]
    assert [r.size for r in rows] == [4, 4, 2]
    assert sorted(np.concatenate(rows).tolist()) == subset_rows(whole, y).tolist() == list(range(2, 12))
    assert np.concatenate(rows).tolist() != list(range(2, 12))  # shuffled by the seed
    with pytest.raises(ValueError, match="window"):
        PublicTask("probs", (2, 12), 10, window=(8, 11))


def test_what_each_job_costs():
    # in training-sample equivalents (3 forward passes each): probabilities on 30 samples, 1 pass each → 10;
    # an alignment step reusing its forward, 2 passes → 20; without reuse, 3 → 30
    probs = TrainSpec(epochs=1, batch_size=None, method=PublicTask("probs", (0, 60), 60, window=(0, 30)))
    assert work_samples(0, probs) == 10.0
    step = PublicTask("align", (0, 60), 60, window=(0, 30), reuse_forward=True)
    assert work_samples(0, TrainSpec(epochs=1, batch_size=None, method=step)) == 20.0
    epoch = PublicTask("align", (0, 60), 60)
    assert work_samples(0, TrainSpec(epochs=1, batch_size=30, method=epoch)) == 60.0
    # SCE training: 2 epochs on 60 samples + the CCR pass over the 60 (one forward each, 20)
    assert work_samples(60, TrainSpec(epochs=2, method=SCESpec(0.1, 1.0))) == 140.0
    assert work_samples(60, TrainSpec(epochs=2, method=SCESpec(0.1, 1.0, report=False))) == 120.0


def test_the_confidence_report_is_always_the_codes_sce():
    """A plain-CE local loss (a = 1, b = 0) still reports the SCE of a = 0.1, b = 1.0 (the code's check loss)."""
    trainer = _trainer()
    params = np.arange(1, 10, dtype=np.float32) / 10
    rows = np.array([0, 1])
    spec = TrainSpec(epochs=1, batch_size=1, lr=0.1, method=SCESpec(1.0, 0.0))
    new, stats = train_sce(trainer, params, X, Y, rows, spec, 0)
    sce = private_sce_loss(trainer, new, X, Y, rows, 0.1, 1.0, None)
    ce = private_sce_loss(trainer, new, X, Y, rows, 1.0, 0.0, None)
    assert abs(sce - ce) > 1e-3  # (the two measures differ here)
    assert stats["ccr_loss"] == pytest.approx(sce, rel=1e-6)
