"""``public_finetune``: the server trains a model on the labelled public split.

The simplest server-side training, and the building block of methods that fine-tune the
aggregate at the server on data it holds (a distillation method's transfer-learning phase run at
a server, a server-side calibration). Charged as a device job of the same work would be
(ALGORITHMS_2 conventions: ``samples × 3 × F(model)`` FLOPs), on the server's FLOP/s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.work import TrainSpec, samples_processed
from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["public_finetune"]

_SEED_BOUND = 2 ** 62


def _example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    return [np.zeros(ctx.trainer(0).num_params, dtype=np.float32)], {"epochs": 1, "lr": 0.1, "batch_size": 8}


@server_task("public_finetune", example=_example)
def public_finetune(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                    rng: np.random.Generator) -> ServerResult:
    """SGD on the public split from ``inputs[0]``; ``params``: ``epochs`` (1), ``lr`` (0.01),
    ``batch_size`` (32), ``model`` (architecture index, 0). Output: the trained vector."""
    if ctx.public is None:
        raise ValueError("public_finetune needs a public split (data.public)")
    x, y = ctx.public
    if np.any(y < 0):
        raise ValueError("public_finetune needs labelled public data (data.public.labelled: true)")
    model = int(params.get("model", 0))
    spec = TrainSpec(epochs=int(params.get("epochs", 1)), batch_size=params.get("batch_size", 32),
                     lr=float(params.get("lr", 0.01)), model=model)
    trainer = ctx.trainer(model)
    out, stats = trainer.train(np.asarray(inputs[0], dtype=np.float32)[: trainer.num_params], x, y, spec,
                               int(rng.integers(_SEED_BOUND)))
    samples = samples_processed(int(x.shape[0]), spec)
    return ServerResult([out], 3.0 * ctx.forward_flops(model) * samples,
                        {"loss": float(stats["loss"]), "samples": float(samples)})
