"""Sample-level DP-SGD on a device (Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep Learning with
Differential Privacy", CCS 2016), for both training paths.

A job of a :class:`~hierfl.core.work.TrainSpec` with ``dp_sgd`` set takes ``spec.steps`` steps; step ``t``:

1. samples its batch on its own (:func:`dp_batches`): ``fixed_size`` — ``b`` of the job's ``n`` samples uniformly
   without replacement; ``poisson`` — every sample independently with probability ``q = b/n`` (the batch may be
   empty). ``b = effective_batch(n, spec)``. These are the samplings the accountant covers
   (``SampledWithoutReplacementDpEvent`` under replace-one, ``PoissonSampledDpEvent`` under add-or-remove-one);
   an epoch's shuffle would be covered by none;
2. computes every sampled example's gradient of its own cross-entropy loss with ``torch.func``
   (``functional_call`` + ``vmap(grad_and_value(...))``; batched jobs: a ``vmap`` over jobs around it);
3. clips each to L2 norm ``C``: ``g_i · min(1, C / (‖g_i‖₂ + 1e-6))`` (Opacus' factor; the 1e-6 keeps the
   clipped norm ≤ ``C`` and a zero gradient finite);
4. sums them, adds ``N(0, (zC)²)`` per coordinate, divides by ``b`` — the fixed batch size, or the expected one
   under Poisson sampling (the realised count is data-dependent and would leak), so the result is an unbiased
   estimate of the mean clipped gradient;
5. hands the noisy gradient to the job's optimiser exactly as a plain gradient (proximal term, clip_norm, weight
   decay, momentum / Adam: post-processing, which spends no privacy).

Randomness: the batches come from ``np.random.default_rng(stream_seed(seed, "learn.dpsgd.batches"))`` and the
noise from a ``torch.Generator`` seeded with ``stream_seed(seed, "learn.dpsgd.noise")`` — named streams of the
job's seed, never a global generator, drawn in step order in float32 on the CPU — so a job's batches and noise
are the same whether it trains alone or in a group, on any executor.

The model must be free of batch-coupled layers (batch norm: one sample's output would depend on the others, so
per-sample gradients would not bound one sample's influence) and of dropout; ``privacy.dp_sgd`` refuses both at
load time (:mod:`hierfl.privacy.config_dp_sgd`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec, effective_batch

if TYPE_CHECKING:
    import torch

    from hierfl.learn.sgd import ExactSGD

__all__ = ["CLIP_EPS", "dp_batches", "dp_step_plan", "noise_generator", "draw_noise", "clip_factors", "per_sample_fn",
           "job_grad_fn", "train_alone"]

CLIP_EPS = 1e-6
"""Added to a sample's gradient norm before the clip factor ``C / (‖g‖ + ε)`` (as Opacus)."""


def dp_batches(n: int, spec: TrainSpec, seed: int) -> list[np.ndarray]:
    """The positions (into the job's ``n`` samples) of every step's batch, drawn independently per step."""
    dp = spec.dp_sgd
    assert dp is not None and spec.steps is not None
    b = effective_batch(n, spec)
    rng = np.random.default_rng(stream_seed(int(seed), "learn.dpsgd.batches"))
    if dp.sampling == "fixed_size":
        return [np.sort(rng.choice(n, size=b, replace=False)) for _ in range(spec.steps)]
    q = b / n
    return [np.flatnonzero(rng.random(n) < q) for _ in range(spec.steps)]


