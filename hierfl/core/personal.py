"""Personalisation as data: which parameters stay on a device, and how a device adapts (pure, no torch).

A :class:`PersonalSpec` travels inside :class:`~hierfl.core.work.TrainSpec` (``TrainSpec.personal``)
to the device hosts, which run it with :mod:`hierfl.learn.personal`. It is frozen and hashable,
like the rest of the spec (executors group jobs by spec).

Layer splits (docs/explanation/algorithms.md §5.10). A *layer* is a module that owns parameters directly: the
prefix of a parameter name up to its last dot (``"2.weight"`` → ``"2"``), in the order of the
flat vector. ``local_layers`` names the layers that stay on the device:

* FedPer (Arivazhagan et al., arXiv 1912.00818): the last ``head_layers`` layers (the head);
* LG-FedAvg (Liang et al., arXiv 2001.01523): every layer but the last ``global_layers``.

Both may instead be given as lists of module names. :func:`resolve_layers` turns either form into
layer names and :func:`local_mask` into a boolean mask over the flat vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PersonalSpec", "layer_names", "resolve_layers", "local_mask", "support_split", "local_test_split",
           "weighted_quantiles", "weighted_tail_mean", "LayerSplitError", "device_accuracy_fields"]

LayerSel = int | tuple[str, ...]


class LayerSplitError(ValueError):
    """A layer split that does not fit the model (too many layers, unknown names, nothing left global)."""


@dataclass(frozen=True)
class PersonalSpec:
    """What a personalised local job does on its device.

    ``kind``: ``split`` (personalisation layers: train the whole model, keep ``local`` layers),
    ``maml`` (a meta-learned initialisation with MAML), ``meta_sgd`` (a meta-learned initialisation
    with Meta-SGD: the global vector is ``[θ; α]``), ``finetune`` (plain SGD in training, fine-tuning
    at evaluation).
    """

    kind: str
    local: LayerSel = 0                # layers kept on the device (as head count, see ``from_end``) or names
    from_end: bool = True              # int ``local``: the last k layers (local head) / all but the last k (local base)
    support_fraction: float = 0.2      # share of a device's samples in its support set (meta methods)
    inner_lr: float = 0.01             # α of MAML / initial α of Meta-SGD / the fine-tuning rate (finetune)
    inner_steps: int = 1               # adaptation steps on the support set (training and evaluation)
    first_order: bool = False          # MAML: drop the second-order term (FOMAML)
    split_seed: int = 0                # seeds each device's support/query split
    warmup_rounds: int = 0             # a local base: the first cloud rounds train the whole model (plain averaging)

    @property
    def meta(self) -> bool:
        """Whether jobs train on support/query splits (a meta-learned initialisation)."""
        return self.kind in ("maml", "meta_sgd")

    @property
    def adapts(self) -> bool:
        """Whether evaluation adapts on the support set first (meta methods and FedAvgMeta)."""
        return self.kind in ("maml", "meta_sgd", "finetune")

    @property
    def global_factor(self) -> int:
        """The global vector is this many model-sized blocks (Meta-SGD carries α beside θ)."""
        return 2 if self.kind == "meta_sgd" else 1


def layer_names(layout: Sequence[tuple[str, tuple[int, ...]]]) -> list[str]:
    """The model's layers (modules owning parameters), in flat-vector order."""
    out: list[str] = []
    for name, _ in layout:
        layer = name.rsplit(".", 1)[0] if "." in name else ""
        if not out or out[-1] != layer:
            out.append(layer)
    return out


def resolve_layers(layout: Sequence[tuple[str, tuple[int, ...]]], local: LayerSel, from_end: bool) -> list[str]:
    """Names of the layers that stay on the device; raises :class:`LayerSplitError` if the split does not fit.

    ``local`` an int ``k``: the last ``k`` layers (``from_end``, FedPer's head) or all but the last
    ``k`` (LG-FedAvg's global top). A tuple: those module names. At least one layer must stay
    global and (for a split) one local.
    """
    layers = layer_names(layout)
    if isinstance(local, int):
        if from_end:
            if not 0 <= local < len(layers):
                raise LayerSplitError(f"{local} head layers, but the model has {len(layers)} layers "
                                      f"({', '.join(layers)}); allowed: 0 to {len(layers) - 1}")
            return layers[len(layers) - local:] if local else []
        if not 1 <= local < len(layers):
            raise LayerSplitError(f"{local} global layers, but the model has {len(layers)} layers "
                                  f"({', '.join(layers)}); allowed: 1 to {len(layers) - 1}")
        return layers[: len(layers) - local]
    if local and local[0] == "!":  # LG-FedAvg by names: these are global, the rest stays local
        names = local[1:]
        unknown = [n for n in names if n not in layers]
        if unknown:
            raise LayerSplitError(f"unknown layers {list(unknown)}; the model's layers are {layers}")
        kept = [n for n in layers if n not in names]
        if not kept:
            raise LayerSplitError(f"every layer ({layers}) is global: nothing stays on the device")
        return kept
    unknown = [n for n in local if n not in layers]
    if unknown:
        raise LayerSplitError(f"unknown layers {unknown}; the model's layers are {layers}")
    if len(set(local)) >= len(layers):
        raise LayerSplitError(f"every layer ({layers}) would stay on the device: nothing left to federate")
    return [n for n in layers if n in local]


