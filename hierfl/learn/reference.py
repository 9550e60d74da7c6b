"""The one-job-at-a-time reference trainer: hierfl's local SGD as it was before the fast path.

:class:`ReferenceTrainer` is ``LocalTrainer`` at commit 1672b90, kept verbatim in what it computes:
a fresh ``torch.optim.SGD(foreach=False)`` (or ``Adam`` / ``AdamW``: ``training.optimizer``) per job, ``module(x)`` + ``F.cross_entropy`` +
``loss.backward()`` per step, the device's samples gathered by the caller. It is the
specification :meth:`hierfl.learn.local.LocalTrainer.train` must match bit for bit
(``tests/learn/test_fastpath.py``) and the "old" column of ``analysis/bench/fastpath.py``; runs never use it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn.local import index_blocks
from hierfl.learn.optim import torch_optimizer
from hierfl.learn.sgd import flat_views

if TYPE_CHECKING:
    import torch

    from hierfl.models import ModelConfig

__all__ = ["ReferenceTrainer"]


class ReferenceTrainer:
    """Owns one torch module whose parameters are views into one flat buffer (as ``LocalTrainer`` does)."""

    def __init__(self, model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int,
                 torch_threads: int = 1, device: str = "cpu") -> None:
        import torch

        self.torch_threads = int(torch_threads)
        torch.set_num_threads(self.torch_threads)
        self.in_features = math.prod(input_shape)
        # device: where the module and every batch live (the specification on a GPU is the same loop there)
        self.device = str(device)
        if torch.device(self.device).type == "cuda":
            from hierfl.learn.precision import cuda_determinism

            cuda_determinism()
        self.module = model_cfg.build(tuple(input_shape), num_classes).to(self.device)
        self.params = list(self.module.parameters())
        self.num_params = sum(p.numel() for p in self.params)
        self.flat = torch.nn.utils.parameters_to_vector(self.params).detach().clone()
        torch.nn.utils.vector_to_parameters(self.flat, self.params)
        self.flat_np = self.flat.numpy() if self.device == "cpu" else np.empty(self.num_params, dtype=np.float32)

    def train(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, spec: TrainSpec, seed: int,
              correction: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """Local minibatch SGD from ``params`` on ``(x, y)``: ``(new vector, {'loss', 'steps', 'samples'})``."""
        import torch
        import torch.nn.functional as F

        if torch.get_num_threads() != self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        y = np.asarray(y)
        if x2d.shape[1] != self.in_features or y.shape != (x2d.shape[0],):
            raise ValueError(f"bad data shapes {x2d.shape}, {y.shape}")
        self.flat_np[...] = params
        if self.device != "cpu":
            self.flat.copy_(torch.from_numpy(self.flat_np))
        n = x2d.shape[0]
        b = effective_batch(n, spec)
        rng = np.random.default_rng(seed)
        module = self.module
        module.train()
        opt = torch_optimizer(self.params, spec)  # (torch.optim.SGD, or Adam / AdamW: training.optimizer)
        anchors: list[torch.Tensor] = []
        prox = spec.proximal
        if prox > 0:
            anchors = flat_views(self.flat.detach().clone(), self.params)
        shifts: list[torch.Tensor] = []
        if correction is not None:
            corr = np.asarray(correction, dtype=np.float32)
            if corr.shape != (self.num_params,):
                raise ValueError(f"correction must have shape ({self.num_params},), got {corr.shape}")
            shifts = flat_views(torch.from_numpy(corr.copy()).to(self.device), self.params)
        loss_sum = 0.0
        steps = 0
        samples = 0
        for block in index_blocks(n, b, spec, rng):
            xb_all = torch.from_numpy(np.ascontiguousarray(x2d[block], dtype=np.float32)).to(self.device)
            yb_all = torch.from_numpy(y[block].astype(np.int64, copy=False)).to(self.device)
            m = block.size
            for start in range(0, m, b):
                xb = xb_all[start: start + b]
                yb = yb_all[start: start + b]
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(module(xb), yb)
                loss.backward()
                if anchors:
                    with torch.no_grad():
                        for p, a in zip(self.params, anchors):
                            assert p.grad is not None
                            p.grad.add_(p - a, alpha=prox)
                if shifts:
                    with torch.no_grad():
                        for p, c in zip(self.params, shifts):
                            assert p.grad is not None
                            p.grad.add_(c)
                if spec.clip_norm is not None:
                    torch.nn.utils.clip_grad_norm_(self.params, spec.clip_norm, foreach=False)
                opt.step()
                loss_sum += loss.item()
                steps += 1
                samples += xb.shape[0]
        out = self.flat.detach().to("cpu", copy=True).numpy()
        return out, {"loss": loss_sum / steps, "steps": steps, "samples": samples}
