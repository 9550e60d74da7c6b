"""FedFTG's generator, losses and fine-tuning job against hand calculations on tiny tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hierfl.learn.distill import kd_loss
from hierfl.methods.fedftg.trainer import (
    FTGSettings,
    build_generator,
    class_loss,
    diversity_loss,
    finetune,
    generator_flops,
    hardness_loss,
    student_loss,
)
from hierfl.models import CNNConfig, LogRegConfig

S = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
T = torch.tensor([[0.0, 1.0, 0.5], [1.0, 1.0, -2.0]])
LN3 = math.log(3.0)


def test_kd_loss_takes_per_sample_weights():
    # |diffs| (1, 3, 0) and (1, 1, 2): MAE 4/3 each; weights (0.5, 0.25) → mean (2/3, 1/3) = 1/2
    w = torch.tensor([0.5, 0.25])
    assert kd_loss(S, T, kind="mae_logits", weights=w).item() == pytest.approx(0.5)
    assert kd_loss(S, T, kind="mae_logits", weights=w, reduction="none").tolist() == pytest.approx([2 / 3, 1 / 3])
    with pytest.raises(ValueError, match="per-sample weights"):
        kd_loss(S, T, kind="mae_logits", weights=torch.ones(3))


def test_hardness_term_is_the_negated_weighted_discrepancy():
    w = torch.tensor([0.5, 0.25])
    assert hardness_loss(S, T, w, "code").item() == pytest.approx(-0.5)
    # the paper's KL: one sample, student (0, 0), teacher (ln 3, 0), weight 1/2: −½·(¾ ln 3/2 + ¼ ln ½)
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    got = hardness_loss(torch.zeros(1, 2), torch.tensor([[LN3, 0.0]]), torch.tensor([0.5]), "kl").item()
    assert got == pytest.approx(-0.5 * kl, rel=1e-6)
    # the teacher is detached: the gradient flows through the student only
    s = S.clone().requires_grad_(True)
    t = T.clone().requires_grad_(True)
    hardness_loss(s, t, w, "code").backward()
    assert t.grad is None
    # ∂/∂s of −mean_b w_b·mean_c |s − t| = −w_b·sign(s − t)/(C·B): sample 0 signs (+, −, 0)
    assert s.grad[0].tolist() == pytest.approx([-0.5 / 6, 0.5 / 6, 0.0])


def test_class_term_code_weights_the_batch_mean_per_sample_weights_each_sample():
    logits = torch.tensor([[LN3, 0.0], [0.0, 0.0]])  # p = (3/4, 1/4) and (1/2, 1/2)
    y = torch.tensor([0, 1])
    w = torch.tensor([1.0, 0.5])
    ce0, ce1 = -math.log(0.75), math.log(2.0)
    assert class_loss(logits, y, w, "code").item() == pytest.approx((ce0 + ce1) / 2 * 0.75, rel=1e-6)
    assert class_loss(logits, y, w, "per_sample").item() == pytest.approx((ce0 * 1.0 + ce1 * 0.5) / 2, rel=1e-6)


def test_diversity_term():
    # z = (0), (2): d_z over the 4 ordered pairs (0, 4, 4, 0); x = (0, 0), (1, 3): d_x (0, 2, 2, 0)
    # mean of products (0, 8, 8, 0) = 4 → exp(−4)
    z = torch.tensor([[0.0], [2.0]])
    x = torch.tensor([[0.0, 0.0], [1.0, 3.0]])
    assert diversity_loss(z, x).item() == pytest.approx(math.exp(-4.0), rel=1e-6)
    assert diversity_loss(z, torch.zeros(2, 2)).item() == pytest.approx(1.0)  # no diversity: the maximum


def test_student_loss_code_averages_over_classes_too():
    s = torch.zeros(1, 2)
    q = torch.tensor([[0.75, 0.25]])
    # soft cross-entropy to a uniform student is ln 2; the code's mean over (b, c) halves it
    assert student_loss(s, q, "code").item() == pytest.approx(math.log(2.0) / 2, rel=1e-6)
    assert student_loss(s, q, "kl").item() == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-6)


def test_generator_shapes_init_and_flops():
    # image input (1, 8, 8): the code's conv generator; flat input: its linear form
    g = build_generator(2, 3, (1, 8, 8), 2, seed=5)
    out = g(torch.zeros(4, 2), torch.eye(3)[[0, 1, 2, 0]])
    assert out.shape == (4, 64)
    again = build_generator(2, 3, (1, 8, 8), 2, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(g.parameters(), again.parameters()))
    other = build_generator(2, 3, (1, 8, 8), 2, seed=6)
    assert not all(torch.equal(a, b) for a, b in zip(g.parameters(), other.parameters()))
    # multiply-adds: l1 2·8, l2 3·8 (2·2 cells × width 2), conv 4→4 at 4×4: 64·4·9, conv 4→2 at 8×8: 128·4·9,
    # conv 2→1 at 8×8: 64·2·9 → 16 + 24 + 2304 + 4608 + 1152 = 8104, FLOPs twice that
    assert generator_flops(g, 2, 3) == 2 * 8104
    flat = build_generator(2, 3, (4,), 2, seed=0)
    assert flat(torch.zeros(3, 2), torch.eye(3)).shape == (3, 4)
    # l1 2·2, l2 3·2, 4·4, 4·2, 2·4 → 42 multiply-adds
    assert generator_flops(flat, 2, 3) == 84


def _logreg(bias: list[float], d: int = 64) -> np.ndarray:
    """A logistic regression with zero weights: its logits are ``bias`` whatever the input."""
    return np.concatenate([np.zeros(len(bias) * d, dtype=np.float32), np.asarray(bias, dtype=np.float32)])


@pytest.mark.parametrize("md_loss, grad", [("code", 0.125), ("kl", 0.25)])
def test_one_student_step_against_a_hand_calculation(md_loss, grad):
    # teacher logits (ln 3, 0) on every input → q = (3/4, 1/4)·a with a = n/(n + 1e-6); the student (0, 0)
    # → p = (½, ½). Bias gradient (Σq = a): code mean_{b,c} soft-CE: (a·p − q)/C ≈ (−1/8, 1/8);
    # KL: a·p − q ≈ (−¼, ¼); one SGD step at lr 0.1 from 0 gives −0.1 × that
    cfg = LogRegConfig()
    settings = FTGSettings(iters=1, gen_steps=1, student_steps=1, batch_size=4, noise_dim=3, gen_width=4,
                           lr_student=0.1, md_loss=md_loss)
    counts = np.array([[2, 2]])
    out, stats = finetune(cfg, (1, 8, 8), 2, _logreg([0.0, 0.0]), [_logreg([LN3, 0.0])], counts, settings, {},
                          np.random.default_rng(0))
    a = 2 / (2 + 1e-6)
    q = np.array([0.75, 0.25]) * a
    expected = 0.1 * (q - 0.5 * a) * (grad / 0.25)
    assert out[-2:].tolist() == pytest.approx(expected.tolist(), abs=1e-8)
    assert set(stats) == {"loss_md", "loss_cls", "loss_div", "loss_student"}


def test_a_student_that_agrees_with_its_teacher_stays():
    cfg = LogRegConfig()
    p = _logreg([LN3, 0.0])
    settings = FTGSettings(iters=2, batch_size=3, noise_dim=3, gen_width=4, md_loss="kl")
    out, _ = finetune(cfg, (1, 8, 8), 2, p, [p], np.array([[5, 1]]), settings, {}, np.random.default_rng(1))
    assert np.abs(out - p).max() < 1e-5


def test_generator_state_persists_and_a_resumed_job_is_identical():
    cfg = CNNConfig(channels=(2, 4), hidden=8)
    from hierfl.learn.local import init_params

    teachers = [init_params(cfg, (1, 8, 8), 10, s) for s in (1, 2)]
    counts = np.array([[3, 0, 1, 1, 1, 1, 1, 1, 1, 5], [0, 4, 1, 1, 1, 1, 1, 1, 5, 1]])
    settings = FTGSettings(iters=2, batch_size=6, noise_dim=4, gen_width=3, persist_gen_optimizer=True)
    state: dict[str, np.ndarray] = {}
    first, _ = finetune(cfg, (1, 8, 8), 10, teachers[0], teachers, counts, settings, state, np.random.default_rng(0))
    assert set(state) == {"gen_params", "gen_buffers", "gen_adam_m", "gen_adam_v", "gen_adam_step"}
    assert state["gen_adam_step"].tolist() == [4.0]  # 2 iterations × 1 step × 2 teachers
    saved = {k: v.copy() for k, v in state.items()}
    second, _ = finetune(cfg, (1, 8, 8), 10, first, teachers, counts, settings, state, np.random.default_rng(1))
    assert not np.array_equal(saved["gen_params"], state["gen_params"])
    # a resumed server: the stored arrays alone give the same bits
    resumed, _ = finetune(cfg, (1, 8, 8), 10, first, teachers, counts, settings, dict(saved), np.random.default_rng(1))
    assert np.array_equal(second, resumed)
    # without persisting Adam (the code: a fresh optimiser every round) no moments are stored
    plain: dict[str, np.ndarray] = {}
    finetune(cfg, (1, 8, 8), 10, teachers[0], teachers, counts, FTGSettings(iters=1, batch_size=4, noise_dim=4,
             gen_width=3), plain, np.random.default_rng(0))
    assert set(plain) == {"gen_params", "gen_buffers"}


def test_a_dropout_student_draws_its_masks_from_the_task_stream_not_torch_global_generator():
    # pfl's CNN has two dropouts: the student trains in training mode, so its masks must come from the task's
    # stream: the same stream gives the same bits whatever torch's global generator holds, and leaves it alone
    from hierfl.learn.local import init_params
    from hierfl.models import PflCNNConfig

    cfg = PflCNNConfig(hidden=8)
    teachers = [init_params(cfg, (1, 8, 8), 3, s) for s in (1, 2)]
    counts = np.array([[3, 0, 1], [0, 4, 1]])
    settings = FTGSettings(iters=1, batch_size=4, noise_dim=2, gen_width=2, student_steps=2)

    def once(global_seed: int, stream: int) -> np.ndarray:
        torch.manual_seed(global_seed)
        before = torch.random.get_rng_state()
        out, _ = finetune(cfg, (1, 8, 8), 3, teachers[0], teachers, counts, settings, {},
                          np.random.default_rng(stream))
        assert torch.equal(torch.random.get_rng_state(), before)  # the global generator was not read
        return out

    a = once(0, 5)
    assert np.array_equal(a, once(123, 5))
    assert not np.array_equal(a, once(0, 6))
    assert not np.array_equal(a, teachers[0])
