"""RHFL's private jobs (Fang, Ye, "Robust Federated Learning With Noisy and Heterogeneous Clients", CVPR 2022):
training with the symmetric cross-entropy, optionally reporting the final model's mean loss (the CCR pass;
:mod:`hierfl.methods.rhfl.trainer`)."""

from __future__ import annotations

import numpy as np

from hierfl.core.method import JobContext, runner
from hierfl.methods.rhfl.math import SCESpec

__all__ = ["run_sce_job"]


@runner(SCESpec)
def run_sce_job(sce: SCESpec, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One private SCE job on the rows the job sees."""
    from hierfl.methods.rhfl.trainer import train_sce

    result, stats = train_sce(ctx.trainer, ctx.params, ctx.x, ctx.y, ctx.rows, ctx.spec, ctx.seed)
    return ctx.finish(result, stats)
