"""pFedLA's server tasks: ``pfedla`` (one client's return), ``pfedla_init`` (a store of per-client initial
models) and ``pfedla_mean`` (an edge's mean).

Ma et al., "Layer-wised Model Aggregation for Personalized Federated Learning", CVPR 2022 (arXiv
2205.03993); the math and its provenance are in :mod:`hierfl.methods.pfedla.trainer`. The server point's state
holds ``models`` (``N × P``: every client's latest trained model) and ``hypernets`` (``N × H``: one
hypernetwork per client), created by the point's ``pfedla_init`` task or else by its first ``pfedla`` task.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.methods.pfedla.math import layer_groups
from hierfl.learn.local import init_params
from hierfl.methods.pfedla.trainer import HyperShape, client_update, create_store, store_mean
from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["pfedla", "pfedla_init", "pfedla_mean"]


def _example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    p = ctx.trainer(0).num_params
    params = {"client": 1, "clients": 3, "seeds": [1, 2, 3], "hn_lr": 5e-3, "embed_dim": 4, "hidden_dim": 4,
              "k_keep": 0, "vjp_sign": "old_minus_new", "granularity": "layer"}
    return [np.full(p, 0.5, dtype=np.float32), np.zeros(p, dtype=np.float32)], params


@server_task("pfedla", example=_example)
def pfedla(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
           rng: np.random.Generator) -> ServerResult:
    """``inputs``: client ``params["client"]``'s trained model and the personalised model it trained from;
    output: its next personalised model. Charged ``6·N·P + 4·F_hn`` FLOPs (design default)."""
    trainer = ctx.trainer(0)
    trained = np.asarray(inputs[0], dtype=np.float32)
    sent = np.asarray(inputs[1], dtype=np.float32)
    personal, flops, stats = client_update(ctx.state, trained, sent, trainer.layout, params, device=ctx.device,
                                           transfers=ctx.transfers)
    return ServerResult([personal], flops, stats)


def _mean_example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    return [np.full(ctx.trainer(0).num_params, 0.25, dtype=np.float32)], {}


@server_task("pfedla_mean", example=_mean_example)
def pfedla_mean(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                rng: np.random.Generator) -> ServerResult:
    """The plain mean of the point's stored models (``cloud: average``), ``N·P`` FLOPs (design default);
    before any client has returned, every stored model is the initial one, ``inputs[0]`` (free)."""
    if "models" not in ctx.state:
        return ServerResult([np.asarray(inputs[0], dtype=np.float32)], 0.0, {})
    mean, flops = store_mean(ctx.state)
    return ServerResult([mean], flops, {})


def _init_example(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    _, params = _example(ctx)
    return [], {**params, "model_seeds": [4, 5, 6]}


@server_task("pfedla_init", example=_init_example)
def pfedla_init(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                rng: np.random.Generator) -> ServerResult:
    """``pfedla.init: per_client``: every client's initial model drawn from its own seed
    (``params["model_seeds"]``, the older third-party code's form) and the hypernetworks; outputs the N
    models, in client order. Drawing initial weights is not charged (a setup step, design default)."""
    trainer = ctx.trainer(0)
    seeds = [int(s) for s in params["model_seeds"]]
    models = np.stack([init_params(trainer.model_cfg, trainer.input_shape, trainer.num_classes, s) for s in seeds])
    groups = layer_groups(trainer.layout, params.get("granularity", "layer"))
    shape = HyperShape(int(params["embed_dim"]), int(params["hidden_dim"]), len(groups), len(seeds))
    create_store(ctx.state, shape, models, params["seeds"])
    return ServerResult([m.copy() for m in ctx.state["models"]], 0.0, {})
