"""FCCL's device jobs on a host's state, against hand calculations on a logistic regression.

Logistic regression with 2 features and 3 classes: parameters W (3×2) then b (3); the logits of x are W·x + b.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hierfl.methods.fccl.math import FCCLJob, batch_positions, own_target
from hierfl.core.work import TrainSpec
from hierfl.learn.distill import cross_correlation_loss
from hierfl.methods.fccl.trainer import FCCLWork
from hierfl.learn.local import LocalTrainer
from hierfl.models import LogRegConfig
from hierfl.runtime.device_state import DeviceState

# rows 0..1: the device's private samples; rows 2..5: the public split
X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 2.0], [0.0, -1.0], [2.0, 1.0], [-1.0, 0.5]], dtype=np.float32)
Y = np.array([0, 1, 0, 0, 0, 0])
PRIVATE = np.array([0, 1])


def _work():
    states = DeviceState()
    return LocalTrainer(LogRegConfig(), (2,), 3), states, FCCLWork(states, X, Y)


def _bias(b):
    return np.array([0, 0, 0, 0, 0, 0, *b], dtype=np.float32)


def test_local_phase_distils_from_the_snapshot_and_the_pretrained_model():
    """From zero parameters the student is uniform and its cross-entropy ln 3. A teacher with bias (ln 3, 0, 0)
    gives q = (3/5, 1/5, 1/5) on every sample: KL(q ‖ uniform) = 0.6·ln 1.8 + 0.4·ln 0.6. The loss of the job's
    single step (full batch, 1 epoch) is the loss at the start."""
    trainer, states, work = _work()
    kl = 0.6 * math.log(1.8) + 0.4 * math.log(0.6)
    teacher = _bias([math.log(3.0), 0.0, 0.0])
    zero = np.zeros(9, dtype=np.float32)
    spec = TrainSpec(epochs=1, batch_size=2, method=FCCLJob("local", lr=0.1))
    states.put(0, fccl_star=teacher, fccl_prev=teacher)  # both teachers: CE + KL + KL
    _, stats = work.run(trainer, 0, PRIVATE, spec, 1, zero, None)
    assert stats["loss"] == pytest.approx(math.log(3.0) + 2 * kl, rel=1e-5)
    # its result is the next round's snapshot; the pre-trained model stays
    assert not np.array_equal(states[0]["fccl_prev"], teacher)
    assert np.array_equal(states[0]["fccl_star"], teacher)
    states.put(0, fccl_star=teacher, fccl_prev=zero)  # the snapshot is the student itself: one KL term
    assert work.run(trainer, 0, PRIVATE, spec, 1, zero, None)[1]["loss"] == pytest.approx(math.log(3) + kl, rel=1e-5)
    states.put(0, fccl_star=teacher, fccl_prev=teacher)
    half = TrainSpec(epochs=1, batch_size=2, method=FCCLJob("local", lr=0.1, lambda_loc=0.5))
    assert work.run(trainer, 0, PRIVATE, half, 1, zero, None)[1]["loss"] == pytest.approx(math.log(3) + kl, rel=1e-5)
    # inter_teacher collaborated: the inter-domain teacher is the model the job starts from (zero), not the snapshot
    states.put(0, fccl_star=teacher, fccl_prev=teacher)
    collab = TrainSpec(epochs=1, batch_size=2, method=FCCLJob("local", lr=0.1, inter_teacher="collaborated"))
    assert work.run(trainer, 0, PRIVATE, collab, 1, zero, None)[1]["loss"] == pytest.approx(math.log(3) + kl, rel=1e-5)


def test_pretraining_keeps_both_frozen_models():
    trainer, states, work = _work()
    spec = TrainSpec(epochs=2, batch_size=1, method=FCCLJob("pretrain", init_seed=5))
    result, stats = work.run(trainer, 3, PRIVATE, spec, 1, np.full(9, 7.0, dtype=np.float32), None)
    assert stats["steps"] == 4.0
    assert np.array_equal(states[3]["fccl_star"], result) and np.array_equal(states[3]["fccl_prev"], result)
    again, _ = work.run(trainer, 3, PRIVATE, spec, 1, np.zeros(9, dtype=np.float32), None)
    assert np.array_equal(again, result)  # from its own seeded initialisation, not the parameters it is given
    assert states.nbytes() == (1, 2 * 9 * 4)


def test_logits_then_one_fresh_adam_step_toward_the_target():
    """Public batch = rows 2..5 (one batch of 4), K = 2 parties. The logits job uploads Z_k and keeps the
    snapshot's logits as its own entry; the collaboration step's target is mean + (Z_snap − Z_k)/2, and a fresh
    Adam's first step moves every parameter by lr·g/(|g| + ε), i.e. by −lr·sign(g)."""
    trainer, states, work = _work()
    params = np.array([0.5, -0.2, 0.1, 0.3, -0.4, 0.2, 0.0, 0.1, -0.1], dtype=np.float32)
    snap = np.array([0.1, 0.2, -0.3, 0.4, 0.2, -0.1, 0.3, 0.0, 0.0], dtype=np.float32)
    states.put(0, fccl_prev=snap)
    base = FCCLJob("logits", rows=(2, 6), subset_size=4, subset_seed=9, batch_size=4, batch=0, parties=2, lr=0.01)
    z, _ = work.run(trainer, 0, PRIVATE, TrainSpec(method=base), 1, params, None)
    w, b = params[:6].reshape(3, 2), params[6:]
    # the batch: the 4 public rows in the round's seeded order (both ends derive it, batch_positions)
    order = (2 + batch_positions(base, 4)[0]).tolist()
    assert sorted(order) == [2, 3, 4, 5]
    z = z.reshape(4, 3)
    assert np.allclose(z, np.stack([w @ X[r] + b for r in order]), atol=1e-6)
    ws, bs = snap[:6].reshape(3, 2), snap[6:]
    z_snap = np.stack([ws @ X[r] + bs for r in order]).astype(np.float32)
    assert np.allclose(states[0]["fccl_self"].reshape(4, 3), z_snap, atol=1e-6)
    mean = (z + 1.0).astype(np.float32)  # what the server sends back
    target = own_target(mean, z, z_snap, 2)
    assert np.allclose(target, z + 1.0 + (z_snap - z) / 2, atol=1e-6)
    # the expected step: autograd of the hand-checked loss at the start, then −lr·sign(g)
    theta = torch.tensor(params, requires_grad=True)
    xb = torch.from_numpy(X[order])
    out = xb @ theta[:6].reshape(3, 2).T + theta[6:]
    cross_correlation_loss(out, torch.from_numpy(target), 0.0051).backward()
    g = theta.grad.numpy()
    new, stats = work.run(trainer, 0, PRIVATE, TrainSpec(method=FCCLJob(**{**base.__dict__, "kind": "collab"})), 1,
                          params, mean.reshape(-1))
    assert stats["steps"] == 1.0
    assert np.allclose(new, params - 0.01 * g / (np.abs(g) + 1e-8), atol=1e-6)


