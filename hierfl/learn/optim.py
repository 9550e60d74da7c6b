"""Local optimisers beyond plain SGD, with torch's own arithmetic: Adam / AdamW moments and gradient clipping.

Every update rule here is torch's: :class:`AdamMoments` keeps the state of ``torch.optim.Adam`` (first and
second moments, a step counter per tensor) and steps with ``torch.optim.adam.adam(foreach=False)``, the
single-tensor implementation ``torch.optim.Adam(foreach=False)`` / ``AdamW`` run (Kingma & Ba, "Adam: A
Method for Stochastic Optimization", ICLR 2015; Loshchilov & Hutter, "Decoupled Weight Decay
Regularization", ICLR 2019, for AdamW's ``w ← w·(1 − lr·wd)``). Every operation of that implementation
is elementwise, so the same call on the ``(K, P)`` stack of ``K`` jobs' parameters (the batched paths)
computes for each row what it computes for that job alone.

:func:`clip_rows` is ``torch.nn.utils.clip_grad_norm_(foreach=False)`` applied to each row of a stack:
per parameter tensor a 2-norm, their 2-norm the job's total, every gradient scaled by
``min(1, max_norm / (total + 1e-6))``. :func:`torch_optimizer` builds the ``torch.optim`` optimiser of a
spec, for the trainers that step a ``torch.optim`` object (the reference trainer, and methods' trainers that build one).

SGD (momentum, Nesterov, weight decay) stays in :class:`hierfl.learn.sgd.ExactSGD` and the batched
trainers, which replay ``torch.optim.SGD(foreach=False)`` without its per-call overhead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from hierfl.core.work import TrainSpec
    from hierfl.learn.staging import Transfers

__all__ = ["AdamMoments", "clip_rows", "segments_of", "torch_optimizer"]


class AdamMoments:
    """One job's (or one stack of jobs') Adam / AdamW state over a fixed list of tensors, reused across jobs.

    Parameters
    ----------
    like
        Tensors shaped like the parameters (a job's parameter views, or the one ``(K, P)`` stack).
    """

    def __init__(self, like: Sequence[torch.Tensor]) -> None:
        import torch

        self.exp_avgs = [torch.zeros_like(t) for t in like]
        self.exp_avg_sqs = [torch.zeros_like(t) for t in like]
        # torch.optim.Adam's per-parameter step: a float32 scalar tensor on the CPU (not capturable), also
        # when the parameters are on a GPU, as torch.optim.Adam keeps it
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in like]

    def reset(self) -> None:
        """Fresh state (a new job): zero moments, step 0."""
        for t in (*self.exp_avgs, *self.exp_avg_sqs, *self.steps):
            t.zero_()

    def load(self, exp_avg: Any, exp_avg_sq: Any, steps: np.ndarray, transfers: Transfers | None = None) -> None:
        """Continue from kept state: the moments as flat vectors (the tensors' values in order: host arrays, or
        :class:`~hierfl.learn.kept.KeptTensor` on the device), a step per tensor. ``transfers``: an accelerator's
        counter (a host vector loaded counts one upload)."""
        from hierfl.learn.kept import KeptTensor

        sources = []
        for kept in (exp_avg, exp_avg_sq):
            if isinstance(kept, KeptTensor):
                sources.append(kept.tensor)
            else:
                import numpy as np
                import torch

                if transfers is not None:
                    transfers.count("h2d", 1)
                sources.append(torch.from_numpy(np.asarray(kept, dtype=np.float32)))
        offset = 0
        for m, v, step, k in zip(self.exp_avgs, self.exp_avg_sqs, self.steps, steps):
            n = m.numel()
            m.copy_(sources[0][offset: offset + n].view_as(m))
            v.copy_(sources[1][offset: offset + n].view_as(v))
            step.fill_(float(k))
            offset += n

    def export(self, transfers: Transfers | None = None) -> dict[str, Any]:
        """The state as flat float32 vectors: ``opt_exp_avg``, ``opt_exp_avg_sq`` and ``opt_step`` (one per tensor).
        With ``transfers`` (an accelerator's trainer) the moments stay on the device
        (:class:`~hierfl.learn.kept.KeptTensor`); the steps are host scalars, as torch keeps them."""
        import numpy as np
        import torch

        from hierfl.learn.kept import keep

        return {"opt_exp_avg": keep(torch.cat([m.reshape(-1) for m in self.exp_avgs]), transfers),
                "opt_exp_avg_sq": keep(torch.cat([v.reshape(-1) for v in self.exp_avg_sqs]), transfers),
                "opt_step": np.array([float(k) for k in self.steps], dtype=np.float32)}

    def step(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], spec: TrainSpec) -> None:
        """One Adam (``spec.optimizer == "adam"``, L2 weight decay) or AdamW (decoupled) step of ``params``
        at ``spec.lr``; a tensor whose gradient is None keeps its values and state (as in torch)."""
        import torch
        from torch.optim.adam import adam

        idx = [i for i, g in enumerate(grads) if g is not None]
        with torch.no_grad():
            adam([params[i] for i in idx], [grads[i] for i in idx],  # type: ignore[misc]
                 [self.exp_avgs[i] for i in idx], [self.exp_avg_sqs[i] for i in idx], [],
                 [self.steps[i] for i in idx], foreach=False, capturable=False, differentiable=False, fused=None,
                 grad_scale=None, found_inf=None, has_complex=False,
                 decoupled_weight_decay=spec.optimizer == "adamw", amsgrad=False, beta1=spec.betas[0],
                 beta2=spec.betas[1], lr=spec.lr, weight_decay=spec.weight_decay, eps=spec.eps, maximize=False)


def segments_of(shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter tensor in the flat vector, from their shapes (vector order)."""
    out, offset = [], 0
    for shape in shapes:
        size = 1
        for s in shape:
            size *= int(s)
        out.append((offset, size))
        offset += size
    return out


def clip_rows(grad: torch.Tensor, segments: Sequence[tuple[int, int]], max_norm: float) -> None:
    """Clip each row of the ``(K, P)`` gradient stack in place as ``clip_grad_norm_(foreach=False)`` clips one
    job's gradients: the 2-norm of the per-tensor 2-norms (``segments``: each tensor's ``(offset, size)``),
    then ``g ← g · min(1, max_norm / (norm + 1e-6))``."""
    import torch

    norms = torch.stack([torch.linalg.vector_norm(grad[:, o: o + n], 2.0, dim=1) for o, n in segments], dim=1)
    total = torch.linalg.vector_norm(norms, 2.0, dim=1)
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    grad.mul_(coef.unsqueeze(1))


def torch_optimizer(params: Sequence[torch.Tensor], spec: TrainSpec) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimiser of ``spec`` (``foreach=False``): SGD with momentum / Nesterov / weight decay,
    Adam or AdamW with betas, eps and weight decay, at ``spec.lr``."""
    import torch

    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay,
                               nesterov=spec.nesterov, foreach=False)
    cls = torch.optim.Adam if spec.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay, foreach=False)
