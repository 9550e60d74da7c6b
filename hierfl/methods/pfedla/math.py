"""pFedLA's layer-wise aggregation: aggregation units of a flat model and per-layer weighted sums.

Ma, Zhang, Guo, Xu, "Layer-wised Model Aggregation for Personalized Federated Learning", CVPR 2022 (arXiv
2205.03993), as a third-party implementation has it (docs/explanation/algorithms.md, pFedLA). Pure numpy:
the hypernetworks that produce the weights are in :mod:`hierfl.methods.pfedla.trainer`. Sums over clients run in client
order in float64, element-wise (no BLAS reductions), so the bits do not depend on thread counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = ["Granularity", "kept_layers", "layer_groups", "layer_weights", "personalise"]

Granularity = Literal["layer", "tensor"]


def layer_groups(layout: Sequence[tuple[str, tuple[int, ...]]],
                 granularity: Granularity = "layer") -> list[np.ndarray]:
    """Flat indices of each aggregation unit of a model with ``layout`` (``(name, shape)`` per parameter).

    ``"layer"``: the parameters of one module (``layers.0.weight`` and ``layers.0.bias``) share one unit,
    like the unofficial code's blocks (one conv or linear layer each); ``"tensor"``: every parameter
    tensor is a unit of its own.
    """
    groups: dict[str, list[np.ndarray]] = {}
    offset = 0
    for name, shape in layout:
        size = math.prod(shape)
        key = name.rsplit(".", 1)[0] if granularity == "layer" else name
        groups.setdefault(key, []).append(np.arange(offset, offset + size, dtype=np.int64))
        offset += size
    if not groups:
        raise ValueError("a model without parameters has no layers to aggregate")
    return [np.concatenate(parts) for parts in groups.values()]


def kept_layers(alpha: np.ndarray, client: int, k_keep: int) -> list[int]:
    """HeurpFedLA: the ``k_keep`` layers with the largest self-weight ``α^{l,client}`` (ties: the earlier
    layer), in layer order."""
    if k_keep <= 0:
        return []
    layers = alpha.shape[0]
    if k_keep > layers:
        raise ValueError(f"pfedla.k_keep = {k_keep} exceeds the model's {layers} layers; allowed: 0..{layers}")
    order = np.argsort(-alpha[:, client], kind="stable")
    return sorted(int(x) for x in order[:k_keep])


def layer_weights(alpha: np.ndarray, client: int, kept: Sequence[int] = ()) -> np.ndarray:
    """The normalised weights ``â`` (``(layers, clients)``, float64): each row ``α^l / Σ α^l``; the one-hot
    weight of ``client`` where a row sums to 0 or the layer is kept."""
    alpha = np.asarray(alpha, dtype=np.float64)
    out = np.zeros_like(alpha)
    totals = alpha.sum(axis=1)
    for l in range(alpha.shape[0]):
        if l in kept or not totals[l] > 0:
            out[l, client] = 1.0
        else:
            out[l] = alpha[l] / totals[l]
    return out


def personalise(models: np.ndarray, groups: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """``θ̄^l = Σ_j w^{l,j} θ_j^l`` for every layer ``l``: ``models`` ``(clients, P)``, ``weights``
    ``(layers, clients)``; float32 out, summed in float64 in client order."""
    models = np.asarray(models)
    if weights.shape != (len(groups), models.shape[0]):
        raise ValueError(f"weights of shape {weights.shape} do not match {len(groups)} layers × "
                         f"{models.shape[0]} clients")
    out = np.empty(models.shape[1], dtype=np.float32)
    for l, idx in enumerate(groups):
        acc = np.zeros(idx.size, dtype=np.float64)
        for j in range(models.shape[0]):
            w = float(weights[l, j])
            if w != 0.0:
                acc += w * models[j, idx].astype(np.float64)
        out[idx] = acc
    return out
