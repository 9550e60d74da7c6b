"""FedDC's device job (Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
Correction", CVPR 2022; math in :mod:`hierfl.methods.feddc.math`).

A job reads and moves the device's drift ``h_i`` and control ``c_i`` (per-device state of its host).
FedDC's penalty gradient ``α_i (θ − w)`` is the exact SGD replay's proximal term and ``α_i h_i + g_i``
its constant correction, so the replay runs it unchanged. The result is ``[θ⁺; δc_i]`` (``θ⁺ + h_i`` in
front with the paper's server rule).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hierfl.methods.feddc.math import DriftSpec, device_update, local_terms, mean_steps, relative_weights
from hierfl.core.method import JobContext, runner
from hierfl.core.message import CONTROLLED

__all__ = ["run_drift_job"]


@runner(DriftSpec)
def run_drift_job(drift: DriftSpec, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
    """One FedDC job of ``ctx.device``: ``h_i`` and ``c_i`` move; the upload model and ``δc_i``."""
    trainer, spec, out = ctx.trainer, ctx.spec, ctx.out
    size = trainer.num_params
    # None: an edge's own c_e before its first round, zeros
    c = np.zeros(size, dtype=np.float32) if ctx.received is None else np.asarray(ctx.received, dtype=np.float32)
    sizes = np.array([p.size for p in ctx.parts])
    omega_all = ctx.cache.get("omega")
    if omega_all is None:  # ω_i from the partition, made once per host
        omega_all = ctx.cache["omega"] = relative_weights(sizes)
    omega = float(omega_all[ctx.device])
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
