"""An MLP's flat parameter vector as layers, and the same network rebuilt in a new layout (numpy only).

hierfl's ``mlp`` model (:class:`hierfl.models.MLPConfig`) lays its flat vector out as
``W_1, b_1, W_2, b_2, …, W_n, b_n`` with ``W_k`` of shape ``(out, in)`` (``module.parameters()`` order).
Matched averaging (docs/explanation/algorithms.md §9) changes the hidden widths between rounds;
:func:`relayout` moves a network into a layout of other widths, keeping each kept neuron's weights and
giving added neurons zero incoming and outgoing weights and zero bias.

A zero neuron is *dead* and stays dead: its pre-activation is 0, ReLU's derivative at 0 is 0 in torch and
its outgoing weights are 0, so every gradient touching it is 0 (momentum and weight decay of zeros are
zeros). A narrow network embedded in a wider layout therefore computes and trains exactly like the
narrow one, which is how matched models of growing width live in one fixed-capacity layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Layers", "frozen_prefix", "mlp_layers", "mlp_size", "mlp_vector", "relayout"]

Layers = list[tuple[np.ndarray, np.ndarray]]


def _dims(in_features: int, hidden: Sequence[int], classes: int) -> list[int]:
    dims = [int(in_features), *(int(h) for h in hidden), int(classes)]
    if any(d < 1 for d in dims):
        raise ValueError(f"an MLP needs positive sizes, got input {in_features}, hidden {list(hidden)}, classes {classes}")
    return dims


def mlp_size(in_features: int, hidden: Sequence[int], classes: int) -> int:
    """Length of the flat vector of an MLP with these sizes."""
    dims = _dims(in_features, hidden, classes)
    return sum(dims[k + 1] * dims[k] + dims[k + 1] for k in range(len(dims) - 1))


def frozen_prefix(in_features: int, hidden: Sequence[int], classes: int, layers: int) -> int:
    """How many leading entries of the flat vector the first ``layers`` linear layers hold (what a job
    with layers ``1..layers`` frozen, as layer-wise matching does, keeps: :attr:`hierfl.core.work.TrainSpec.frozen`)."""
    dims = _dims(in_features, hidden, classes)
    if not 0 <= layers <= len(dims) - 1:
        raise ValueError(f"layers must be in [0, {len(dims) - 1}], got {layers}")
    return sum(dims[k + 1] * dims[k] + dims[k + 1] for k in range(layers))


def mlp_layers(params: np.ndarray, in_features: int, hidden: Sequence[int], classes: int) -> Layers:
    """The ``(W_k, b_k)`` of a flat MLP vector (views into ``params``)."""
    dims = _dims(in_features, hidden, classes)
    params = np.asarray(params)
    if params.shape != (mlp_size(in_features, hidden, classes),):
        raise ValueError(f"expected a flat vector of {mlp_size(in_features, hidden, classes)} entries for an MLP "
                         f"{dims}, got shape {params.shape}")
    out: Layers = []
    at = 0
    for k in range(len(dims) - 1):
        n_w = dims[k + 1] * dims[k]
        out.append((params[at:at + n_w].reshape(dims[k + 1], dims[k]), params[at + n_w:at + n_w + dims[k + 1]]))
        at += n_w + dims[k + 1]
    return out


def mlp_vector(layers: Layers, dtype: type = np.float32) -> np.ndarray:
    """The flat vector of ``(W_k, b_k)`` layers (the inverse of :func:`mlp_layers`)."""
    return np.concatenate([np.concatenate([np.asarray(W).ravel(), np.asarray(b).ravel()]) for W, b in layers]).astype(dtype)


def relayout(params: np.ndarray, in_features: int, hidden: Sequence[int], new_hidden: Sequence[int],
             classes: int, keep: Sequence[int] | None = None) -> np.ndarray:
    """The network ``params`` (hidden widths ``hidden``) rebuilt with hidden widths ``new_hidden``.

    Hidden layer ``k`` keeps its first ``keep[k]`` neurons (default ``min(hidden[k], new_hidden[k])``) in
    the same slots; every other slot of the new layout is a dead neuron (zeros). Widening and then
    narrowing back to the old widths returns the original vector.
    """
    if len(new_hidden) != len(hidden):
        raise ValueError(f"relayout keeps the depth: {len(hidden)} hidden layers, got {len(new_hidden)}")
    keep_w = [min(a, b) for a, b in zip(hidden, new_hidden)] if keep is None else [int(k) for k in keep]
    if any(k < 0 or k > min(a, b) for k, a, b in zip(keep_w, hidden, new_hidden)):
        raise ValueError(f"keep must be within both widths, got {keep_w} for {list(hidden)} → {list(new_hidden)}")
    old = mlp_layers(params, in_features, hidden, classes)
    new = mlp_layers(np.zeros(mlp_size(in_features, new_hidden, classes), dtype=np.asarray(params).dtype),
                     in_features, new_hidden, classes)
    rows = [*keep_w, classes]
    cols = [in_features, *keep_w]
    for (Wo, bo), (Wn, bn), r, c in zip(old, new, rows, cols):
        Wn[:r, :c] = Wo[:r, :c]
        bn[:r] = bo[:r]
    return mlp_vector(new, dtype=np.asarray(params).dtype)
