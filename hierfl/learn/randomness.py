"""Dropout masks from a job's own random stream, the same whether the job trains alone or in a group.

A model's forward pass may call ``F.dropout`` (directly or through ``nn.Dropout``) and the channel
variants ``F.dropout1d/2d/3d``. Left alone, these draw from torch's global generator, which a
deterministic emulator must never read, and inside ``torch.func.vmap`` they fail (torch's
randomness error) or, with ``randomness="different"``, draw masks no single job would see.

Here every such call is intercepted by a :class:`~torch.overrides.TorchFunctionMode` and replaced by
``input * mask`` with a mask drawn from the job's ``torch.Generator`` (seeded from the job's seed,
:func:`job_generator`), in the order the forward pass calls them:

* alone (:class:`DrawMasks`): each call draws its mask when it happens, of the input's shape
  (channel variants: ``(N, C, 1, …)``);
* batched (:class:`ReplayMasks`): the masks are drawn outside the vmapped function, per job at its own
  batch size and in the same order, stacked, passed in as a vmapped input and consumed call by call.

The call sites and their per-sample mask shapes are read once by a dry forward pass
(:func:`dropout_sites`, :class:`RecordSites`), which also refuses every other random operation in a
forward pass (``torch.rand``, ``bernoulli``, alpha dropout, RReLU, …) with :class:`UnsupportedRandomness`:
their draws would come from the global generator.

A mask is ``(U ≥ p) / (1 − p)`` with ``U ~ U[0, 1)`` from ``torch.rand(shape, generator=g)`` (torch's own
dropout scales the kept entries by the same ``1 / (1 − p)``; its draws differ).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from hierfl.core.rng import stream_seed

if TYPE_CHECKING:
    import torch

__all__ = ["DrawMasks", "RecordSites", "ReplayMasks", "Site", "UnsupportedRandomness", "draw_mask", "model_features",
           "dropout_sites", "job_generator"]

Site = tuple[str, float, tuple[int, ...]]
"""One dropout call: ``(kind, p, per-sample mask shape)``; kind ``element`` or ``channel``."""


class UnsupportedRandomness(ValueError):
    """A forward pass draws random numbers this module cannot take from a job's stream."""


def job_generator(seed: int) -> torch.Generator:
    """The torch generator of a job's dropout masks: a named stream of the job's seed (never global RNG)."""
    import torch

    return torch.Generator().manual_seed(stream_seed(int(seed), "learn.dropout"))


@functools.cache
def _funcs() -> tuple[dict[Any, str], set[Any]]:
    import torch
    import torch.nn.functional as F

    kinds = {F.dropout: "element", F.dropout1d: "channel", F.dropout2d: "channel", F.dropout3d: "channel"}
    refused = {F.alpha_dropout, F.feature_alpha_dropout, F.rrelu, F.gumbel_softmax, torch.rand, torch.randn,
               torch.randint, torch.rand_like, torch.randn_like, torch.randint_like, torch.randperm,
               torch.bernoulli, torch.normal, torch.multinomial, torch.poisson, torch.dropout,
               torch.Tensor.bernoulli_, torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.random_,
               torch.Tensor.exponential_, torch.Tensor.cauchy_, torch.Tensor.geometric_, torch.Tensor.log_normal_,
               torch.Tensor.bernoulli}
    return kinds, refused


def _call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, float, bool]:
    """``(input, p, training)`` of a dropout call as torch's signature reads them."""
    x = args[0] if args else kwargs["input"]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    training = args[2] if len(args) > 2 else kwargs.get("training", True)
    return x, float(p), bool(training)


