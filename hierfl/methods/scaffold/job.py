"""SCAFFOLD's device job, option II (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML 2020; math in :mod:`hierfl.methods.scaffold.math`).

The job trains with every gradient corrected by ``c − c_i`` (``c``: the server control that came with the
job; ``c_i``: the device's own, kept by its host), then moves ``c_i`` by option II and returns
``y`` and ``Δc_i`` (the control-variates message).

Off the CPU the whole job computes on the training device (:attr:`JobContext.device_vectors
<hierfl.core.method.JobContext.device_vectors>`, math in :mod:`hierfl.methods.scaffold.trainer`): ``c_i`` stays
there between the device's jobs, the round's ``c`` and start model are uploaded once for all its jobs on the
host (not at all when the start is an aggregate computed there), and the result ``[y; Δc_i]`` stays there where
the host takes it so (the local executor: the aggregators fold the model and sum ``κ_i Δc_i`` there), else it comes
back in one copy. The bits are the numpy path's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.method import JobContext, runner
from hierfl.core.message import CONTROLLED
from hierfl.methods.scaffold.trainer import correction_on_device, option2_on_device
from hierfl.methods.scaffold.math import ControlJob, correction, option2_control

__all__ = ["run_control_job"]


@runner(ControlJob)
def run_control_job(method: ControlJob, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One SCAFFOLD job of ``ctx.device``."""
    if ctx.received is None:
        raise ValueError(f"device {ctx.device}: a job with control variates needs the server control c")
    vectors = ctx.device_vectors
    if vectors is not None and not vectors.on_host:
        return _on_device(ctx, vectors)
    trainer, out = ctx.trainer, ctx.out
    size = trainer.num_params
    c = np.asarray(ctx.received, dtype=np.float32)
    c_i = ctx.state.get(ctx.device, "c", c)
    y_new, stats = trainer.train(ctx.params, ctx.x, ctx.y, ctx.spec, ctx.seed, correction=correction(c, c_i),
                                 rows=ctx.rows, out=None if out is None else out[CONTROLLED.slices(size)["model"]])
    c_new, dc = option2_control(c_i, c, ctx.params, y_new, int(stats["steps"]), ctx.spec.lr)
    ctx.state.put(ctx.device, c=c_new)
    return CONTROLLED.join({"model": y_new, "control": dc}, out=out), stats


def _on_device(ctx: JobContext, vectors: Any) -> tuple[np.ndarray, dict[str, float]]:
    """The job on the training device: the same arithmetic as the numpy path, hence its bits."""
    size = ctx.trainer.num_params
    x = vectors.shared(ctx.params)      # the round's start model: one upload for the round's jobs here
    c = vectors.shared(ctx.received)    # the round's server control, likewise
    c_i = vectors.state(ctx.state.peek(ctx.device, "c"), size)
    y, stats = ctx.trainer.train(x, ctx.x, ctx.y, ctx.spec, ctx.seed, correction=correction_on_device(c, c_i),
                                 rows=ctx.rows, on_device=True)
    c_new, dc = option2_on_device(c_i, c, x, y, int(stats["steps"]), ctx.spec.lr)
    ctx.state.put(ctx.device, c=vectors.keep(c_new))
    # (CONTROLLED is the model then the control: [y; Δc_i], left on the device where the host takes it there,
    # else one copy down)
    out = ctx.out if ctx.out is not None or ctx.keep_result else np.empty(CONTROLLED.width(size), dtype=np.float32)
    return vectors.result([y, dc], out, ctx.keep_result), stats
