"""The personalised trainers as data: which parameters stay on a device, and how a device adapts (pure, no torch).

Four trainers share one job method, :class:`PersonalJob` (docs/explanation/algorithms.md §5.10):

* FedPer (Arivazhagan, Aggarwal, Singh, Choudhary, "Federated Learning with Personalization Layers",
  arXiv 1912.00818): the base is global, the last ``head_layers`` layers (the head) stay on the device;
* LG-FedAvg (Liang, Liu, Ziyin, Allen, Auerbach, Brent, Salakhutdinov, Morency, "Think Locally, Act
  Globally", arXiv 2001.01523): every layer but the global top ``global_layers`` stays on the device;
* FedMeta (Chen, Luo, Dong, Li, He, "Federated Meta-Learning with Fast Convergence and Efficient
  Communication", arXiv 1802.07876) with MAML (Finn, Abbeel, Levine, ICML 2017) or Meta-SGD (Li, Zhou,
  Chen, Li, arXiv 1707.09835): a meta-learned initialisation, trained on support/query splits;
* FedAvgMeta (that paper's baseline): plain jobs, fine-tuning on the support set before a device is tested.

A device's local layers are its per-device state (name ``local``, :class:`~hierfl.core.method.StateStore`):
kept by its home host, checkpointed, counted in ``summary.json``'s ``device_state`` and forgotten when the
device moves under ``migration.device_state: reset``. A device without state takes its local layers from
the model devices start from (:attr:`JobContext.base <hierfl.core.method.JobContext.base>`: the initial
model, or LG-FedAvg's warm-up model). The torch work is in :mod:`hierfl.methods.personal.trainer`.

Layer splits. A *layer* is a module that owns parameters directly: the prefix of a parameter name up to
its last dot (``"2.weight"`` → ``"2"``), in the order of the flat vector. :func:`resolve_layers` turns a
count or a list of module names into layer names and :func:`local_mask` into a boolean mask over the flat
vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from hierfl.core.device_eval import support_split
from hierfl.core.method import JobMethod

__all__ = ["PersonalJob", "KINDS", "layer_names", "resolve_layers", "local_mask", "LayerSplitError"]

LayerSel = int | tuple[str, ...]
Layout = Sequence[tuple[str, tuple[int, ...]]]

KINDS = ("split", "maml", "meta_sgd", "finetune")


class LayerSplitError(ValueError):
    """A layer split that does not fit the model (too many layers, unknown names, nothing left global)."""


@dataclass(frozen=True)
class PersonalJob(JobMethod):
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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"PersonalJob: kind must be one of {KINDS}, got {self.kind!r}")

    # -- as a job method (hierfl.core.method): the local layers are per-device state of the home host -----
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("local",)
    device_evaluation: ClassVar[bool] = True  # a device is tested with its own layers (and adapted first)

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

    def result_width(self, num_params: int, num_classes: int, input_size: int) -> int:
        """The global vector: θ (local layers zeroed), followed by α for Meta-SGD."""
        return num_params * self.global_factor

    def with_run_seed(self, seed_of: Callable[[str], int]) -> PersonalJob:
        """Support/query splits are a function of the scenario seed (stream ``personal.support``)."""
        return replace(self, split_seed=seed_of("personal.support"))

    def initial_vector(self, params: np.ndarray, layout: Callable[[], Layout]) -> tuple[np.ndarray, int] | None:
        """``[θ; α]`` for Meta-SGD (α starts at ``inner_lr`` everywhere and is learned with θ), else θ; a message
        carries only the global parameters. Raises :class:`LayerSplitError` if the split does not fit the model."""
        shape = layout()
        kept = int(local_mask(shape, resolve_layers(shape, self.local, self.from_end)).sum())
        if self.kind == "meta_sgd":
            params = np.concatenate([params, np.full(params.size, self.inner_lr, dtype=np.float32)])
        return params, int(params.size) - kept

    def plain_rounds(self) -> int:
        """LG-FedAvg's warm-up: the first cloud rounds train the whole model; devices then start from its model."""
        return self.warmup_rounds

    def eval_split(self, device: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The device's support set (what it adapts on before it is tested) and query set (a held-out device's
        test rows): the seeded split its jobs use."""
        return support_split(n, self.support_fraction, self.split_seed, device)


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
