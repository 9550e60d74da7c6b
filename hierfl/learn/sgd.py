"""Local SGD step without ``torch.optim``: the arithmetic of ``torch.optim.SGD(foreach=False)``, bit for bit.

A fresh ``torch.optim.SGD`` per job costs more than a small model's whole step (construction,
param groups, profiler hooks, per-step dispatch in Python). :class:`ExactSGD` keeps preallocated
buffers (momentum, temporaries, proximal anchor, correction) and replays exactly the tensor
operations of ``torch/optim/sgd.py::_single_tensor_sgd`` (torch 2.13, ``dampening=0``,
``nesterov=False``, ``maximize=False``), per parameter tensor, with the same shapes, so every
element goes through the same kernel path and the results are identical in every bit:

* proximal term (FedProx's μ, FedAsync/AHFL's ρ; ALGORITHMS.md §5.5): ``g += ρ (w − w_start)``;
* SCAFFOLD's correction (ALGORITHMS.md §5.6): ``g += c − c_i``;
* weight decay: ``g ← g + wd·w`` (a new tensor in torch; here a preallocated one);
* momentum: ``buf ← g`` on the first step of a job, then ``buf ← m·buf + g``; ``g ← buf``;
* ``w ← w − lr·g``.

The order (proximal and correction added to the gradient before the optimiser step) is the one
:class:`~hierfl.learn.local.LocalTrainer` has always used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from hierfl.core.work import TrainSpec

__all__ = ["ExactSGD", "flat_views"]


def flat_views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """``flat`` cut into views shaped like ``like`` (consecutive, in order)."""
    out, offset = [], 0
    for p in like:
        out.append(flat[offset: offset + p.numel()].view_as(p))
        offset += p.numel()
    return out


class ExactSGD:
    """One job's SGD state over a fixed list of parameter tensors, reused across jobs.

    Parameters
    ----------
    params
        The parameter tensors (views into one flat buffer), in vector order.
    flat
        The flat buffer the parameters are views of (the proximal anchor is copied from it).
    """

    def __init__(self, params: list[torch.Tensor], flat: torch.Tensor) -> None:
        import torch

        self.params = params
        self.flat = flat
        n = flat.numel()
        self._tmp = flat_views(torch.empty(n, dtype=flat.dtype), params)
        self._mom_flat = torch.empty(n, dtype=flat.dtype)
        self._mom = flat_views(self._mom_flat, params)
        self._anchor_flat = torch.empty(n, dtype=flat.dtype)
        self._anchors = flat_views(self._anchor_flat, params)
        self._shift_flat = torch.empty(n, dtype=flat.dtype)
        self._shift_np = self._shift_flat.numpy()
        self._shifts = flat_views(self._shift_flat, params)
        self.lr = 0.0
        self.momentum = 0.0
        self.weight_decay = 0.0
        self.prox = 0.0
        self.corrected = False
        self._has_buf = [False] * len(params)

    def start(self, spec: TrainSpec, correction: object | None = None) -> None:
        """Begin a job from the parameters now in ``flat``: fresh momentum, anchor = start model."""
        self.lr = spec.lr
        self.momentum = spec.momentum
        self.weight_decay = spec.weight_decay
        self.prox = spec.proximal
        self._has_buf = [False] * len(self.params)
        if self.prox > 0:
            self._anchor_flat.copy_(self.flat)
        self.corrected = correction is not None
        if correction is not None:
            self._shift_np[...] = correction  # float32 already (checked by the caller)

    def step(self, grads: list[torch.Tensor | None]) -> None:
        """One step; ``grads`` (one per parameter, ``None``: no gradient, skipped) may be overwritten.

        Call it under ``torch.no_grad()`` (the parameters are leaves that require grad).
        """
        import torch

        prox, wd, mom, lr = self.prox, self.weight_decay, self.momentum, self.lr
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if g is None:
                continue
            tmp = self._tmp[i]
            if prox > 0:
                g.add_(torch.sub(p, self._anchors[i], out=tmp), alpha=prox)
            if self.corrected:
                g.add_(self._shifts[i])
            if wd != 0:
                g = torch.add(g, p, alpha=wd, out=tmp)
            if mom != 0:
                buf = self._mom[i]
                if not self._has_buf[i]:  # torch: buf = grad.clone() on a parameter's first step
                    buf.copy_(g)
                    self._has_buf[i] = True
                else:
                    buf.mul_(mom).add_(g, alpha=1)
                g = buf
            p.add_(g, alpha=-lr)
