"""Server work of matched averaging (PFNM, FedMA) on flat MLP vectors of a fixed-capacity layout.

PFNM: Yurochkin et al., "Bayesian Nonparametric Federated Learning of Neural Networks", ICML 2019
(arXiv 1905.12022); FedMA: Wang et al., "Federated Learning with Matched Averaging", ICLR 2020
(arXiv 2002.06440). The matching itself is :mod:`hierfl.methods.matched.math`; this module cuts the models
into layers, keeps each model's *active* neurons and puts the result back into the run's layout.

Models of growing width live in the run's ``mlp`` layout (its ``hidden`` widths are the *capacity*):
a network whose hidden layer ``k`` is ``w_k`` wide uses the first ``w_k`` slots and leaves the others
dead (zero weights in and out, zero bias: :mod:`hierfl.core.mlp_layout`), which computes and trains
exactly like the narrow network. The global layer may grow up to the capacity (the matching opens no
atom beyond it).

Every function returns the operation count the server is charged for (docs/explanation/algorithms.md:
``3·r·c·D + r·c·min(r, c)`` per assignment, plus one pass over the weights averaged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hierfl.methods.matched.math import (
    class_average,
    match_fc_layer,
    match_mlp,
    permute_inputs,
)
from hierfl.core.mlp_layout import Layers, mlp_layers, mlp_vector

if TYPE_CHECKING:
    from hierfl.models import ModelConfig

__all__ = ["Shape", "active_layers", "embed", "fedma_final", "fedma_layer", "init_models", "pfnm_global", "submodel"]


class Shape:
    """An MLP's sizes: input features ``D``, hidden capacity per layer and classes ``C``."""

    def __init__(self, in_features: int, hidden: Sequence[int], classes: int) -> None:
        self.D = int(in_features)
        self.hidden = [int(h) for h in hidden]
        self.C = int(classes)

    def layers(self, params: np.ndarray) -> Layers:
        """The capacity-layout layers of a flat vector (float64 copies)."""
        return [(np.array(W, dtype=np.float64), np.array(b, dtype=np.float64))
                for W, b in mlp_layers(params, self.D, self.hidden, self.C)]


def active_layers(layers: Layers, widths: Sequence[int]) -> Layers:
    """The narrow network a capacity-layout model holds: hidden layer ``k`` cut to its first ``widths[k]``."""
    rows = [*widths, layers[-1][0].shape[0]]
    cols = [layers[0][0].shape[1], *widths]
    return [(W[:r, :c], b[:r]) for (W, b), r, c in zip(layers, rows, cols)]


def embed(layers: Layers, shape: Shape) -> np.ndarray:
    """A narrow network put into the capacity layout (dead neurons in the free slots), as float32."""
    full: Layers = []
    dims = [shape.D, *shape.hidden, shape.C]
    for k, (W, b) in enumerate(layers):
        Wf = np.zeros((dims[k + 1], dims[k]))
        bf = np.zeros(dims[k + 1])
        if W.shape[0] > dims[k + 1] or W.shape[1] > dims[k]:
            raise ValueError(f"layer {k} of shape {W.shape} does not fit the capacity {dims[k + 1]}×{dims[k]}")
        Wf[: W.shape[0], : W.shape[1]] = W
        bf[: b.shape[0]] = b
        full.append((Wf, bf))
    return mlp_vector(full)


