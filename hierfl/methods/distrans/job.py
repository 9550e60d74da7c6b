"""DisTrans's device job and per-device evaluation (Yuan et al., "Addressing Heterogeneity in Federated
Learning via Distributional Transformation", ECCV 2022; math in :mod:`hierfl.methods.distrans.math`).

Each device's input-shaped offset ``t_i`` is per-device state of its host (name ``offset``): made on the
device's first job (or evaluation) from the scenario seed, moved by each job, checkpointed with the host,
counted in the state's memory and forgotten on a reset. The model itself travels as usual; with
``offset_mode: local`` the offset never leaves the device. With ``mean`` the vectors the servers send and
average are ``[model; offset]``: a job starts from the offset it receives and returns its trained one
behind the model (the device still keeps it, for memory accounting).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.methods.distrans.math import OffsetSpec, initial_offset
from hierfl.core.method import JobContext, runner

__all__ = ["run_offset_job", "evaluate_with_offset", "offset_trainer"]


def offset_trainer(ctx: JobContext) -> Any:
    """The host's :class:`~hierfl.methods.distrans.trainer.OffsetTrainer` (the dual-input model; made once per host)."""
    trainer = ctx.cache.get("offset_trainer")
    if trainer is None:
        from hierfl.methods.distrans.trainer import OffsetTrainer

        cfg, shape, classes, threads = ctx.model
        # on the host's device (runtime.device), as the host's own trainer
        trainer = ctx.cache["offset_trainer"] = OffsetTrainer(cfg.build(tuple(shape), classes), threads,
                                                              ctx.trainer.device)
    return trainer


def _start(spec: OffsetSpec, ctx: JobContext, num_params: int) -> np.ndarray:
    """The offset a job or an evaluation uses: the shared one received behind the model (``mean``), or the
    device's own (its initial one before its first job)."""
    if spec.shared:
        return np.asarray(ctx.params)[num_params:]
    own = ctx.state.peek(ctx.device, "offset")
    if own is not None:
        return own
    return initial_offset(int(np.prod(ctx.model[1])), spec.init_seed, ctx.device)


@runner(OffsetSpec)
def run_offset_job(spec: OffsetSpec, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One job: the new model, followed by the new offset with ``offset_mode: mean`` (the device's offset moves
    and stays in its host)."""
    trainer = offset_trainer(ctx)
    new, offset, stats = trainer.train(ctx.params, _start(spec, ctx, trainer.num_params), ctx.x, ctx.y, ctx.rows,
                                       ctx.spec, ctx.seed)
    ctx.state.put(ctx.device, offset=offset)
    if spec.shared:
        new = np.concatenate([new, offset])
    return ctx.finish(new, stats)


@runner(OffsetSpec, "evaluate")
def evaluate_with_offset(spec: OffsetSpec, ctx: JobContext) -> tuple[float, float]:
    """``(accuracy, loss)`` of ``ctx.params`` on ``ctx.x``, ``ctx.y``, seen through the device's own offset
    (``mean``: the shared offset behind the model, the one every device receives)."""
    trainer = offset_trainer(ctx)
    return trainer.evaluate(ctx.params, _start(spec, ctx, trainer.num_params), ctx.x, ctx.y)  # type: ignore[no-any-return]
