"""FedAlign's device job (Mendieta et al., "Local Learning Matters: Rethinking Data Heterogeneity in Federated
Learning", CVPR 2022): plain local SGD whose loss is cross-entropy plus μ times the Lipschitz term of the model's
final block at a slim width (:func:`hierfl.methods.fedalign.trainer.fedalign_loss`), given to the model runner as the job's
local objective."""

from __future__ import annotations

from functools import partial

import numpy as np

from hierfl.methods.fedalign.math import AlignSpec
from hierfl.core.method import JobContext, runner

__all__ = ["run_align_job"]


@runner(AlignSpec)
def run_align_job(align: AlignSpec, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One job with FedAlign's loss (its slim pass is charged through the spec's work factor)."""
    from hierfl.methods.fedalign.trainer import fedalign_loss

    return ctx.trainer.train(ctx.params, ctx.x, ctx.y, ctx.spec, ctx.seed, rows=ctx.rows, out=ctx.out,  # type: ignore[no-any-return]
                             loss=partial(fedalign_loss, spec=align))