def dp_step_plan(sizes: list[int], spec: TrainSpec, seeds: list[int]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """The batched path's plan of ``K`` DP-SGD jobs (the shapes of :func:`hierfl.learn.vmapped.step_plan`):
    ``pos (T, K, B)`` positions into each job's rows (padding 0), ``mask (T, K, B)`` 1.0 for a sampled example and
    0 for padding, ``active (T, K)`` (all true: every job takes ``spec.steps`` steps) and each job's sample count.
    ``B`` is the largest batch of any step (at least 1: an empty Poisson batch is all padding)."""
    per_job = [dp_batches(n, spec, seed) for n, seed in zip(sizes, seeds)]
    t_max, k_jobs = int(spec.steps or 0), len(sizes)
    width = max(1, max((int(p.size) for steps in per_job for p in steps), default=1))
    pos = np.zeros((t_max, k_jobs, width), dtype=np.int64)
    mask = np.zeros((t_max, k_jobs, width), dtype=np.float32)
    for k, steps in enumerate(per_job):
        for t, p in enumerate(steps):
            pos[t, k, : p.size] = p
            mask[t, k, : p.size] = 1.0
    return pos, mask, np.ones((t_max, k_jobs), dtype=bool), [int(sum(p.size for p in s)) for s in per_job]


def noise_generator(seed: int) -> torch.Generator:
    """The generator of a job's DP-SGD noise: a named stream of the job's seed (never torch's global one)."""
    import torch

    return torch.Generator().manual_seed(stream_seed(int(seed), "learn.dpsgd.noise"))


def draw_noise(gen: torch.Generator, size: int, std: float) -> torch.Tensor:
    """One step's noise ``N(0, std²)`` of ``size`` float32 coordinates (CPU), drawn from ``gen``."""
    import torch

    return torch.randn(size, generator=gen, dtype=torch.float32) * std


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """``min(1, C / (‖g_i‖ + 1e-6))`` per sample."""
    import torch

    return torch.clamp(clip / (norms + CLIP_EPS), max=1.0)


def per_sample_fn(module: torch.nn.Module, names: list[str]) -> Callable[..., Any]:
    """``f(params, x, y) -> (per-sample flat gradients (B, P), per-sample losses (B,))`` of ``module``.

    ``params``: name → tensor (the parameters, in ``names`` order); each sample's loss is the cross-entropy of
    the model's output on that sample alone.
    """
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call, grad_and_value, vmap

    def one(params: dict[str, Any], x: Any, y: Any) -> Any:
        logits = functional_call(module, params, (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    each = vmap(grad_and_value(one), in_dims=(None, 0, 0))

    def fn(params: dict[str, Any], x: Any, y: Any) -> tuple[Any, Any]:
        grads, losses = each(params, x, y)
        return torch.cat([grads[name].reshape(x.shape[0], -1) for name in names], dim=1), losses

    return fn


def job_grad_fn(module: torch.nn.Module, names: list[str], clip: float) -> Callable[..., Any]:
    """The batched path's step for ``K`` jobs: ``vmap`` over jobs of the per-sample gradients (a nested vmap).

    ``f(params (K, …), x (K, B, F), y (K, B), mask (K, B), noise (K, P), denom (K,)) -> (gradients (K, P),
    loss sums (K,))``: each job's clipped per-sample gradients of its real samples (``mask`` 1; padding 0),
    summed, plus its noise, divided by its ``b``.
    """
    from torch.func import vmap

    per_sample = per_sample_fn(module, names)

    def job(params: dict[str, Any], x: Any, y: Any, mask: Any, noise: Any, denom: Any) -> tuple[Any, Any]:
        flat, losses = per_sample(params, x, y)
        factor = clip_factors(flat.norm(dim=1), clip) * mask
        return ((factor @ flat) + noise) / denom, (losses * mask).sum()

    return vmap(job, in_dims=(0, 0, 0, 0, 0, 0))


def train_alone(module: torch.nn.Module, params: list[torch.Tensor], names: list[str], sgd: ExactSGD,
                x2d: np.ndarray, y: np.ndarray, rows: np.ndarray | None, n: int, spec: TrainSpec, seed: int,
                after_step: Callable[[], None]) -> tuple[float, int, int]:
    """One job's DP-SGD steps on ``module`` (whose parameters ``params`` are the trainer's flat views), the
    optimiser ``sgd`` already started. Returns ``(sum of the steps' mean losses, steps, samples)``.

    A step's loss is the mean of its sampled examples' losses (0 for an empty Poisson batch); ``samples``
    counts the examples sampled.
    """
    import torch

    dp = spec.dp_sgd
    assert dp is not None
    b = effective_batch(n, spec)
    std = float(dp.noise_multiplier) * float(dp.clip)
    gen = noise_generator(seed)
    fn = per_sample_fn(module, names)
    size = sum(p.numel() for p in params)
    loss_sum, samples = 0.0, 0
    steps = dp_batches(n, spec, seed)
    for pos in steps:
        sel = pos if rows is None else rows[pos]
        noise = draw_noise(gen, size, std)
        with torch.no_grad():
            if pos.size:
                xb = torch.from_numpy(np.ascontiguousarray(x2d[sel], dtype=np.float32))
                yb = torch.from_numpy(np.asarray(y[sel]).astype(np.int64, copy=False))
                detached = {name: p.detach() for name, p in zip(names, params)}
                flat, losses = fn(detached, xb, yb)
                total = (clip_factors(flat.norm(dim=1), float(dp.clip)) @ flat) + noise
                loss_sum += float(losses.mean().item())
            else:  # an empty Poisson batch: the noise alone
                total = noise
            grad = total / float(b)
            grads, offset = [], 0
            for p in params:
                grads.append(grad[offset: offset + p.numel()].view_as(p).clone())
                offset += p.numel()
            sgd.step(grads)
        after_step()
        samples += int(pos.size)
    return loss_sum, len(steps), samples
