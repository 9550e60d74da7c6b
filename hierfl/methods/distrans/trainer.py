"""DisTrans's local job and per-device evaluation in torch (Yuan et al., "Addressing Heterogeneity in
Federated Learning via Distributional Transformation", ECCV 2022; docs/explanation/algorithms.md, DisTrans).

One pass of SGD over the device's batches (the job's data order, as every trainer's, from
:func:`~hierfl.learn.local.index_blocks`); per batch the loss is the cross-entropy of the dual-input
model on the two views of the batch shifted by the device's offset ``t``. ``joint`` (the authors'
code): one backward pass gives both gradients; the model takes an SGD step (``training.lr``,
momentum, weight decay, fresh per job, as ``torch.optim.SGD``) and the offset a plain one,
``t ← t − lr_offset·∇_t ℓ``. ``alternating``: the model steps first, then a second pass with the
moved model gives the offset's gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn.local import download

if TYPE_CHECKING:
    import torch

__all__ = ["OffsetTrainer"]


class OffsetTrainer:
    """A dual-input module of its own (built once per host from the model config) and its jobs."""

    def __init__(self, module: torch.nn.Module, torch_threads: int = 1, device: str = "cpu") -> None:
        import torch

        # runtime.device: the module, the offset and each batch live there; the results come down once per job
        self.device = str(device)
        if torch.device(self.device).type == "cuda":  # repeatable GPU arithmetic (no TF32, deterministic cuDNN)
            from hierfl.learn.precision import cuda_determinism

            cuda_determinism()
        self.module = module.to(self.device)
        self.threads = int(torch_threads)
        self._params = list(module.parameters())
        self.num_params = sum(p.numel() for p in self._params)

    def _load(self, params: np.ndarray) -> None:
        import torch

        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        flat = torch.from_numpy(np.array(params[: self.num_params], dtype=np.float32)).to(self.device)
        with torch.no_grad():
            pos = 0
            for p in self._params:
                p.copy_(flat[pos: pos + p.numel()].view_as(p))
                pos += p.numel()

    def _flat(self) -> np.ndarray:
        import torch

        return download(torch.cat([p.detach().reshape(-1) for p in self._params])).astype(np.float32, copy=False)

    def train(self, params: np.ndarray, offset: np.ndarray, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
              spec: TrainSpec, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """``(new model, new offset, stats)`` of one job on ``x[rows]`` starting from ``params`` and ``offset``."""
        import torch
        import torch.nn.functional as F

        from hierfl.learn.local import index_blocks
        from hierfl.learn.optim import torch_optimizer

        assert spec.method is not None
        self._load(params)
        module = self.module
        module.train()
        dev = self.device
        t = torch.from_numpy(np.array(offset, dtype=np.float32)).to(dev).requires_grad_(True)
        opt = torch_optimizer(self._params, spec)  # training.optimizer (torch.optim.SGD by default), fresh per job
        clip = spec.clip_norm  # training.clip_norm: the model's gradient (not the offset's) before each model step
        lr_t, alternating = float(spec.method.lr_offset), spec.method.update == "alternating"
        n = int(rows.size)
        b = effective_batch(n, spec)
        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        loss_sum, steps, samples = 0.0, 0, 0
        for block in index_blocks(n, b, spec, np.random.default_rng(seed)):
            sel = rows[block]
            xb_all = torch.from_numpy(np.ascontiguousarray(x2d[sel], dtype=np.float32)).to(dev)
            yb_all = torch.from_numpy(np.asarray(y)[sel].astype(np.int64)).to(dev)
            for start in range(0, block.size, b):
                xb, yb = xb_all[start: start + b], yb_all[start: start + b]
                opt.zero_grad(set_to_none=True)
                t.grad = None
                loss = F.cross_entropy(module.pair(*module.views(xb, t)), yb)  # type: ignore[operator]
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(self._params, clip, foreach=False)
                if alternating:  # the model moves first; the offset's gradient is taken at the moved model
                    opt.step()
                    t.grad = None
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(module.pair(*module.views(xb, t)), yb).backward()  # type: ignore[operator]
                    with torch.no_grad():
                        t -= lr_t * t.grad
                else:
                    with torch.no_grad():
                        t -= lr_t * t.grad
                    opt.step()
                loss_sum += loss.item()
                steps += 1
                samples += int(xb.shape[0])
        return self._flat(), download(t), {"loss": loss_sum / steps, "steps": steps, "samples": samples}

    def evaluate(self, params: np.ndarray, offset: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """``(accuracy, mean cross-entropy)`` of the model with ``params`` seeing ``x`` shifted by ``offset``."""
        import torch
        import torch.nn.functional as F

        self._load(params)
        module = self.module
        module.eval()
        t = torch.from_numpy(np.array(offset, dtype=np.float32)).to(self.device)
        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        with torch.inference_mode():
            xb = torch.from_numpy(np.array(x2d, dtype=np.float32)).to(self.device)
            yb = torch.from_numpy(np.asarray(y).astype(np.int64)).to(self.device)
            logits = module.pair(*module.views(xb, t))  # type: ignore[operator]
            loss = float(F.cross_entropy(logits, yb, reduction="sum").item())
            correct = int((logits.argmax(dim=1) == yb).sum().item())
        n = int(yb.shape[0])
        return correct / n, loss / n
