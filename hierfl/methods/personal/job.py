"""The personalised trainers' device job and per-device evaluation (settings and math in
:mod:`hierfl.methods.personal.math`, torch work in :mod:`hierfl.methods.personal.trainer`).

A device's local layers are per-device state of its home host (name ``local``): written by each of its
jobs, checkpointed with the host, counted in the state's memory and forgotten on a reset. Before its first
job (and after a reset) a device takes them from the model devices start from (``ctx.base``: the run's
initial model, or LG-FedAvg's warm-up model). A trainer without local layers (FedMeta, FedAvgMeta without
``head_layers``) keeps nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.method import JobContext, runner
from hierfl.methods.personal.math import PersonalJob

__all__ = ["personaliser", "run_personal_job", "evaluate_personalised"]


def personaliser(job: PersonalJob, ctx: JobContext) -> Any:
    """The host's :class:`~hierfl.methods.personal.trainer.Personaliser` of ``job`` on the job's model (made once
    per host and settings: the layer mask)."""
    made = ctx.cache.setdefault("personalisers", {})
    key = (job, id(ctx.trainer))
    pz = made.get(key)
    if pz is None:
        from hierfl.methods.personal.trainer import Personaliser

        pz = made[key] = Personaliser(ctx.trainer, job)
    return pz


def _local_layers(ctx: JobContext) -> np.ndarray | None:
    """The device's own local layers, or the model devices start from (whose local layers a device without
    state takes)."""
    own = ctx.state.peek(ctx.device, "local")
    return own if own is not None else ctx.base


@runner(PersonalJob)
def run_personal_job(job: PersonalJob, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One job: the global update (local layers zeroed; Meta-SGD: ``[θ; α]``); the trained local layers
    stay in the device's host."""
    pz = personaliser(job, ctx)
    update, stats, local = pz.train(ctx.device, ctx.params, ctx.x, ctx.y, ctx.rows, ctx.spec, ctx.seed,
                                    _local_layers(ctx))
    if pz.state_len:
        ctx.state.put(ctx.device, local=local)
    return ctx.finish(update, stats)


@runner(PersonalJob, "evaluate")
def evaluate_personalised(job: PersonalJob, ctx: JobContext) -> tuple[float, float]:
    """``(accuracy, loss)`` on ``ctx.x``, ``ctx.y`` of the device's personalised model: the global model with its
    own local layers, adapted on its support samples first (meta-learners, FedAvgMeta)."""
    pz = personaliser(job, ctx)
    sx, sy = ctx.support if ctx.support is not None else (ctx.x[:0], ctx.y[:0])
    theta = pz.adapted(ctx.params, _local_layers(ctx), sx, sy)
    return ctx.trainer.evaluate(theta, ctx.x, ctx.y)  # type: ignore[no-any-return]
