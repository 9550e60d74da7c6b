"""pFedLA's server tasks: ``pfedla`` (one client's return) and ``pfedla_mean`` (an edge's mean).

Ma et al., "Layer-wised Model Aggregation for Personalized Federated Learning", CVPR 2022 (arXiv
2205.03993); the math and its provenance are in :mod:`hierfl.learn.pfedla`. The server point's state
holds ``models`` (``N × P``: every client's latest trained model) and ``hypernets`` (``N × H``: one
hypernetwork per client), created by the point's first ``pfedla`` task.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.learn.pfedla import client_update, store_mean
from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["pfedla", "pfedla_mean"]


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
    personal, flops, stats = client_update(ctx.state, trained, sent, trainer.layout, params)
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
