"""``dp_local``: a device's local-DP release of one upload.

With ``privacy.dp: {mode: local}`` (any protocol and tier: a synchronous round at the cloud or at the edge
servers, a buffer, or updates applied one by one), every upload leaves the device as

    ``θ̃ = θ₀ + Δ·min(1, S/‖Δ‖₂) + N(0, (z·S)² I)``,   ``Δ = θ − θ₀``,

``θ₀`` the model the device trained from: the clipping and the Gaussian noise of DP-FedAvg's local mode
(McMahan, Ramage, Talwar, Zhang, ICLR 2018), made by the device before anything is sent, so the server and
everyone after it only ever see the noised update. Each upload is a Gaussian mechanism of its own (its
clipped update moves by at most ``2S`` when the device's data change: multiplier ``z/2``). The order is the
deployment's: clip, noise, then a transfer channel quantises the noised upload and SecAgg masks it; the
aggregator's rule only sums (:class:`hierfl.privacy.rules.DpMeanRule`). The accounting is
:mod:`hierfl.privacy.driver`'s (a device's releases composed without amplification).

The driver runs this task in the executor's cloud role as the upload crosses the device's uplink
(:meth:`hierfl.channels.driver.ChannelLinks.transform`), with a seed of its own per device and upload, so the
noise is the same with every executor. It charges nothing here: the device's clipping and noise are charged
on its own clock before the upload (``privacy.dp.costs``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task
from hierfl.privacy import math as P

__all__ = ["dp_local"]


def _example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    ref = np.zeros(8, dtype=np.float32)
    return [np.linspace(-1.0, 1.0, 8, dtype=np.float32), ref], {"clip": 0.5, "noise_multiplier": 1.0}


@server_task("dp_local", example=_example)
def dp_local(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
             rng: np.random.Generator) -> ServerResult:
    """``inputs = [θ, θ₀]``: the upload and the model it was trained from; output: ``θ̃`` (float32)."""
    x, ref = np.asarray(inputs[0]), np.asarray(inputs[1])
    if x.shape != ref.shape:
        raise ValueError(f"dp_local: the upload has {x.shape} values, the model it was trained from {ref.shape}")
    clip, z = float(params["clip"]), float(params["noise_multiplier"])
    flat = x.reshape(1, -1)
    clipped = P.clip_updates(flat, ref.reshape(-1), clip)
    noised = P.noised_mean(clipped.deltas, 1, 0.0, rng, local_std=z * clip)
    out = (ref.reshape(-1).astype(np.float64) + noised).astype(np.float32)
    return ServerResult([out.reshape(x.shape)], 0.0, {"clipped": float(clipped.clipped.sum()),
                                                      "norm": float(clipped.norms[0])})
