"""FCCL's device jobs (Huang, Ye, Du, "Learn from Others and Be Yourself in Heterogeneous Federated
Learning", CVPR 2022): pre-training, logits on public batches, collaboration steps and the local phase
(:mod:`hierfl.methods.fccl.trainer`). The teacher snapshots are per-device state of the device's host."""

from __future__ import annotations

import numpy as np

from hierfl.methods.fccl.math import FCCLJob
from hierfl.core.method import JobContext, runner

__all__ = ["run_fccl_job"]


@runner(FCCLJob)
def run_fccl_job(job: FCCLJob, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One FCCL job; ``ctx.received``: the summed logits of a ``collab`` job."""
    from hierfl.methods.fccl.trainer import FCCLWork

    result, stats = FCCLWork(ctx.state, ctx.x, ctx.y).run(ctx.trainer, ctx.device, ctx.parts[ctx.device], ctx.spec,
                                                          ctx.seed, ctx.params, ctx.received)
    return ctx.finish(result, stats)
