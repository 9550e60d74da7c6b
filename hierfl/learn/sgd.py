"""Local SGD step without ``torch.optim``: the arithmetic of ``torch.optim.SGD(foreach=False)``, bit for bit.

A fresh ``torch.optim.SGD`` per job costs more than a small model's whole step (construction,
param groups, profiler hooks, per-step dispatch in Python). :class:`ExactSGD` keeps preallocated
buffers (momentum, temporaries, proximal anchor, correction) and replays exactly the tensor
operations of ``torch/optim/sgd.py::_single_tensor_sgd`` (torch 2.13, ``dampening=0``,
``nesterov=False``, ``maximize=False``), per parameter tensor, with the same shapes, so every
element goes through the same kernel path and the results are identical in every bit:

* proximal term (a trainer's μ, Li et al. 2020; a protocol's ρ, Xie et al. 2019; algorithms.md §5.5): ``g += ρ (w − w_start)``;
* the correction of control variates (docs/explanation/algorithms.md §5.6): ``g += c − c_i``;
* max-norm clipping of the whole gradient (``spec.clip_norm``, drift correction): the arithmetic of
  ``torch.nn.utils.clip_grad_norm_(foreach=False)`` over the gradients so far;
* weight decay: ``g ← g + wd·w`` (a new tensor in torch; here a preallocated one);
* momentum: ``buf ← g`` on the first step of a job, then ``buf ← m·buf + g``; ``g ← buf`` (Nesterov:
  ``g ← g + m·buf``);
* ``w ← w − lr·g``.

``spec.optimizer`` ``adam`` / ``adamw``: the loss terms and the clip as above, then the step of
``torch.optim.Adam`` / ``AdamW(foreach=False)`` itself (:class:`hierfl.learn.optim.AdamMoments`), its
moments fresh per job.

The order (proximal and correction added to the gradient before the optimiser step) is the one
:class:`~hierfl.learn.local.LocalTrainer` has always used.

Every buffer lives on the device of the flat buffer (``runtime.device``); vectors that come from or go to the
host (a correction, a device's kept optimizer state) cross with one copy each (none on the CPU, where the
buffers share memory with numpy arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from hierfl.core.work import TrainSpec
    from hierfl.learn.optim import AdamMoments
    from hierfl.learn.staging import Transfers

__all__ = ["ExactSGD", "flat_views"]


def flat_views(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``flat`` cut into views shaped like ``like`` (consecutive, in order)."""
    out, offset = [], 0
    for p in like:
        out.append(flat[offset: offset + p.numel()].view_as(p))
        offset += p.numel()
    return out


def _set(buffer: torch.Tensor, values: Any) -> None:
    """Write the host vector ``values`` into ``buffer`` (on the CPU through numpy: no tensor made; elsewhere one copy);
    a tensor already on the training device is copied there (no crossing)."""
    import numpy as np
    import torch

    if isinstance(values, torch.Tensor):
        buffer.copy_(values)
    elif buffer.device.type == "cpu":
        buffer.numpy()[...] = values
    else:
        buffer.copy_(torch.from_numpy(np.array(values, dtype=np.float32)))


