"""``fedftg``: FedFTG's fine-tuning of the averaged model at the server, as one server task.

Zhang et al., "Fine-tuning Global Model via Data-Free Knowledge Distillation for Non-IID Federated
Learning", CVPR 2022 (arXiv 2203.09249). ``inputs``: the round's client models (the teachers), all
of the run's architecture 0; the student is their average ``Σ w_k θ_k / Σ w_k`` (the cloud's
aggregation, computed here: it is instantaneous in virtual time, as every aggregation). ``params``:
the teachers' ``weights`` (K), their label histograms ``counts`` (K × C), ``noise_seed`` (the seed
of the generator's draws, which FedFTG takes from the stream ``("generator_noise", round)``; the
job's own stream when absent) and the :class:`~hierfl.methods.fedftg.trainer.FTGSettings` fields. The
generator lives in the server point's state (``ctx.state``) from one task to the next. The generator,
the student and the teachers are built on the server's device (``ctx.device``).

Charged (ALGORITHMS_2 conventions, counted from the authors' loops)
``B·I·[I_g·K·3(F_G + F_T + F_S) + I_d·(F_G + 3F_S + K·F_T)]`` FLOPs, ``F_T = F_S = F(model)`` and
``F_G`` the generator's forward FLOPs (:func:`hierfl.methods.fedftg.trainer.generator_flops`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hierfl.methods.fedftg.math import finetune_flops
from hierfl.methods.fedftg.trainer import FTGSettings, build_generator, finetune, generator_flops
from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["fedftg", "settings_of", "weighted_mean"]

_FIELDS = {f.name for f in dataclasses.fields(FTGSettings)}
_DATA = {"counts", "weights", "noise_seed"}


def settings_of(params: dict[str, Any]) -> FTGSettings:
    """The job's settings from the protocol's ``params`` (unknown keys are refused, missing ones default)."""
    unknown = set(params) - _FIELDS - _DATA
    if unknown:
        raise ValueError(f"fedftg: unknown parameters {sorted(unknown)}; allowed: {sorted(_FIELDS | _DATA)}")
    return FTGSettings(**{k: v for k, v in params.items() if k in _FIELDS})


def weighted_mean(models: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """``Σ w_k θ_k / Σ w_k`` summed in float64 in the given order, as float32."""
    if weights.shape != (len(models),) or (weights < 0).any() or not weights.sum() > 0:
        raise ValueError(f"fedftg needs one non-negative weight per teacher with a positive sum, got {weights}")
    acc = np.zeros(models[0].shape, dtype=np.float64)
    for w, m in zip(weights, models):
        acc += w * m.astype(np.float64)
    return (acc / weights.sum()).astype(np.float32)


def _example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Two teachers (zero and one-valued models) with label-skewed histograms, one short iteration."""
    n = ctx.trainer(0).num_params
    c = ctx.num_classes
    teachers = [np.zeros(n, dtype=np.float32), np.full(n, 0.1, dtype=np.float32)]
    counts = [[3] + [0] * (c - 1), [1] * c]
    return teachers, {"weights": [1.0, 2.0], "counts": counts, "iters": 1, "batch_size": 4, "noise_dim": 2,
                      "gen_width": 2}


@server_task("fedftg", example=_example)
def fedftg(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
           rng: np.random.Generator) -> ServerResult:
    """Fine-tune ``inputs[0]`` against the teachers ``inputs[1:]``; output: the fine-tuned vector."""
    import torch

    if not inputs:
        raise ValueError("fedftg needs at least one teacher")
    trainer = ctx.trainer(0)
    if torch.get_num_threads() != trainer.torch_threads:  # results depend on the thread count
        torch.set_num_threads(trainer.torch_threads)
    n = trainer.num_params
    teachers = [np.asarray(v, dtype=np.float32)[:n] for v in inputs]
    s = settings_of(params)
    counts = np.asarray(params["counts"], dtype=np.float64)
    student = weighted_mean(teachers, np.asarray(params.get("weights", [1.0] * len(teachers)), dtype=np.float64))
    # the protocol's seed from the stream ("generator_noise", round) when it gives one, else the job's stream
    draws = np.random.default_rng(int(params["noise_seed"])) if "noise_seed" in params else rng
    # on the server's device (ctx.device); the draws stay on the CPU streams, the crossings are counted
    out, stats = finetune(trainer.model_cfg, ctx.input_shape, ctx.num_classes, student, teachers, counts, s,
                          ctx.state, draws, device=ctx.device, transfers=ctx.transfers)
    f_gen = generator_flops(build_generator(s.noise_dim, ctx.num_classes, ctx.input_shape, s.gen_width, 0),
                            s.noise_dim, ctx.num_classes)
    f_model = float(ctx.forward_flops(0))
    flops = finetune_flops(s.batch_size, s.iters, s.gen_steps, s.student_steps, len(teachers), float(f_gen),
                           f_model, f_model)
    stats = dict(stats, teachers=float(len(teachers)), gen_flops=float(f_gen))
    return ServerResult([out], flops, stats)
