"""FedDC's device job (Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
Correction", CVPR 2022; math in :mod:`hierfl.methods.feddc.math`).

A job reads and moves the device's drift ``h_i`` and control ``c_i`` (per-device state of its host).
FedDC's penalty gradient ``α_i (θ − w)`` is the exact SGD replay's proximal term and ``α_i h_i + g_i``
its constant correction, so the replay runs it unchanged. The result is ``[θ⁺; δc_i]`` (``θ⁺ + h_i`` in
front with the paper's server rule).

Off the CPU the whole job computes on the training device (:attr:`JobContext.device_vectors
<hierfl.core.method.JobContext.device_vectors>`, math in :mod:`hierfl.methods.feddc.trainer`): ``h_i`` and
``c_i`` stay there between the device's jobs, the round's ``c`` and start model are uploaded once for all its
jobs on the host, and the result stays there where the host takes it so (the local executor: the aggregators fold
it there), else it comes back in one copy. The bits are the numpy path's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from hierfl.methods.feddc.trainer import device_update_on_device, local_terms_on_device, paper_upload_on_device
from hierfl.methods.feddc.math import DriftSpec, device_update, local_terms, mean_steps, relative_weights
from hierfl.core.method import JobContext, runner
from hierfl.core.message import CONTROLLED

__all__ = ["run_drift_job"]


def _omega(ctx: JobContext) -> tuple[float, np.ndarray]:
    """``(ω_i of the job's device, every device's sample count)``; the ω table is made once per host."""
    sizes = np.array([p.size for p in ctx.parts])
    omega_all = ctx.cache.get("omega")
    if omega_all is None:
        omega_all = ctx.cache["omega"] = relative_weights(sizes)
    return float(omega_all[ctx.device]), sizes


@runner(DriftSpec)
def run_drift_job(drift: DriftSpec, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One FedDC job of ``ctx.device``: ``h_i`` and ``c_i`` move; the upload model and ``δc_i``."""
    vectors = ctx.device_vectors
    if vectors is not None and not vectors.on_host:
        return _on_device(drift, ctx, vectors)
    trainer, spec, out = ctx.trainer, ctx.spec, ctx.out
    size = trainer.num_params
    # None: an edge's own c_e before its first round, zeros
    c = np.zeros(size, dtype=np.float32) if ctx.received is None else np.asarray(ctx.received, dtype=np.float32)
    omega, sizes = _omega(ctx)
    h_i, c_i = ctx.state.get(ctx.device, "h", c), ctx.state.get(ctx.device, "c", c)
    alpha_i, corr = local_terms(drift.alpha, omega, c, c_i, h_i)
    job = replace(spec, prox=spec.prox + alpha_i)
    y_new, stats = trainer.train(ctx.params, ctx.x, ctx.y, job, ctx.seed, correction=corr, rows=ctx.parts[ctx.device],
                                 out=None if out is None else out[CONTROLLED.slices(size)["model"]])
    y_new = np.array(y_new[:size], dtype=np.float32)
    k_bar = mean_steps(sizes, spec.epochs, spec.steps, spec.batch_size)
    h_new, c_new, dc = device_update(h_i, c_i, c, omega, np.asarray(ctx.params)[:size], y_new, k_bar, spec.lr)
    ctx.state.put(ctx.device, h=h_new, c=c_new)
    if drift.server_rule == "paper":  # the paper averages θ⁺ + h_i weighted by samples
        y_new = (y_new.astype(np.float64) + h_new.astype(np.float64)).astype(np.float32)
    return CONTROLLED.join({"model": y_new, "control": dc}, out=out), stats


def _on_device(drift: DriftSpec, ctx: JobContext, vectors: Any) -> tuple[np.ndarray, dict[str, float]]:
    """The job on the training device: the same arithmetic as the numpy path, hence its bits."""
    import torch

    spec, size = ctx.spec, ctx.trainer.num_params
    start = vectors.shared(ctx.params)  # the round's start model w: one upload for the round's jobs here
    # the round's c, once (None: an edge's own c_e before its first round, zeros made on the device)
    c = (torch.zeros(size, dtype=torch.float32, device=vectors.device) if ctx.received is None
         else vectors.shared(ctx.received))
    omega, sizes = _omega(ctx)
    h_i = vectors.state(ctx.state.peek(ctx.device, "h"), size)
    c_i = vectors.state(ctx.state.peek(ctx.device, "c"), size)
    alpha_i, corr = local_terms_on_device(drift.alpha, omega, c, c_i, h_i)
    job = replace(spec, prox=spec.prox + alpha_i)
    y, stats = ctx.trainer.train(start, ctx.x, ctx.y, job, ctx.seed, correction=corr, rows=ctx.parts[ctx.device],
                                 on_device=True)
    k_bar = mean_steps(sizes, spec.epochs, spec.steps, spec.batch_size)
    h_new, c_new, dc = device_update_on_device(h_i, c_i, c, omega, start, y, k_bar, spec.lr)
    ctx.state.put(ctx.device, h=vectors.keep(h_new), c=vectors.keep(c_new))
    if drift.server_rule == "paper":  # the paper averages θ⁺ + h_i weighted by samples
        y = paper_upload_on_device(y, h_new)
    # (CONTROLLED is the model then the control: [θ⁺; δc_i], left on the device where the host takes it there,
    # else one copy down)
    out = ctx.out if ctx.out is not None or ctx.keep_result else np.empty(CONTROLLED.width(size), dtype=np.float32)
    return vectors.result([y, dc], out, ctx.keep_result), stats
