"""SCAFFOLD's device job, option II (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML 2020; math in :mod:`hierfl.methods.scaffold.math`).

The job trains with every gradient corrected by ``c − c_i`` (``c``: the server control that came with the
job; ``c_i``: the device's own, kept by its host), then moves ``c_i`` by option II and returns
``y`` and ``Δc_i`` (the control-variates message).
"""

from __future__ import annotations

import numpy as np

from hierfl.core.method import JobContext, runner
from hierfl.core.message import CONTROLLED
from hierfl.methods.scaffold.math import ControlJob, correction, option2_control

__all__ = ["run_control_job"]


@runner(ControlJob)
def run_control_job(method: ControlJob, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One SCAFFOLD job of ``ctx.device``."""
    if ctx.received is None:
        raise ValueError(f"device {ctx.device}: a job with control variates needs the server control c")
    trainer, out = ctx.trainer, ctx.out
    size = trainer.num_params
    c = np.asarray(ctx.received, dtype=np.float32)
    c_i = ctx.state.get(ctx.device, "c", c)
    y_new, stats = trainer.train(ctx.params, ctx.x, ctx.y, ctx.spec, ctx.seed, correction=correction(c, c_i),
                                 rows=ctx.rows, out=None if out is None else out[CONTROLLED.slices(size)["model"]])
    c_new, dc = option2_control(c_i, c, ctx.params, y_new, int(stats["steps"]), ctx.spec.lr)
    ctx.state.put(ctx.device, c=c_new)
    return CONTROLLED.join({"model": y_new, "control": dc}, out=out), stats