def test_missing_state_is_a_clear_error():
    trainer, _, work = _work()
    with pytest.raises(ValueError, match="fccl_star is missing"):
        work.run(trainer, 0, PRIVATE, TrainSpec(method=FCCLJob("local")), 1, np.zeros(9, dtype=np.float32), None)


def test_per_round_current_target_uses_the_live_output():
    """exchange per_round, self_target current: the own entry is the model's output on the batch as it is now
    (detached), so the target is mean + (Z_now − Z_uploaded)/K. With an upload 0.5 above the live logits and
    K = 2, the target is the mean − 0.25."""
    trainer, states, work = _work()
    params = np.array([0.5, -0.2, 0.1, 0.3, -0.4, 0.2, 0.0, 0.1, -0.1], dtype=np.float32)
    job = FCCLJob("collab", rows=(2, 6), subset_size=4, subset_seed=9, batch_size=4, per_batch=False,
                  self_target="current", parties=2, lr=0.01)
    order = (2 + batch_positions(job, 4)[0]).tolist()
    w, b = params[:6].reshape(3, 2), params[6:]
    z = np.stack([w @ X[r] + b for r in order]).astype(np.float32)
    states.put(0, fccl_z=(z + 0.5).reshape(-1), fccl_self=np.zeros(12, dtype=np.float32))
    mean = (z * 0.5 + 1.0).astype(np.float32)
    theta = torch.tensor(params, requires_grad=True)
    out = torch.from_numpy(X[order]) @ theta[:6].reshape(3, 2).T + theta[6:]
    cross_correlation_loss(out, torch.from_numpy(mean - 0.25), 0.0051).backward()
    g = theta.grad.numpy()
    new, _ = work.run(trainer, 0, PRIVATE, TrainSpec(method=job), 1, params, mean.reshape(-1))
    assert np.allclose(new, params - 0.01 * g / (np.abs(g) + 1e-8), atol=1e-6)