def local_mask(layout: Sequence[tuple[str, tuple[int, ...]]], layers: Sequence[str]) -> np.ndarray:
    """Boolean mask over the flat vector: True for the parameters of ``layers``."""
    keep = set(layers)
    parts = []
    for name, shape in layout:
        layer = name.rsplit(".", 1)[0] if "." in name else ""
        parts.append(np.full(int(np.prod(shape, dtype=np.int64)), layer in keep, dtype=bool))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def support_split(n: int, fraction: float, seed: int, device: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into a device's ``n`` samples) of its support and query sets.

    A seeded permutation of ``(seed, device)``; the support set is the first ``round(f·n)``, kept
    between 1 and ``n − 1`` so both sets are non-empty (a device with one sample uses it for both).
    """
    if n < 1:
        raise ValueError(f"device {device} has no samples")
    if n == 1:
        only = np.zeros(1, dtype=np.int64)
        return only, only
    perm = np.random.default_rng((int(seed), int(device))).permutation(n).astype(np.int64)
    k = min(max(int(round(fraction * n)), 1), n - 1)
    return np.sort(perm[:k]), np.sort(perm[k:])


def local_test_split(rows: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A device's rows → (training rows, held-out test rows): ``⌊f·n⌋`` test rows, at least 1 when
    ``f > 0`` and the device has 2 or more samples, and always one training row."""
    n = rows.size
    k = int(np.floor(fraction * n))
    if fraction > 0 and n >= 2:
        k = max(k, 1)
    k = min(k, n - 1)
    perm = rng.permutation(n)
    return np.sort(rows[perm[k:]]), np.sort(rows[perm[:k]])


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Quantiles of ``values`` where value ``i`` counts ``weights[i]`` times (the lower weighted quantile:
    the smallest value whose cumulative weight share reaches ``q``)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if values.size == 0 or total <= 0:
        raise ValueError("weighted quantiles need at least one value with positive weight")
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order]) / total
    return [float(values[order][min(int(np.searchsorted(cum, q - 1e-12)), values.size - 1)]) for q in qs]


def weighted_tail_mean(values: np.ndarray, weights: np.ndarray, share: float) -> float:
    """Mean of the lowest ``share`` of the weighted distribution of ``values`` (the device at the boundary
    counts with the part of its weight that falls inside): the worst decile's mean for ``share = 0.1``."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    if values.size == 0 or total <= 0 or not 0 < share <= 1:
        raise ValueError("a tail mean needs a share in (0, 1] and at least one value with positive weight")
    order = np.argsort(values, kind="stable")
    budget = share * total
    before = np.concatenate([[0.0], np.cumsum(weights[order])[:-1]])
    taken = np.clip(budget - before, 0.0, weights[order])  # each device's weight inside the tail
    return float((taken * values[order]).sum() / taken.sum())


def device_accuracy_fields(results: np.ndarray) -> dict[str, float | int]:
    """Eval-line fields from per-device ``(correct, tested, loss sum)`` rows: the sample-weighted mean,
    p10, p50 and p90 of per-device accuracy, the mean of its worst decile (``worst10``) and its
    sample-weighted standard deviation (``std``, the spread), the weighted mean loss and how many
    devices were tested."""
    results = np.asarray(results, dtype=np.float64)
    if results.size == 0:
        return {}
    correct, tested, loss = results[:, 0], results[:, 1], results[:, 2]
    acc = correct / tested
    p10, p50, p90 = weighted_quantiles(acc, tested, (0.1, 0.5, 0.9))
    mean = float(correct.sum() / tested.sum())
    std = float(np.sqrt((tested * (acc - mean) ** 2).sum() / tested.sum()))
    return {"device_accuracy_mean": mean, "device_accuracy_p10": p10,
            "device_accuracy_p50": p50, "device_accuracy_p90": p90,
            "device_accuracy_worst10": weighted_tail_mean(acc, tested, 0.1), "device_accuracy_std": std,
            "device_loss_mean": float(loss.sum() / tested.sum()), "device_eval_devices": int(acc.size)}
