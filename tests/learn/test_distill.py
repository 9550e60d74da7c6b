"""Knowledge-distillation losses against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from hierfl.learn.distill import ensemble_target, kd_loss, soft_targets

# one sample, two classes: student logits (0, 0), teacher logits (ln 3, 0)
S = torch.tensor([[0.0, 0.0]])
TCH = torch.tensor([[math.log(3.0), 0.0]])


def test_soft_targets_temper_the_softmax():
    assert soft_targets(TCH, 1.0).tolist()[0] == pytest.approx([0.75, 0.25])
    # T = 2: exp(ln3/2) = √3 → (√3/(√3+1), 1/(√3+1))
    r3 = math.sqrt(3.0)
    assert soft_targets(TCH, 2.0).tolist()[0] == pytest.approx([r3 / (r3 + 1), 1 / (r3 + 1)])
    with pytest.raises(ValueError, match="T must be > 0"):
        soft_targets(TCH, 0.0)


def test_kl_is_hintons_t2_scaled_divergence():
    # T = 1: KL((3/4, 1/4) ‖ (1/2, 1/2)) = 3/4·ln(3/2) + 1/4·ln(1/2)
    kl1 = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert kd_loss(S, TCH, kind="kl", T=1.0).item() == pytest.approx(kl1, rel=1e-6)
    # T = 2: q = (√3, 1)/(√3+1), student uniform; × T² = 4 unless t2_scale is off
    r3 = math.sqrt(3.0)
    q = (r3 / (r3 + 1), 1 / (r3 + 1))
    kl2 = sum(qc * math.log(qc / 0.5) for qc in q)
    assert kd_loss(S, TCH, kind="kl", T=2.0).item() == pytest.approx(4 * kl2, rel=1e-6)
    assert kd_loss(S, TCH, kind="kl", T=2.0, t2_scale=False).item() == pytest.approx(kl2, rel=1e-6)
    assert kd_loss(TCH, TCH, kind="kl", T=3.0).item() == pytest.approx(0.0, abs=1e-7)


def test_soft_ce_and_the_logit_distances():
    # −(3/4·ln ½ + 1/4·ln ½) = ln 2
    assert kd_loss(S, TCH, kind="soft_ce", T=1.0).item() == pytest.approx(math.log(2.0), rel=1e-6)
    s = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    t = torch.tensor([[0.0, 1.0, 0.5], [1.0, 1.0, -2.0]])
    # |diffs|: (1, 3, 0) and (1, 1, 2): MAE per sample 4/3 and 4/3; L1 4 and 4; MSE 10/3 and 2
    assert kd_loss(s, t, kind="mae_logits").item() == pytest.approx(4 / 3)
    assert kd_loss(s, t, kind="l1_logits", reduction="none").tolist() == pytest.approx([4.0, 4.0])
    assert kd_loss(s, t, kind="mse_logits", reduction="none").tolist() == pytest.approx([10 / 3, 2.0])
    assert kd_loss(s, t, kind="mse_logits").item() == pytest.approx((10 / 3 + 2) / 2)


def test_gradient_of_the_soft_term_is_p_minus_q_over_t():
    """∂ CE(q, p^T(z_s)) / ∂z_s = (p^T(z_s) − q) / T (so the T² factor restores the scale)."""
    z = torch.tensor([[0.3, -0.1, 0.8]], requires_grad=True)
    teacher = torch.tensor([[1.0, 0.0, -1.0]])
    T = 4.0
    kd_loss(z, teacher, kind="soft_ce", T=T).backward()
    expected = (soft_targets(z.detach(), T) - soft_targets(teacher, T)) / T
    assert z.grad.tolist()[0] == pytest.approx(expected.tolist()[0], rel=1e-5)


def test_ensemble_targets_and_probability_teachers():
    a = torch.tensor([[math.log(3.0), 0.0]])   # p = (3/4, 1/4)
    b = torch.tensor([[0.0, 0.0]])             # p = (1/2, 1/2)
    assert ensemble_target([a, b], T=1.0).tolist()[0] == pytest.approx([0.625, 0.375])
    w = torch.tensor([0.25, 0.75])
    assert ensemble_target([a, b], w, T=1.0).tolist()[0] == pytest.approx([0.5625, 0.4375])
    q = ensemble_target([a, b], T=1.0)
    # soft CE against q = (5/8, 3/8) with a uniform student: ln 2
    assert kd_loss(S, q, kind="soft_ce", T=1.0, teacher_is_prob=True).item() == pytest.approx(math.log(2.0))
    # a probability teacher with a zero is clamped, not log(0)
    zero = torch.tensor([[1.0, 0.0]])
    assert math.isfinite(kd_loss(S, zero, kind="kl", T=1.0, teacher_is_prob=True).item())
    with pytest.raises(ValueError, match="sum to 1"):
        ensemble_target([a, b], torch.tensor([0.5, 0.6]), T=1.0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="allowed: kl, soft_ce"):
        kd_loss(S, TCH, kind="cosine", T=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch, classes"):
        kd_loss(S, TCH[0], kind="kl", T=1.0)
    with pytest.raises(ValueError, match="compares logits"):
        kd_loss(S, TCH, kind="mae_logits", teacher_is_prob=True)


def test_cross_correlation_loss_by_hand():
    """B = 2, C = 2. Student (1, 3), (3, 1): column means (2, 2), unbiased std √2, standardised rows
    (−a, a), (a, −a) with a = 1/√2. Target (0, 0), (2, 2): standardised (−a, −a), (a, a). M = Ẑ_sᵀ Ẑ_t / 2 =
    [[0.5, 0.5], [−0.5, −0.5]]: on-diagonal (1 − 0.5)² + (1 + 0.5)² = 2.5, off-diagonal (1 + 0.5)² + (1 − 0.5)² = 2.5."""
    from hierfl.learn.distill import cross_correlation_loss

    s = torch.tensor([[1.0, 3.0], [3.0, 1.0]], requires_grad=True)
    t = torch.tensor([[0.0, 0.0], [2.0, 2.0]])
    assert cross_correlation_loss(s, t, 0.0051).item() == pytest.approx(2.5 + 0.0051 * 2.5, rel=1e-6)
    assert cross_correlation_loss(s, t, 0.0).item() == pytest.approx(2.5, rel=1e-6)
    # identical inputs: M_uu = (B − 1)/B with the unbiased std (the code's form), so B = 2 leaves (1 − 0.5)² each
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert cross_correlation_loss(u, u, 0.0).item() == pytest.approx(2 * 0.25, rel=1e-6)
    # the target carries no gradient; the student does
    cross_correlation_loss(s, t.requires_grad_(), 0.0051).backward()
    assert s.grad is not None and t.grad is None
    with pytest.raises(ValueError, match="batch >= 2"):
        cross_correlation_loss(s[:1], t[:1], 0.0)
# -- RHFL's losses: symmetric cross-entropy and the confidence-weighted KL ------------------------------

A_LOG = math.log(1e-4)  # the reverse cross-entropy's clamped log 0, ≈ −9.2103


def test_sce_by_hand():
    from hierfl.learn.distill import sce_loss

    # sample 1: logits (0, 0), label 0 → p = (½, ½): CE = ln 2, RCE = −½·log 1e-4
    # sample 2: logits (ln 3, 0), label 0 → p = (¾, ¼): CE = −ln ¾, RCE = −¼·log 1e-4
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    labels = torch.tensor([0, 0])
    per = [0.1 * math.log(2.0) - 0.5 * A_LOG, 0.1 * -math.log(0.75) - 0.25 * A_LOG]
    got = sce_loss(logits, labels, a=0.1, b=1.0, reduction="none")
    assert got.tolist() == pytest.approx(per, rel=1e-6)
    assert sce_loss(logits, labels, a=0.1, b=1.0).item() == pytest.approx(sum(per) / 2, rel=1e-6)
    # a wrong label: logits (ln 3, 0), label 1 → CE = −ln ¼ = ln 4, RCE = −¾·log 1e-4 (bounded by −A)
    wrong = sce_loss(logits[1:], torch.tensor([1]), a=0.1, b=1.0).item()
    assert wrong == pytest.approx(0.1 * math.log(4.0) - 0.75 * A_LOG, rel=1e-6)
    # a = 1, b = 0 is plain cross-entropy
    assert sce_loss(logits, labels, a=1.0, b=0.0).item() == pytest.approx((math.log(2.0) - math.log(0.75)) / 2,
                                                                          rel=1e-6)
    with pytest.raises(ValueError, match="labels"):
        sce_loss(logits, torch.tensor([0]), a=0.1, b=1.0)


def test_weighted_kl_by_hand_and_its_single_target_gradient():
    from hierfl.learn.distill import weighted_kl

    # one teacher (¾, ¼), student (0, 0): KL = ¾ ln 1.5 + ¼ ln ½; weight 2 doubles it
    p = torch.tensor([[0.75, 0.25]])
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert weighted_kl(S, [p], [2.0]).item() == pytest.approx(2 * kl, rel=1e-6)
    # two teachers, weights (½, ¼): the gradient in the student's logits is (Σw)·p_s − Σ w_j p_j per sample,
    # which the soft cross-entropy toward the unnormalised q = Σ w_j p_j also has (what the party receives)
    z = torch.tensor([[0.5, -0.5, 0.0], [1.0, 0.0, -1.0]], requires_grad=True)
    p1 = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]])
    p2 = torch.tensor([[0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    weighted_kl(z, [p1, p2], [0.5, 0.25]).backward()
    g_kl = z.grad.clone()
    q = 0.5 * p1 + 0.25 * p2
    ps = torch.softmax(z.detach(), dim=1)
    assert torch.allclose(g_kl, (0.75 * ps - q) / 2, atol=1e-7)  # batch-mean: ÷ 2
    z.grad = None
    kd_loss(z, q, kind="soft_ce", teacher_is_prob=True).backward()
    assert torch.allclose(z.grad, g_kl, atol=1e-7)
    with pytest.raises(ValueError, match="one weight per teacher"):
        weighted_kl(S, [p], [1.0, 2.0])
