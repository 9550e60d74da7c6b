"""Jobs on the public split of output-exchange methods (FedMD, Li and Wang, "FedMD: Heterogenous Federated
Learning via Model Distillation", 2019; RHFL's probabilities and alignment jobs): class scores or
probabilities on a public subset, training toward given targets, pre-training on the public labels
(:mod:`hierfl.learn.outputs`)."""

from __future__ import annotations

import numpy as np

from hierfl.core.method import JobContext, runner
from hierfl.core.work import PublicTask

__all__ = ["run_public_task_job"]


@runner(PublicTask)
def run_public_task_job(task: PublicTask, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One public-data job; ``ctx.received``: the targets of a ``digest`` or ``align`` job."""
    from hierfl.learn.outputs import run_public_task

    result, stats = run_public_task(ctx.trainer, ctx.params, ctx.x, ctx.y, ctx.spec, ctx.seed, ctx.received)
    return ctx.finish(result, stats)