def _mask_shape(kind: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Channel dropout zeroes whole maps: one value per (sample, channel)."""
    if kind == "element":
        return shape
    return (*shape[:2], *([1] * (len(shape) - 2)))


def draw_mask(gen: torch.Generator, p: float, shape: tuple[int, ...]) -> torch.Tensor:
    """``(U ≥ p) / (1 − p)`` of ``shape`` from ``gen`` (``p ≥ 1``: all zeros, as torch's dropout)."""
    import torch

    u = torch.rand(shape, generator=gen)
    if p >= 1.0:
        return torch.zeros(shape)
    return (u >= p).to(torch.float32) * (1.0 / (1.0 - p))


@functools.cache
def _mode_class() -> type:
    """The ``TorchFunctionMode`` that routes dropout calls to a handler and refuses other random calls."""
    from torch.overrides import TorchFunctionMode

    kinds, refused = _funcs()

    class _DropoutMode(TorchFunctionMode):
        def __init__(self, handler: Any) -> None:
            super().__init__()
            self.handler = handler

        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            kind = kinds.get(func)
            if kind is not None:
                x, p, training = _call(func, args, kwargs)
                if training and p > 0.0:
                    return self.handler(kind, x, p)
                return x
            if func in refused and kwargs.get("generator") is None:  # an explicit generator is no global draw
                raise UnsupportedRandomness(
                    f"the model's forward pass calls {getattr(func, '__name__', func)}, which would draw from "
                    "torch's global generator; allowed random layers: dropout, dropout1d/2d/3d (nn.Dropout*, "
                    "F.dropout*)")
            return func(*args, **kwargs)

    return _DropoutMode


class _Context:
    """A dropout handler installed as a torch function mode while the context is entered."""

    def _dropout(self, kind: str, x: Any, p: float) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self._mode = _mode_class()(self._dropout)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


class RecordSites(_Context):
    """Context: records each dropout call ``(kind, p, per-sample mask shape)`` and passes the input through."""

    def __init__(self) -> None:
        self.sites: list[Site] = []

    def _dropout(self, kind: str, x: Any, p: float) -> Any:
        self.sites.append((kind, p, _mask_shape(kind, tuple(x.shape))[1:]))
        return x


class DrawMasks(_Context):
    """Context: every dropout call draws its mask from ``gen`` when it happens (a job trained alone)."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def _dropout(self, kind: str, x: Any, p: float) -> Any:
        return x * draw_mask(self.gen, p, _mask_shape(kind, tuple(x.shape))).to(x.device, x.dtype)


class ReplayMasks(_Context):
    """Context: dropout calls consume :attr:`masks` in order (set before each forward pass, e.g. the
    vmapped slices of the stacked per-job masks)."""

    def __init__(self) -> None:
        self.masks: list[Any] = []
        self.next = 0

    def load(self, masks: list[Any]) -> None:
        """The masks of the next forward pass, in call order."""
        self.masks = list(masks)
        self.next = 0

    def _dropout(self, kind: str, x: Any, p: float) -> Any:
        if self.next >= len(self.masks):
            raise UnsupportedRandomness("the forward pass made more dropout calls than its dry run recorded "
                                        "(the calls must not depend on the data)")
        mask = self.masks[self.next]
        self.next += 1
        return x * mask.to(x.dtype)


def dropout_sites(module: torch.nn.Module, input_shape: tuple[int, ...]) -> list[Site]:
    """The dropout calls of one training-mode forward pass of ``module`` (a dry run on two zero samples).

    Raises :class:`UnsupportedRandomness` for random operations other than dropout, and for recurrent
    layers with internal dropout (drawn inside torch's fused kernel).
    """
    import torch
    from torch import nn

    for name, sub in module.named_modules():
        if isinstance(sub, nn.RNNBase) and sub.dropout > 0:
            raise UnsupportedRandomness(f"recurrent dropout (layer {name!r}, dropout={sub.dropout}) draws from torch's "
                                        "global generator inside its kernel; use an nn.Dropout between layers")
    was_training = module.training
    module.train()
    saved = {n: b.clone() for n, b in module.named_buffers()}  # the dry run must leave running statistics alone
    first = next(module.parameters(), None)
    device = first.device if first is not None else None  # (a module on a GPU: the dry run's input there too)
    try:
        with torch.no_grad(), RecordSites() as rec:
            module(torch.zeros(2, math.prod(input_shape), device=device))
    finally:
        with torch.no_grad():
            for n, b in module.named_buffers():
                b.copy_(saved[n])
        module.train(was_training)
    return rec.sites


def model_features(model_cfg: Any, input_shape: tuple[int, ...], num_classes: int) -> dict[str, list[str]]:
    """What of the model ``model_cfg`` builds only the plain training loops honour, for the build's check of
    trainers and protocols with loops of their own (:mod:`hierfl.assemble.loops`): ``dropout`` — one entry per
    dropout call of a training-mode forward pass (its kind and ``p``; ``p = 0`` draws nothing and is left
    out); ``running_stats`` — the names of the floating-point buffers the model vector carries. A plain
    function of configs, so that it can run where torch is (``ExecutorStart.model_call``)."""
    from hierfl.models.state import state_buffers

    module = model_cfg.build(input_shape, num_classes)
    try:
        sites = dropout_sites(module, input_shape)
    except UnsupportedRandomness:  # refused with its own message when a trainer is built
        sites = []
    return {"dropout": [f"{'channel ' if kind == 'channel' else ''}p={p:g}" for kind, p, _ in sites],
            "running_stats": [name for name, _ in state_buffers(module)]}
