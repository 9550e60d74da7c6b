"""Knowledge distillation as a reusable loss: tempered soft targets and the loss variants FL methods use.

Hinton, Vinyals and Dean (2015), "Distilling the Knowledge in a Neural Network" (arXiv 1503.02531):
a teacher's softened output distribution ``p^T(z) = softmax(z / T)`` carries how classes resemble
each other, which one-hot labels do not; a student trained to match it, usually beside the ordinary
loss on true labels, learns from that. Federated methods built on public data use variants of the
same loss: distillation through class scores (Li and Wang, 2019) regresses a party's class scores
onto the consensus with the mean absolute error; methods that distil from snapshots or from the other
parties use the KL form; data-free fine-tuning at the server the soft cross-entropy (student) and an
L1 distance of logits (generator). A party may also align its logits with the parties' mean through a
cross-correlation of batch-standardised logits (:func:`cross_correlation_loss`). Methods robust to
noisy labels add two more: a party aligns to the other parties' distributions with a
confidence-weighted sum of KL terms (:func:`weighted_kl`), and trains on its noisy private labels
with the symmetric cross-entropy (:func:`sce_loss`; Wang et al., "Symmetric Cross Entropy for Robust
Learning with Noisy Labels", ICCV 2019).

Every caller passes its own temperature: there is no hidden default, so a protocol's docs state the
one it uses. Probabilities are handled in log space (``log_softmax``); where a log of a given
probability is needed (a teacher that is already a distribution) it is clamped at ``1e-7``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["KD_KINDS", "KDKind", "RCE_LOG_ZERO", "cross_correlation_loss", "ensemble_target", "kd_loss",
           "sce_loss", "soft_targets", "weighted_kl"]

KDKind = Literal["kl", "soft_ce", "mae_logits", "l1_logits", "mse_logits"]
KD_KINDS: tuple[str, ...] = ("kl", "soft_ce", "mae_logits", "l1_logits", "mse_logits")
_EPS = 1e-7
# the reverse cross-entropy's log 0, clamped as the noisy-label methods' code clamps the one-hot label at 1e-4
RCE_LOG_ZERO = math.log(1e-4)


def soft_targets(logits: torch.Tensor, T: float) -> torch.Tensor:
    """``softmax(logits / T)`` along the class axis (``T = 1``: the ordinary softmax)."""
    import torch

    if not T > 0:
        raise ValueError(f"temperature T must be > 0, got {T}")
    return torch.softmax(logits / T, dim=-1)


def ensemble_target(teachers: Sequence[torch.Tensor], weights: torch.Tensor | None = None, *, T: float,
                    teacher_is_prob: bool = False) -> torch.Tensor:
    """``q = Σ_k a_k · p^T(z_k)``: the soft target of an ensemble of ``K`` teachers.

    ``weights``: ``None`` (uniform ``1/K``), shape ``(K,)`` or per sample ``(B, K)``; each row must
    sum to 1 (class- or client-weighted ensembles pass their own normalised weights). With
    ``teacher_is_prob`` the teachers are already distributions and are not tempered again.
    """
    import torch

    if len(teachers) == 0:
        raise ValueError("an ensemble needs at least one teacher")
    probs = torch.stack([t if teacher_is_prob else soft_targets(t, T) for t in teachers], dim=1)  # (B, K, C)
    k = probs.shape[1]
    if weights is None:
        w = torch.full((probs.shape[0], k), 1.0 / k, dtype=probs.dtype, device=probs.device)
    else:
        w = weights.to(probs.dtype)
        if w.dim() == 1:
            w = w.expand(probs.shape[0], k)
        if w.shape != (probs.shape[0], k) or bool((w < 0).any()):
            raise ValueError(f"weights must be non-negative of shape ({k},) or ({probs.shape[0]}, {k}), "
                             f"got {tuple(weights.shape)}")
        if not torch.allclose(w.sum(dim=1), torch.ones(w.shape[0], dtype=w.dtype, device=w.device), atol=1e-5):
            raise ValueError("ensemble weights must sum to 1 for every sample")
    return (w.unsqueeze(-1) * probs).sum(dim=1)


def kd_loss(student_logits: torch.Tensor, teacher: torch.Tensor, *, kind: KDKind, T: float = 1.0,
            t2_scale: bool = True, teacher_is_prob: bool = False,
            reduction: Literal["batchmean", "none"] = "batchmean",
            weights: torch.Tensor | None = None) -> torch.Tensor:
    """The distillation loss of ``student_logits`` (B, C) against ``teacher`` (B, C).

    Parameters
    ----------
    kind
        ``kl``: ``T²·KL(q ‖ p^T(z_s))`` with ``q = p^T(z_t)`` (Hinton; the ``T²`` keeps the soft term's
        gradients, which shrink like ``1/T²``, comparable across temperatures; ``t2_scale=False`` drops
        it). ``soft_ce``: ``−Σ_c q_c log p^T(z_s)_c``. ``mae_logits``: ``mean_c |z_s − z_t|`` (a
        consensus digest). ``l1_logits``: ``Σ_c |z_s − z_t|`` per sample. ``mse_logits``: ``mean_c (z_s − z_t)²``.
        The ``*_logits`` kinds ignore ``T`` and need logits as the teacher.
    T
        Temperature of the ``kl`` and ``soft_ce`` kinds.
    teacher_is_prob
        The teacher is already a distribution ``q`` (e.g. :func:`ensemble_target`), not logits.
    reduction
        ``batchmean``: the mean over the batch of the per-sample losses (PyTorch's ``kl_div``
        convention); ``none``: the per-sample losses (B,), for per-sample weighting.
    weights
        Optional per-sample weights ``w`` (B,): ``batchmean`` becomes ``mean_b w_b·ℓ_b`` and ``none``
        returns ``w_b·ℓ_b`` (e.g. each generated sample weighted by its teacher's share of the class).
    """
    import torch

    if student_logits.shape != teacher.shape or student_logits.dim() != 2:
        raise ValueError(f"student and teacher must both be (batch, classes), got {tuple(student_logits.shape)} "
                         f"and {tuple(teacher.shape)}")
    if kind in ("mae_logits", "l1_logits", "mse_logits"):
        if teacher_is_prob:
            raise ValueError(f"{kind} compares logits; the teacher must be logits (teacher_is_prob=False)")
        diff = student_logits - teacher
        per = {"mae_logits": diff.abs().mean(dim=1), "l1_logits": diff.abs().sum(dim=1),
               "mse_logits": (diff * diff).mean(dim=1)}[kind]
    elif kind in ("kl", "soft_ce"):
        if not T > 0:
            raise ValueError(f"temperature T must be > 0, got {T}")
        log_p_s = torch.log_softmax(student_logits / T, dim=1)
        if teacher_is_prob:
            q = teacher
            log_q = torch.log(teacher.clamp_min(_EPS))
        else:
            q = torch.softmax(teacher / T, dim=1)
            log_q = torch.log_softmax(teacher / T, dim=1)
        if kind == "soft_ce":
            per = -(q * log_p_s).sum(dim=1)
        else:
            per = (q * (log_q - log_p_s)).sum(dim=1) * (T * T if t2_scale else 1.0)
    else:
        raise ValueError(f"unknown distillation loss kind {kind!r}; allowed: {', '.join(KD_KINDS)}")
    if weights is not None:
        if weights.shape != per.shape:
            raise ValueError(f"per-sample weights must have shape {tuple(per.shape)}, got {tuple(weights.shape)}")
        per = per * weights.to(per.dtype)
    return per if reduction == "none" else per.mean()


def cross_correlation_loss(student_logits: torch.Tensor, target: torch.Tensor, lambda_col: float) -> torch.Tensor:
    """A collaboration loss by cross-correlation (Huang, Ye and Du, CVPR 2022, and the authors' code) on a batch.

    Both ``(B, C)`` inputs are standardised per class dimension over the batch, ``Ẑ = (Z − mean_b Z) /
    std_b Z`` (the unbiased std, as ``Tensor.std``; clamped at ``1e-12`` so that a constant column
    gives a finite loss), their cross-correlation is ``M = Ẑ_sᵀ Ẑ_t / B`` (``C × C``) and the loss
    ``Σ_u (1 − M_uu)² + λ_col Σ_{u≠v} (1 + M_uv)²``: each dimension agrees with the target's, and
    different dimensions are pushed apart. The target is treated as a constant (no gradient).
    """
    import torch

    if student_logits.shape != target.shape or student_logits.dim() != 2 or student_logits.shape[0] < 2:
        raise ValueError("the cross-correlation loss needs student and target of the same shape (batch >= 2, "
                         f"classes), got {tuple(student_logits.shape)} and {tuple(target.shape)}")
    b = student_logits.shape[0]

    def standardise(z: torch.Tensor) -> torch.Tensor:
        return (z - z.mean(dim=0)) / z.std(dim=0).clamp_min(1e-12)

    m = standardise(student_logits).T @ standardise(target.detach()) / b
    off_diagonal = ~torch.eye(m.shape[0], dtype=torch.bool, device=m.device)
    on_term = ((1.0 - torch.diagonal(m)) ** 2).sum()
    off_term = ((1.0 + m[off_diagonal]) ** 2).sum()
    return on_term + lambda_col * off_term


def sce_loss(logits: torch.Tensor, labels: torch.Tensor, *, a: float, b: float,
             reduction: Literal["mean", "none"] = "mean") -> torch.Tensor:
    """Symmetric cross-entropy ``a·CE(p, y) + b·RCE(p, y)`` of ``logits`` (B, C) on integer ``labels`` (B,).

    ``RCE = −Σ_c p_c log y_c`` with the one-hot ``y`` clamped at ``1e-4`` (so ``log 0`` becomes
    ``A = log 1e-4 ≈ −9.21``) and ``p = softmax(logits)`` clamped to ``[1e-7, 1]``: ``RCE = −A·Σ_{c≠y} p_c``,
    about ``−A·(1 − p_y)``. The RCE term is bounded, so a wrong label cannot pull the model as hard as
    under CE alone (Wang et al., 2019). Fang and Ye's code (CVPR 2022) uses ``a = 0.1``, ``b = 1``;
    ``a = 1, b = 0`` is CE.
    ``reduction``: ``mean`` over the batch, or the per-sample losses (``none``).
    """
    import torch
    import torch.nn.functional as F

    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (batch, classes) and labels (batch,), got {tuple(logits.shape)} and "
                         f"{tuple(labels.shape)}")
    ce = F.cross_entropy(logits, labels, reduction="none")
    p = torch.softmax(logits, dim=1).clamp(min=_EPS, max=1.0)
    log_y = torch.full_like(p, RCE_LOG_ZERO)
    log_y.scatter_(1, labels.unsqueeze(1), 0.0)  # log 1 on the label, log 1e-4 elsewhere
    rce = -(p * log_y).sum(dim=1)
    per = a * ce + b * rce
    return per if reduction == "none" else per.mean()


def weighted_kl(student_logits: torch.Tensor, teachers: Sequence[torch.Tensor], weights: Sequence[float]
                ) -> torch.Tensor:
    """``Σ_j w_j · KL(p_j ‖ softmax(z_s))`` (batch-mean each): one party's confidence-weighted alignment to the others.

    ``teachers``: the other parties' distributions ``p_j`` (B, C), already probabilities (the code
    detaches their softmax); ``weights``: their confidence weights ``W_j`` (any non-negative numbers:
    in the first round they are all ``1/(K−1)``). Its gradient in ``z_s`` is ``(Σ_j w_j)·p_s − Σ_j w_j p_j``
    per sample (over the batch size), the gradient of ``kd_loss(z_s, q, kind="soft_ce", teacher_is_prob=True)``
    with the unnormalised target ``q = Σ_j w_j p_j``: the two differ by a constant, which is why one
    summed tensor is all a party needs to receive.
    """
    if len(teachers) != len(weights) or len(teachers) == 0:
        raise ValueError(f"need one weight per teacher and at least one teacher, got {len(teachers)} teachers and "
                         f"{len(weights)} weights")
    if any(not (math.isfinite(w) and w >= 0) for w in weights):
        raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
    total = None
    for p, w in zip(teachers, weights):
        term = w * kd_loss(student_logits, p, kind="kl", T=1.0, teacher_is_prob=True)
        total = term if total is None else total + term
    assert total is not None
    return total
