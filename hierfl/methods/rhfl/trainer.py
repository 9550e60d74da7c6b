"""Local training with the symmetric cross-entropy, and RHFL's report of the model's private loss.

RHFL (X. Fang, M. Ye, "Robust Federated Learning with Noisy and Heterogeneous Clients", CVPR 2022;
the authors' code ``HHF.py`` and ``loss.py``) trains every party on its noisy private labels with
``a·CE + b·RCE`` (:func:`hierfl.learn.distill.sce_loss`), a loss whose reverse term is bounded, and at
the start of each round measures the mean of that loss over the party's private data (client
confidence re-weighting) — always with the code's SCE (a = 0.1, b = 1.0), also when the local loss is
another (``SCESpec.check_a``, ``check_b``). A job of this module does both: its epochs of SGD, then (when asked) one
forward pass over the device's samples with the final model, whose mean loss it returns as the
``ccr_loss`` statistic. The report belongs to the next round's CCR: the model it measures is the one
the next round starts from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn.local import index_blocks, init_params
from hierfl.learn.precision import autocast

if TYPE_CHECKING:
    from hierfl.learn.local import LocalTrainer

__all__ = ["private_sce_loss", "train_sce"]


def private_sce_loss(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
                     a: float, b: float, batch_size: int | None) -> float:
    """Mean symmetric cross-entropy of the model ``params`` over ``x[rows]`` (evaluation mode, no update).

    The mean is over samples (design default; the code averages its batches' means, which differs only
    through a smaller last batch); computed in batches of ``batch_size`` (None: all at once)."""
    import torch

    from hierfl.learn.distill import sce_loss

    trainer._load(params)
    module = trainer.module
    module.eval()
    n = rows.size
    b_ = n if batch_size is None else min(batch_size, n)
    total = 0.0
    dev = trainer.device  # runtime.device
    with torch.inference_mode(), autocast(trainer.precision, dev):
        for start in range(0, n, b_):
            sel = rows[start : start + b_]
            xb = torch.from_numpy(np.ascontiguousarray(x[sel], dtype=np.float32).reshape(sel.size, -1)).to(dev)
            yb = torch.from_numpy(np.asarray(y[sel], dtype=np.int64)).to(dev)
            total += float(sce_loss(module(xb).float(), yb, a=a, b=b, reduction="none").double().sum().item())
    return total / n


def train_sce(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
              spec: TrainSpec, seed: int) -> tuple[np.ndarray, dict[str, float]]:
    """SGD with ``spec.method``'s symmetric cross-entropy on ``x[rows]`` with the (possibly noisy) labels ``y[rows]``.

    Data order and optimiser as :meth:`LocalTrainer.train` (``spec``'s epochs or steps, batch size, lr,
    momentum, weight decay; seeded by ``seed`` only). With ``spec.method.init_seed`` the job starts from a
    fresh initialisation of the trainer's architecture. With ``spec.method.report`` the stats carry
    ``ccr_loss``, the final model's mean loss over all ``rows`` (:func:`private_sce_loss`).
    """
    import torch

    from hierfl.learn.distill import sce_loss

    sce = spec.method
    if sce is None:
        raise ValueError("train_sce needs a spec with sce set")
    if sce.init_seed is not None:  # the party's own architecture, freshly initialised (its pre-training)
        params = init_params(trainer.model_cfg, trainer.input_shape, trainer.num_classes, sce.init_seed)
    n = rows.size
    trainer._load(params)
    b = effective_batch(n, spec)
    rng = np.random.default_rng(seed)
    sgd = trainer._sgd
    sgd.start(spec, None)
    module, plist = trainer.module, trainer._params
    dev = trainer.device  # runtime.device: the model and each batch live there
    module.train()
    loss_sum, steps, samples = 0.0, 0, 0
    for block in index_blocks(n, b, spec, rng):
        for start in range(0, block.size, b):
            sel = rows[block[start : start + b]]
            xb = torch.from_numpy(np.ascontiguousarray(x[sel], dtype=np.float32).reshape(sel.size, -1)).to(dev)
            yb = torch.from_numpy(np.asarray(y[sel], dtype=np.int64)).to(dev)
            for p in plist:
                p.grad = None
            with autocast(trainer.precision, dev):
                out = module(xb)
            loss = sce_loss(out.float(), yb, a=sce.a, b=sce.b)
            loss.backward()
            with torch.no_grad():
                sgd.step([p.grad for p in plist])
            loss_sum += loss.item()
            steps += 1
            samples += sel.size
    stats: dict[str, float] = {"loss": loss_sum / steps, "steps": steps, "samples": samples}
    result = trainer.host_vector()
    if sce.report:
        # client confidence is always measured with the SCE of the check (not the local loss: sce_a / sce_b)
        stats["ccr_loss"] = private_sce_loss(trainer, result, x, y, rows, sce.check_a, sce.check_b, spec.batch_size)
    return result, stats
