"""FedAlign's local loss in torch (Mendieta et al., "Local Learning Matters: Rethinking Data
Heterogeneity in Federated Learning", CVPR 2022; docs/explanation/algorithms.md, FedAlign).

Per minibatch, with ``f_in``/``f_out`` the features entering and leaving the final block:

* ``ℓ_CE`` = cross-entropy of the full-width logits;
* the slim pass runs the block at width ``ω`` on the first channels of ``sg(f_in)``: ``f_out^S``;
* a pair's transfer matrix ``G = A·Oᵀ / HW`` (the input average-pooled to the output's spatial size;
  ``HW = 1`` for vector features) and its Lipschitz proxy ``σ = sqrt(λ_max(G·Gᵀ))`` by power iteration
  from the all-ones vector, as the authors' code does;
* ``ℓ_Lip = mean_b (σ_S − σ_F)²`` with ``σ_F`` of ``(sg(f_in), sg(f_out))`` (no gradient), so only the
  block's weights feel it;
* the loss ``ℓ_CE + μ·(sg(ℓ_CE)/sg(ℓ_Lip))·ℓ_Lip`` (``normalize``, the code) or ``ℓ_CE + μ·ℓ_Lip`` (the paper).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hierfl.methods.fedalign.math import AlignSpec

if TYPE_CHECKING:
    import torch

__all__ = ["fedalign_loss", "top_singular", "transfer_matrix"]

_TINY = 1e-12  # floor of norms in the power iteration (σ of an all-zero block output is sqrt(1e-12) ≈ 0)


def transfer_matrix(f_in: torch.Tensor, f_out: torch.Tensor) -> torch.Tensor:
    """``G = A·Oᵀ / HW`` per sample, ``(B, C_in, C_out)``; ``(B, C)`` vector features count as ``HW = 1``."""
    import torch.nn.functional as F

    if f_in.dim() == 2:
        f_in, f_out = f_in[:, :, None, None], f_out[:, :, None, None]
    if f_in.shape[2] > f_out.shape[2]:
        f_in = F.adaptive_avg_pool2d(f_in, (f_out.shape[2], f_out.shape[3]))
    a = f_in.reshape(f_in.shape[0], f_in.shape[1], -1)
    o = f_out.reshape(f_out.shape[0], f_out.shape[1], -1).transpose(1, 2)
    return a.bmm(o) / a.shape[2]


def top_singular(g: torch.Tensor, iters: int) -> torch.Tensor:
    """``sqrt`` of the top eigenvalue of ``K = G·Gᵀ`` per sample, ``(B,)``: ``iters`` power iterations
    ``m = K v, v = m / ‖m‖`` from ``v = 1``, then ``sqrt(‖m‖)`` (the authors' ``top_eigenvalue``)."""
    import torch

    k = g.bmm(g.transpose(1, 2))
    v = torch.ones(k.shape[0], k.shape[1], 1, dtype=k.dtype, device=k.device)  # (on the batch's device)
    n = torch.ones(k.shape[0], 1, 1, dtype=k.dtype, device=k.device)
    for _ in range(iters):
        m = k.bmm(v)
        n = torch.linalg.vector_norm(m, dim=1, keepdim=True)
        # a sample whose block output is all zero (dead ReLUs, frequent in a narrow MLP block) has K = 0:
        # the code's m / n would be 0/0 = NaN; floors keep σ = 0 there with a zero gradient
        v = m / n.clamp_min(_TINY)
    return torch.sqrt((n / torch.linalg.vector_norm(v, dim=1, keepdim=True).clamp_min(_TINY)).clamp_min(_TINY)).reshape(-1)


def fedalign_loss(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, spec: AlignSpec) -> torch.Tensor:
    """FedAlign's loss of one batch (differentiable; see the module's docstring)."""
    import torch.nn.functional as F

    from hierfl.models.nets import slim_size

    f_in, f_out, logits = module.taps(x)  # type: ignore[operator]
    ce = F.cross_entropy(logits, y)
    f_in_sg = f_in.detach()
    slim = module.slim_block(f_in_sg, spec.width)  # type: ignore[operator]
    slim_in = f_in_sg[:, : slim_size(f_in.shape[1], spec.width)]  # the channels the slim block read
    sigma_s = top_singular(transfer_matrix(slim_in, slim), spec.power_iters)
    sigma_f = top_singular(transfer_matrix(f_in_sg, f_out.detach()), spec.power_iters)
    lip = ((sigma_s - sigma_f) ** 2).mean()
    if spec.normalize:
        scale = ce.detach() / lip.detach() if float(lip.detach()) > 0 else ce.detach() * 0.0
        return ce + spec.mu * scale * lip
    return ce + spec.mu * lip
