"""Server tasks of matched averaging: ``matched_init``, ``pfnm_match``, ``fedma_layer``, ``fedma_final``.

PFNM (Yurochkin et al., ICML 2019, arXiv 1905.12022) and FedMA (Wang et al., ICLR 2020, arXiv
2002.06440); the work itself is :mod:`hierfl.methods.matched.trainer` over :mod:`hierfl.methods.matched.math`. Each task
charges an operation count (docs/explanation/algorithms.md, "PFNM and FedMA": ``3·r·c·D + r·c·min(r, c)``
per assignment plus one pass over the weights), never a measured time.

The models are the run's ``mlp`` (its ``hidden`` is the capacity); ``params`` may name the shape
(``in_features``, ``hidden``, ``classes``) instead, as the conformance examples do. ``widths``: each
input's active hidden widths (None: the capacity). ``clients``: the ids the inputs belong to; each
matching keeps the clients' assignments in the point's state (``assign<layer>.<client>``), the per-client
state FedMA's server holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hierfl.methods.matched.trainer import (
    Shape,
    fedma_final,
    fedma_layer,
    init_models,
    pfnm_global,
    submodel,
)
from hierfl.learn.server_tasks import ServerContext, ServerResult, server_task

__all__ = ["fedma_final_task", "fedma_layer_task", "matched_init", "matched_submodels", "pfnm_match"]


def _shape(ctx: ServerContext, params: dict[str, Any]) -> Shape:
    if "hidden" in params:
        return Shape(int(params["in_features"]), list(params["hidden"]), int(params["classes"]))
    cfg = ctx.trainer(0).model_cfg
    hidden = getattr(cfg, "hidden", None)
    if getattr(cfg, "name", None) != "mlp" or hidden is None:
        raise ValueError(f"matched averaging needs the mlp model, got {getattr(cfg, 'name', cfg)!r}")
    return Shape(math.prod(ctx.input_shape), list(hidden), int(ctx.num_classes))


def _widths(shape: Shape, params: dict[str, Any], count: int) -> list[list[int]]:
    widths = params.get("widths")
    if widths is None:
        return [list(shape.hidden) for _ in range(count)]
    if widths and isinstance(widths[0], (int, np.integer)):  # one width list for every input
        return [[int(w) for w in widths] for _ in range(count)]
    return [[int(w) for w in ws] for ws in widths]


def _shape_stats(shape: Shape) -> dict[str, float]:
    stats = {"in_features": float(shape.D), "classes": float(shape.C), "layers": float(len(shape.hidden))}
    stats.update({f"capacity{k}": float(h) for k, h in enumerate(shape.hidden)})
    return stats


def _keep(ctx: ServerContext, params: dict[str, Any], layer: int, assignments: list[np.ndarray]) -> None:
    clients = params.get("clients") or list(range(len(assignments)))
    for c, a in zip(clients, assignments):
        ctx.state[f"assign{layer}.{int(c)}"] = np.asarray(a, dtype=np.int32)


def _knobs(params: dict[str, Any]) -> tuple[float, float, float, int]:
    return (float(params.get("sigma2", 1.0)), float(params.get("sigma0_2", 1.0)), float(params.get("gamma", 7.0)),
            int(params.get("iters", 5)))


_EX = {"in_features": 4, "hidden": [3], "classes": 2}


def _ex_models(ctx: ServerContext) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(size=4 * 3 + 3 + 2 * 3 + 2).astype(np.float32) for _ in range(2)]


@server_task("matched_init", example=lambda ctx: ([np.zeros(23, dtype=np.float32)],
                                                  {**_EX, "seeds": [1, 2], "widths": [2]}))
def matched_init(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                 rng: np.random.Generator) -> ServerResult:
    """One network per seed in ``params["seeds"]`` (the run's ``mlp`` drawn from it), cut to ``widths``
    active neurons. Devices draw their own initialisation, so the task charges nothing. Stats: the
    capacity layout (``in_features``, ``classes``, ``layers``, ``capacity<k>``)."""
    from hierfl.models import MLPConfig

    shape = _shape(ctx, params)
    seeds = [int(s) for s in params["seeds"]]
    widths = _widths(shape, params, len(seeds))
    if any(len(w) != len(shape.hidden) or any(a > h for a, h in zip(w, shape.hidden)) for w in widths):
        raise ValueError(f"widths {widths} do not fit the capacity {shape.hidden}")
    cfg = MLPConfig(hidden=shape.hidden)
    return ServerResult(init_models(cfg, (shape.D,), shape, seeds, widths), 0.0, _shape_stats(shape))


@server_task("pfnm_match", example=lambda ctx: (_ex_models(ctx), {**_EX, "iters": 1, "counts": [[3, 1], [1, 3]]}))
def pfnm_match(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
               rng: np.random.Generator) -> ServerResult:
    """PFNM's one-shot matching of the input networks (:func:`~hierfl.methods.matched.trainer.pfnm_global`); one input
    is returned as it is; ``rule: average`` averages them coordinate by coordinate (``weights``). ``counts``:
    each input's class histogram (None: equal shares). Stats: the global hidden widths (``width<k>``) and the
    operations (``ops``).
    """
    shape = _shape(ctx, params)
    widths = _widths(shape, params, len(inputs))
    if len(inputs) == 1:
        out, g_widths, ops = np.asarray(inputs[0], dtype=np.float32), widths[0], 0.0
    elif params.get("rule", "match") == "average":  # the baseline: coordinate-wise, weighted by samples
        w = np.asarray(params.get("weights") or [1.0] * len(inputs), dtype=np.float64)
        out = (sum(wi * np.asarray(x, dtype=np.float64) for wi, x in zip(w, inputs)) / w.sum()).astype(np.float32)
        g_widths = [max(ws[k] for ws in widths) for k in range(len(shape.hidden))]
        ops = float(2 * len(inputs) * out.size)
    else:
        counts = params.get("counts")
        counts_arr = None if counts is None else [np.asarray(c, dtype=np.float64) for c in counts]
        sigma2, sigma0_2, gamma, iters = _knobs(params)
        out, g_widths, assignments, ops = pfnm_global(inputs, widths, counts_arr, shape, sigma2, sigma0_2, gamma,
                                                      iters, rng)
        for k, layer_assign in enumerate(assignments):
            _keep(ctx, params, k, layer_assign)
    stats = {f"width{k}": float(w) for k, w in enumerate(g_widths)}
    stats["ops"] = float(ops)
    return ServerResult([out], ops, stats)


@server_task("fedma_layer", example=lambda ctx: (_ex_models(ctx), {**_EX, "iters": 1, "layer": 0}))
def fedma_layer_task(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                     rng: np.random.Generator) -> ServerResult:
    """FedMA's sub-round on hidden layer ``params["layer"]`` (:func:`~hierfl.methods.matched.trainer.fedma_layer`):
    one output per input, the input after taking the global layer. Stats: ``width`` and ``ops``."""
    shape = _shape(ctx, params)
    widths = _widths(shape, params, len(inputs))
    layer = int(params["layer"])
    if len(inputs) == 1:
        return ServerResult([np.asarray(inputs[0], dtype=np.float32)], 0.0,
                            {"width": float(widths[0][layer]), "ops": 0.0})
    sigma2, sigma0_2, gamma, iters = _knobs(params)
    outs, width, assignments, ops = fedma_layer(inputs, widths, layer, shape, sigma2, sigma0_2, gamma, iters, rng)
    _keep(ctx, params, layer, assignments)
    return ServerResult(outs, ops, {"width": float(width), "ops": float(ops)})


@server_task("fedma_final", example=lambda ctx: (_ex_models(ctx), {**_EX, "counts": [[3, 1], [1, 3]]}))
def fedma_final_task(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                     rng: np.random.Generator) -> ServerResult:
    """FedMA's output layer averaged per class by the inputs' class frequencies (``counts``; None: equal);
    the hidden layers are the first input's (they are the same global layers in every input)."""
    shape = _shape(ctx, params)
    widths = params.get("widths")
    widths = list(shape.hidden) if widths is None else [int(w) for w in widths]
    counts = params.get("counts")
    counts_arr = ([np.ones(shape.C)] * len(inputs) if counts is None
                  else [np.asarray(c, dtype=np.float64) for c in counts])
    out, ops = fedma_final(inputs, widths, counts_arr, shape)
    return ServerResult([out], ops, {"ops": float(ops)})


def _ex_submodels(ctx: ServerContext) -> tuple[list[np.ndarray], dict[str, Any]]:
    ctx.state["assign0.0"] = np.array([2, 0], dtype=np.int32)
    return [_ex_models(ctx)[0]], {**_EX, "clients": [0, 1], "widths": [3]}


@server_task("matched_submodels", example=_ex_submodels)
def matched_submodels(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                      rng: np.random.Generator) -> ServerResult:
    """Each client's matched sub-network of the global network ``inputs[0]`` (active ``widths``), from the
    assignments of the point's last matching (:func:`~hierfl.methods.matched.trainer.submodel`); a client the point
    never matched gets the whole network. Stats: each client's widths (``width<k>.<i>``, ``i`` its
    position in ``clients``). Charged one operation per entry of each output."""
    shape = _shape(ctx, params)
    widths = [int(w) for w in params["widths"]]
    outs: list[np.ndarray] = []
    stats: dict[str, float] = {}
    ops = 0.0
    for i, c in enumerate(params["clients"]):
        keys = [f"assign{k}.{int(c)}" for k in range(len(shape.hidden))]
        if all(k in ctx.state for k in keys):
            out, w = submodel(inputs[0], widths, [ctx.state[k] for k in keys], shape)
        else:
            out, w = np.asarray(inputs[0], dtype=np.float32), list(widths)
        outs.append(out)
        ops += float(out.size)
        stats.update({f"width{k}.{i}": float(x) for k, x in enumerate(w)})
    return ServerResult(outs, ops, stats)