def init_models(model_cfg: ModelConfig, input_shape: tuple[int, ...], shape: Shape, seeds: Sequence[int],
                widths: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Each client's own initialisation (the authors' code initialises every client's network apart):
    the run's model drawn from ``seeds[j]``, cut to ``widths[j]`` active neurons per hidden layer."""
    from hierfl.learn.local import init_params

    out = []
    for seed, w in zip(seeds, widths):
        full = shape.layers(init_params(model_cfg, input_shape, shape.C, int(seed)))
        out.append(embed(active_layers(full, w), shape))
    return out


def pfnm_global(models: Sequence[np.ndarray], widths: Sequence[Sequence[int]], counts: Sequence[np.ndarray] | None,
                shape: Shape, sigma2: float, sigma0_2: float, gamma: float, iters: int,
                rng: np.random.Generator) -> tuple[np.ndarray, list[int], list[list[np.ndarray]], float]:
    """PFNM's one-shot matching of whole MLPs: the global model (capacity layout), its hidden widths, the
    per-layer per-client assignments and the operations (matching plus one pass over every input)."""
    clients = [active_layers(shape.layers(m), w) for m, w in zip(models, widths)]
    match = match_mlp(clients, counts, sigma2, sigma0_2, gamma, iters, rng, shape.hidden)
    ops = match.ops + float(sum(np.asarray(m).size for m in models))
    return embed(match.layers, shape), match.widths, match.assignments, ops


def fedma_layer(models: Sequence[np.ndarray], widths: Sequence[Sequence[int]], layer: int, shape: Shape,
                sigma2: float, sigma0_2: float, gamma: float, iters: int, rng: np.random.Generator
                ) -> tuple[list[np.ndarray], int, list[np.ndarray], float]:
    """One FedMA sub-round on hidden layer ``layer`` (0-based): match the clients' neurons of that layer
    (their input side already reads the previous global layer), give every client the global layer and
    move its next layer's input side to the global order (:func:`~hierfl.methods.matched.math.permute_inputs`).

    ``widths[j]``: client ``j``'s active widths; layers before ``layer`` must already agree. Returns the
    clients' models after the sub-round (capacity layout), the global width of the layer, the assignments
    and the operations.
    """
    clients = [active_layers(shape.layers(m), w) for m, w in zip(models, widths)]
    if layer > 0 and len({w[layer - 1] for w in widths}) != 1:
        raise ValueError(f"fedma_layer: layer {layer}'s inputs differ in width across clients: "
                         f"{[w[layer - 1] for w in widths]}")
    Ws = [c[layer][0] for c in clients]
    bs = [c[layer][1] for c in clients]
    Wg, bg, lm = match_fc_layer(Ws, bs, sigma2, sigma0_2, gamma, iters, rng, shape.hidden[layer])
    width = Wg.shape[0]
    out = []
    for c, assign in zip(clients, lm.assignments):
        new = list(c)
        new[layer] = (Wg, bg)
        W_next, b_next = c[layer + 1]
        new[layer + 1] = (permute_inputs(W_next, assign, width), b_next)
        out.append(embed(new, shape))
    ops = lm.ops + float(sum(W.size + b.size for W, b in zip(Ws, bs)))
    return out, width, lm.assignments, ops


def fedma_final(models: Sequence[np.ndarray], widths: Sequence[int], counts: Sequence[np.ndarray],
                shape: Shape) -> tuple[np.ndarray, float]:
    """FedMA's last step: the hidden layers every client now shares (``widths``) and the output layer
    averaged per class by the clients' class frequencies (:func:`~hierfl.methods.matched.math.class_average`).
    Returns the global model and the operations (two per averaged weight and client)."""
    clients = [active_layers(shape.layers(m), widths) for m in models]
    W, b = class_average([c[-1][0] for c in clients], [c[-1][1] for c in clients], counts)
    layers = list(clients[0][:-1]) + [(W, b)]
    return embed(layers, shape), float(2 * len(models) * (W.size + b.size))


def submodel(model: np.ndarray, widths: Sequence[int], assignments: Sequence[np.ndarray],
             shape: Shape) -> tuple[np.ndarray, list[int]]:
    """A client's matched sub-network: the global network ``model`` (active ``widths``) seen in the client's
    own neuron order — hidden layer ``k``'s neuron ``l`` is global neuron ``assignments[k][l]`` — so its
    width is the client's own (PFNM's later rounds: ``pfnm_communication.py`` gives each client the global
    weights its neurons were matched to). Returns the vector (capacity layout) and the client's widths."""
    full = active_layers(shape.layers(model), widths)
    idx = [np.asarray(a, dtype=np.int64) for a in assignments]
    if len(idx) != len(full) - 1 or any(i.size and (i.min() < 0 or i.max() >= w) for i, w in zip(idx, widths)):
        raise ValueError(f"submodel: assignments {[i.tolist() for i in idx]} do not index widths {list(widths)}")
    layers: Layers = []
    for k, (W, b) in enumerate(full):
        rows = idx[k] if k < len(idx) else np.arange(W.shape[0])
        cols = idx[k - 1] if k > 0 else np.arange(W.shape[1])
        layers.append((W[np.ix_(rows, cols)], b[rows]))
    return embed(layers, shape), [int(i.size) for i in idx]
