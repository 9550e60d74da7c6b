"""The one-job-at-a-time reference trainer: ``torch.optim.SGD`` and autograd, as hierfl trained before its fast path.

:meth:`hierfl.learn.local.LocalTrainer.train` must give the same bits as :func:`reference_train`
(``tests/test_fastpath.py`` compares them on many seeds, specs and models;
``analysis/bench/fastpath.py`` times them side by side). Kept as the specification, not used in runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn.local import _index_blocks
from hierfl.learn.sgd import flat_views

if TYPE_CHECKING:
    import torch

    from hierfl.learn.local import LocalTrainer

__all__ = ["reference_train"]


def reference_train(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, y: np.ndarray, spec: TrainSpec,
                    seed: int, correction: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """Local SGD on ``trainer``'s module exactly as ``LocalTrainer.train`` did up to hierfl 1672b90.

    A fresh ``torch.optim.SGD(foreach=False)`` per call, ``module(x)`` + ``F.cross_entropy`` +
    ``loss.backward()`` per step; the device's samples ``x``/``y`` are gathered by the caller.
    """
    import torch
    import torch.nn.functional as F

    x2d, y = trainer._check_data(x, y)
    trainer._load(params)
    n = x2d.shape[0]
    b = effective_batch(n, spec)
    rng = np.random.default_rng(seed)
    module = trainer.module
    plist = trainer._params
    module.train()
    opt = torch.optim.SGD(plist, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay, foreach=False)
    anchors: list[torch.Tensor] = []
    prox = spec.proximal
    if prox > 0:
        anchors = flat_views(trainer._flat.detach().clone(), plist)
    shifts: list[torch.Tensor] = []
    if correction is not None:
        corr = np.asarray(correction, dtype=np.float32)
        if corr.shape != (trainer.num_params,):
            raise ValueError(f"correction must have shape ({trainer.num_params},), got {corr.shape}")
        shifts = flat_views(torch.from_numpy(corr.copy()), plist)
    loss_sum = 0.0
    steps = 0
    samples = 0
    for block in _index_blocks(n, b, spec, rng):
        xb_all = torch.from_numpy(np.ascontiguousarray(x2d[block], dtype=np.float32))
        yb_all = torch.from_numpy(y[block].astype(np.int64, copy=False))
        m = block.size
        for start in range(0, m, b):
            xb = xb_all[start: start + b]
            yb = yb_all[start: start + b]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(module(xb), yb)
            loss.backward()
            if anchors:
                with torch.no_grad():
                    for p, a in zip(plist, anchors):
                        assert p.grad is not None
                        p.grad.add_(p - a, alpha=prox)
            if shifts:
                with torch.no_grad():
                    for p, c in zip(plist, shifts):
                        assert p.grad is not None
                        p.grad.add_(c)
            opt.step()
            loss_sum += loss.item()
            steps += 1
            samples += xb.shape[0]
    out = trainer._flat.detach().numpy().copy()
    return out, {"loss": loss_sum / steps, "steps": steps, "samples": samples}
