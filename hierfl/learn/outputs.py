"""Device work on the public split for output-exchange methods: class scores, digest and pre-training.

Model distillation through class scores (Li and Wang, 2019, arXiv 1910.03581, and the authors'
code): every party computes its class scores — the outputs of its model without the final softmax —
on a public subset, the server averages them into a consensus, and each party *digests* it by
training its score model toward the consensus (mean absolute error on the logits). Before the
rounds, each party pre-trains on the labelled public data (transfer learning). Methods robust to
noisy labels exchange class probabilities instead and align each party to a confidence-weighted
target (``probs`` and ``align`` tasks). The functions
below are that work on one device's model, through the
:class:`~hierfl.learn.local.LocalTrainer` of its architecture.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.public import public_subset
from hierfl.core.work import PublicTask, TrainSpec, effective_batch, samples_processed
from hierfl.learn.local import index_blocks, init_params
from hierfl.learn.precision import autocast
from hierfl.learn.randomness import DrawMasks, job_generator

if TYPE_CHECKING:
    from hierfl.learn.local import LocalTrainer

__all__ = ["class_probs", "class_scores", "run_public_task", "subset_rows", "train_on_public"]


def subset_rows(task: PublicTask, y: np.ndarray) -> np.ndarray:
    """The task's public rows in the training arrays: its round's subset (seeded), or the whole split."""
    start, stop = task.rows
    if task.subset_seed is None:
        rows = np.arange(start, stop, dtype=np.int64)
        if task.window is None:
            return rows
        rng = np.random.default_rng(0)
    else:
        rng = np.random.default_rng(task.subset_seed)
        rows = start + public_subset(np.asarray(y[start:stop]), task.subset_size, rng, task.stratified)
    if task.window is None:
        return rows
    # one public batch: the window of the subset in an order the same seed shuffles (both ends derive it)
    return rows[rng.permutation(rows.size)][task.window[0] : task.window[1]]


def class_scores(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The model's logits on ``x[rows]`` in evaluation mode, flattened to ``len(rows) · C`` float32."""
    import torch

    trainer._load(params)
    module = trainer.module
    module.eval()
    # runtime.precision bf16: the forward pass autocasts, the scores come back as float32 (as evaluation)
    xb = torch.from_numpy(np.ascontiguousarray(x[rows], dtype=np.float32).reshape(rows.size, -1)).to(trainer.device)
    with torch.inference_mode(), autocast(trainer.precision, trainer.device):
        logits = module(xb)
    return logits.float().cpu().numpy().astype(np.float32).reshape(-1)


def class_probs(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``softmax`` of :func:`class_scores` per sample, flattened to ``len(rows) · C`` float32 (uploaded probabilities)."""
    import torch

    scores = torch.from_numpy(class_scores(trainer, params, x, rows).reshape(rows.size, trainer.num_classes))
    return torch.softmax(scores, dim=1).numpy().astype(np.float32).reshape(-1)


def train_on_public(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
                    spec: TrainSpec, seed: int, targets: np.ndarray | None, loss_kind: str,
                    teacher_is_prob: bool = False) -> tuple[np.ndarray, dict[str, float]]:
    """SGD on ``x[rows]`` from ``params``: toward ``targets`` (``len(rows) · C`` scores, row order) with the
    distillation loss ``loss_kind`` (:func:`hierfl.learn.distill.kd_loss`), or on the labels ``y[rows]``
    with cross-entropy when ``targets`` is None. Data order and optimiser as
    :meth:`LocalTrainer.train` (``spec``'s epochs, batch size, lr; seeded by ``seed`` only), dropout masks too:
    drawn from the job's own stream (:func:`~hierfl.learn.randomness.job_generator` of ``seed``), never from
    torch's global generator, so the job gives the same bits in any process."""
    import torch
    import torch.nn.functional as F

    from hierfl.learn.distill import kd_loss

    n = rows.size
    dev = trainer.device  # (runtime.device: the targets go up once, each batch once)
    target = None if targets is None else torch.from_numpy(
        np.array(targets, dtype=np.float32).reshape(n, trainer.num_classes)).to(dev)
    trainer._load(params)
    b = effective_batch(n, spec)
    rng = np.random.default_rng(seed)
    sgd = trainer._sgd
    sgd.start(spec, None)
    module, plist = trainer.module, trainer._params
    module.train()
    loss_sum, steps = 0.0, 0
    # the job's own mask stream, drawn call by call in forward order (as a plain job alone)
    masks = DrawMasks(job_generator(seed)) if trainer.dropout else contextlib.nullcontext()
    for block in index_blocks(n, b, spec, rng):
        for start in range(0, block.size, b):
            pos = block[start : start + b]  # positions within the subset (the targets' rows)
            xb = torch.from_numpy(np.ascontiguousarray(x[rows[pos]], dtype=np.float32).reshape(pos.size, -1)).to(dev)
            for p in plist:
                p.grad = None
            with masks, autocast(trainer.precision, dev):  # (fp32: no autocast region at all)
                out = module(xb)
            out = out.float()
            if target is None:
                loss = F.cross_entropy(out, torch.from_numpy(y[rows[pos]].astype(np.int64)).to(dev))
            else:
                loss = kd_loss(out, target[torch.from_numpy(pos).to(dev)], kind=loss_kind,  # type: ignore[arg-type]
                               teacher_is_prob=teacher_is_prob)
            loss.backward()
            with torch.no_grad():
                sgd.step([p.grad for p in plist])
            loss_sum += loss.item()
            steps += 1
    return trainer.host_vector(), {"loss": loss_sum / steps, "steps": steps, "samples": samples_processed(n, spec)}


def run_public_task(trainer: LocalTrainer, params: np.ndarray, x: np.ndarray, y: np.ndarray, spec: TrainSpec,
                    seed: int, targets: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
    """One :class:`~hierfl.core.work.PublicTask` job: ``scores`` → the flat scores; ``probs`` → the flat class
    probabilities; ``digest`` and ``align`` → the model trained toward ``targets`` (scores, or probabilities
    with ``teacher_is_prob``); ``pretrain`` → the model trained on the public labels."""
    task = spec.task
    assert task is not None
    if task.init_seed is not None:  # the party's own architecture, freshly initialised
        params = init_params(trainer.model_cfg, trainer.input_shape, trainer.num_classes, task.init_seed)
    rows = subset_rows(task, y)
    if task.kind == "scores":
        return class_scores(trainer, params, x, rows), {"samples": float(rows.size)}
    if task.kind == "probs":  # the class probabilities, softmax of the scores (float32)
        return class_probs(trainer, params, x, rows), {"samples": float(rows.size)}
    if task.kind in ("digest", "align"):
        if targets is None:
            raise ValueError(f"a {task.kind} job needs the target it trains toward")
        return train_on_public(trainer, params, x, y, rows, spec, seed, targets, task.loss, task.teacher_is_prob)
    return train_on_public(trainer, params, x, y, rows, spec, seed, None, task.loss)