class ExactSGD:
    """One job's SGD state over a fixed list of parameter tensors, reused across jobs.

    Parameters
    ----------
    params
        The parameter tensors (views into one flat buffer), in vector order.
    flat
        The flat buffer the parameters are views of (the proximal anchor is copied from it).
    """

    def __init__(self, params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
        self.params = list(params)
        self.flat = flat
        # buffers, each allocated on the first job that needs it (a host that never uses momentum
        # or a proximal term holds none): name -> (flat buffer, per-parameter views)
        self._buffers: dict[str, tuple[torch.Tensor, list[torch.Tensor]]] = {}
        self.lr = 0.0
        self.momentum = 0.0
        self.weight_decay = 0.0
        self.prox = 0.0
        self.corrected = False
        self.clip_norm: float | None = None
        self.nesterov = False
        self._spec: TrainSpec | None = None
        self._adam: AdamMoments | None = None  # Adam / AdamW moments (made on the first adaptive job)
        self._has_buf = [False] * len(self.params)
        self._tmp: list[torch.Tensor] = []
        self._mom: list[torch.Tensor] = []
        self._anchors: list[torch.Tensor] = []
        self._shifts: list[torch.Tensor] = []

    def _buffer(self, name: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
        import torch

        buf = self._buffers.get(name)
        if buf is None:
            flat = torch.empty(self.flat.numel(), dtype=self.flat.dtype, device=self.flat.device)
            buf = self._buffers[name] = (flat, flat_views(flat, self.params))
        return buf

    def start(self, spec: TrainSpec, correction: Any = None) -> None:
        """Begin a job from the parameters now in ``flat``: fresh momentum, anchor = start model.

        ``correction``: the control variates' flat float32 ``c − c_i`` (shape checked by the caller; a host vector or
        a tensor on the training device), or ``None``.
        """
        self.lr = spec.lr
        self.momentum = spec.momentum
        self.weight_decay = spec.weight_decay
        self.prox = spec.proximal
        self.clip_norm = spec.clip_norm
        self.nesterov = spec.nesterov
        self._spec = spec
        if spec.adaptive:  # (torch.optim.Adam's state is fresh per job, like SGD's momentum)
            if self._adam is None:
                from hierfl.learn.optim import AdamMoments

                self._adam = AdamMoments(self.params)
            self._adam.reset()
        self._has_buf = [False] * len(self.params)
        if self.prox > 0 or self.weight_decay != 0 or self.nesterov:
            self._tmp = self._buffer("tmp")[1]
        if self.momentum != 0:
            self._mom = self._buffer("momentum")[1]
        if self.prox > 0:
            anchor, self._anchors = self._buffer("anchor")
            anchor.copy_(self.flat)
        self.corrected = correction is not None
        if correction is not None:
            shift, self._shifts = self._buffer("shift")
            _set(shift, correction)

    def load_state(self, kept: dict[str, Any], transfers: Transfers | None = None) -> None:
        """After :meth:`start`: continue from a device's kept optimizer state (``optimizer_state: device``; empty
        before its first job), as one ``torch.optim`` optimizer kept across the device's jobs would. A vector kept
        on the device (:class:`~hierfl.learn.kept.KeptTensor`) is copied there; ``transfers``: an accelerator's
        counter, where a host vector loaded counts one upload."""
        from hierfl.learn.kept import load_into

        if self._spec is not None and self._spec.adaptive:
            if "opt_step" in kept:
                assert self._adam is not None
                self._adam.load(kept["opt_exp_avg"], kept["opt_exp_avg_sq"], kept["opt_step"], transfers)
        elif self.momentum != 0 and "opt_has" in kept:
            load_into(self._buffer("momentum")[0], kept["opt_momentum"], transfers)
            self._has_buf = [bool(h) for h in kept["opt_has"]]

    def save_state(self, kept: dict[str, Any], transfers: Transfers | None = None) -> None:
        """Write the optimizer state after the job into ``kept`` (replacing what it held): host vectors, or with
        ``transfers`` (an accelerator's trainer) vectors kept on the device (:mod:`hierfl.learn.kept`)."""
        import numpy as np

        from hierfl.learn.kept import keep

        kept.clear()
        if self._spec is not None and self._spec.adaptive:
            assert self._adam is not None
            kept.update(self._adam.export(transfers))
        elif self.momentum != 0:
            kept["opt_momentum"] = keep(self._buffer("momentum")[0], transfers)
            kept["opt_has"] = np.array(self._has_buf, dtype=np.float32)

    def step(self, grads: Sequence[torch.Tensor | None]) -> None:
        """One step; ``grads`` (one per parameter, ``None``: no gradient, skipped) may be overwritten.

        Call it under ``torch.no_grad()`` (the parameters are leaves that require grad).
        """
        import torch

        prox, wd, mom, lr = self.prox, self.weight_decay, self.momentum, self.lr
        adam = self._adam if self._spec is not None and self._spec.adaptive else None
        if self.clip_norm is not None or adam is not None:  # the loss terms first, then the clip over all of them
            grads = list(grads)
            for i, (p, g) in enumerate(zip(self.params, grads)):
                if g is not None:
                    self._terms(i, p, g, prox)
            if self.clip_norm is not None:
                self._clip([g for g in grads if g is not None])
            if adam is not None:  # torch's own Adam / AdamW step
                assert self._spec is not None
                adam.step(self.params, grads, self._spec)
                return
        for i, (p, g) in enumerate(zip(self.params, grads)):
            if g is None:
                continue
            if self.clip_norm is None:  # (inline: the hot path of every job)
                if prox > 0:
                    g.add_(torch.sub(p, self._anchors[i], out=self._tmp[i]), alpha=prox)
                if self.corrected:
                    g.add_(self._shifts[i])
            if wd != 0:
                g = torch.add(g, p, alpha=wd, out=self._tmp[i])
            if mom != 0:
                buf = self._mom[i]
                if not self._has_buf[i]:  # torch: buf = grad.clone() on a parameter's first step
                    buf.copy_(g)
                    self._has_buf[i] = True
                else:
                    buf.mul_(mom).add_(g, alpha=1)
                # torch: grad = grad.add(buf, alpha=momentum) (a new tensor; here the preallocated one)
                g = torch.add(g, buf, alpha=mom, out=self._tmp[i]) if self.nesterov else buf
            p.add_(g, alpha=-lr)

    def _terms(self, i: int, p: torch.Tensor, g: torch.Tensor, prox: float) -> None:
        """Add the proximal term and the correction to parameter ``i``'s gradient ``g`` in place."""
        import torch

        if prox > 0:
            g.add_(torch.sub(p, self._anchors[i], out=self._tmp[i]), alpha=prox)
        if self.corrected:
            g.add_(self._shifts[i])

    def _clip(self, grads: list[torch.Tensor]) -> None:
        """``clip_grad_norm_(foreach=False)``: scale every gradient by ``min(1, max / (‖g‖ + 1e-6))``."""
        import torch

        if not grads:
            return
        norms = [torch.linalg.vector_norm(g, 2.0) for g in grads]
        total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
        coef = torch.clamp(float(self.clip_norm) / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
