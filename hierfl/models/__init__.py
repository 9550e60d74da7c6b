"""Model plug-ins: one config model per architecture, registered by the name used in YAML.

Every model takes a flat float32 batch of shape ``(batch, prod(input_shape))`` and returns
logits of shape ``(batch, num_classes)``; the CNN reshapes internally to ``(batch, C, H, W)``.

This module must import without torch (the config layer imports it); torch and
:mod:`hierfl.models.nets` are imported lazily inside :meth:`ModelConfig.build`.
"""

from __future__ import annotations

import math
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveInt, field_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["MODELS", "CNNConfig", "CharLSTMConfig", "DualInputConfig", "LogRegConfig", "MLPConfig", "ModelConfig",
           "PflCNNConfig", "TorchModelConfig", "materialise", "resolve_factory"]

MODELS: Registry = Registry("model")


class ModelConfig(ConfigModel):
    """Base of every model config: shape checks and a deterministic builder.

    Subclasses implement :meth:`_construct` (plain ``nn.Module`` construction) and may narrow
    :meth:`check_input`.
    """

    def check_input(self, input_shape: tuple[int, ...]) -> str | None:
        """Whether this model accepts samples of ``input_shape``.

        Returns
        -------
        str or None
            ``None`` if accepted, else a user-facing reason.
        """
        shape = tuple(input_shape)
        if len(shape) == 0 or any(int(s) < 1 for s in shape):
            return f"{self._label()} needs a non-empty input shape of positive sizes, got {shape}"
        return None

    def check_dataset(self, input_shape: tuple[int, ...], vocab_size: int | None) -> str | None:
        """Whether this model accepts a dataset's samples (shape, and for token models the vocabulary).

        Returns ``None`` if accepted, else a user-facing reason. The default checks the shape
        and refuses token datasets (their features are indices, not measurements).
        """
        reason = self.check_input(input_shape)
        if reason is None and vocab_size is not None:
            return (f"{self._label()} needs real-valued features, but this dataset holds character indices "
                    f"(vocabulary {vocab_size}); use model char_lstm")
        return reason

    def build(self, input_shape: tuple[int, ...], num_classes: int, *, seed: int = 0) -> torch.nn.Module:
        """Build the module on CPU, initialised deterministically from ``seed``.

        Parameters are allocated without touching torch's global RNG (construction happens on
        the ``meta`` device) and then initialised like PyTorch's defaults, drawing from a
        ``torch.Generator`` seeded with ``seed`` (see :func:`hierfl.models.nets.reset_parameters_`).

        Parameters
        ----------
        input_shape
            Shape of one sample, e.g. ``(1, 28, 28)`` or ``(60,)``.
        num_classes
            Number of output logits (at least 2).
        seed
            Initialisation seed; the same seed gives identical parameters in any process.

        Raises
        ------
        ValueError
            If the input shape is not accepted or ``num_classes < 2``.
        """
        shape = tuple(int(s) for s in input_shape)
        reason = self.check_input(shape)
        if reason is not None:
            raise ValueError(reason)
        if int(num_classes) < 2:
            raise ValueError(f"{self._label()} needs num_classes >= 2, got {num_classes}")

        import torch

        from hierfl.models import nets

        with torch.device("meta"):
            module = self._construct(shape, int(num_classes))
        materialise(module)
        nets.reset_parameters_(module, seed)
        return module

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        """Instantiate the module (called under ``torch.device('meta')``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _construct")

    def _label(self) -> str:
        return str(getattr(self, "name", type(self).__name__))

    @property
    def slimmable_final_block(self) -> bool:
        """Whether the built module has feature taps around a width-slimmable final block
        (:class:`hierfl.models.nets.FinalBlockTaps`; a Lipschitz term of the final block needs one)."""
        return False


def materialise(module: torch.nn.Module) -> None:
    """Give a module built on the ``meta`` device uninitialised CPU storage, in place.

    What ``module.to_empty(device="cpu")`` does, without its ``torch.empty_like`` of meta tensors:
    that call imports sympy (about 0.4 CPU s and 34 MB in every process that builds a model).
    """
    import torch

    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[name] = torch.nn.Parameter(torch.empty(tuple(p.shape), dtype=p.dtype),
                                                           requires_grad=p.requires_grad)
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = torch.empty(tuple(b.shape), dtype=b.dtype)


@MODELS.register
class LogRegConfig(ModelConfig):
    """Multinomial logistic regression: one linear layer from the flat input to the logits."""

    name: Literal["logreg"] = "logreg"

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import LogReg

        return LogReg(math.prod(input_shape), num_classes)


@MODELS.register
class MLPConfig(ModelConfig):
    """Multi-layer perceptron: ``Linear+ReLU`` blocks of sizes ``hidden``, then a linear output."""

    name: Literal["mlp"] = "mlp"
    hidden: list[PositiveInt] = Field(default_factory=lambda: [200, 200], description="units per hidden layer")

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import MLP

        return MLP(math.prod(input_shape), list(self.hidden), num_classes)

    @property
    def slimmable_final_block(self) -> bool:
        """The last hidden layer, when there is one."""
        return len(self.hidden) > 0


@MODELS.register
class CNNConfig(ModelConfig):
    """The CNN of McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks
    from Decentralized Data": two 5x5 conv + ReLU + 2x2 max-pool blocks, a ReLU hidden layer,
    a linear output. Accepts any ``(C, H, W)`` input with ``H`` and ``W`` divisible by 4."""

    name: Literal["cnn"] = "cnn"
    channels: tuple[PositiveInt, PositiveInt] = Field(default=(32, 64), description="output channels of the two conv layers")
    hidden: PositiveInt = Field(default=512, description="units per hidden layer")

    def check_input(self, input_shape: tuple[int, ...]) -> str | None:
        """``None`` for ``(C, H, W)`` input with ``H``, ``W`` divisible by 4, else the reason."""
        shape = tuple(input_shape)
        ok = len(shape) == 3 and all(int(s) >= 1 for s in shape) and int(shape[1]) % 4 == 0 and int(shape[2]) % 4 == 0
        if not ok:
            return f"cnn needs (C, H, W) input with H and W divisible by 4, got {shape}"
        return None

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import CNN

        c, h, w = input_shape
        return CNN((c, h, w), self.channels, self.hidden, num_classes)

    @property
    def slimmable_final_block(self) -> bool:
        """The second convolution block."""
        return True


@MODELS.register
class DualInputConfig(ModelConfig):
    """A dual-input model (Yuan et al., "Addressing Heterogeneity in Federated Learning via
    Distributional Transformation", ECCV 2022): a shared ``backbone`` (an ``mlp`` or ``cnn`` whose output
    layer gives ``features`` values) applied to two views of each sample shifted by the device's offset,
    ``x_L = (1 − a)x + a·t`` and ``x_R = (1 + a)x − a·t``, and a linear head on both views' features
    (:class:`hierfl.models.nets.DualInput`). Its forward FLOPs count both backbone passes, so a device
    tier's speed charges the dual input in virtual time."""

    name: Literal["dual_input"] = "dual_input"
    backbone: MLPConfig | CNNConfig = Field(
        default_factory=lambda: MLPConfig(hidden=[64]), discriminator="name",
        description="the shared backbone: an mlp or cnn config; its output layer has `features` units (the "
                    "authors use a pretrained AlexNet or ResNet-18) [design default: mlp with 64 hidden units]")
    features: PositiveInt = Field(default=64, description="features the backbone gives per view (the head sees twice "
                                                          "as many) [design default 64]")
    a: float = Field(default=0.2, ge=0.0, le=1.0, allow_inf_nan=False,
                     description="the mixing a of the two views: 0.2 in the authors' non-IID run, "
                                 "0.3 in their IID run [design default 0.2, from the authors' code]")

    def check_input(self, input_shape: tuple[int, ...]) -> str | None:
        """What the backbone accepts."""
        return self.backbone.check_input(input_shape)

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import DualInput

        return DualInput(self.backbone._construct(input_shape, int(self.features)), int(self.features), num_classes,
                         self.a)


@MODELS.register
class CharLSTMConfig(ModelConfig):
    """Character LSTM for next-character prediction (LEAF's Shakespeare model, Caldas et al. 2018:
    ``models/shakespeare/stacked_lstm.py``): an embedding of ``embedding_dim`` per character, a
    ``layers``-layer LSTM of ``hidden`` units, a linear layer on the last step's output.

    Input: a flat batch of character indices (float32 holding integers) of shape ``(batch, seq_len)``.
    """

    name: Literal["char_lstm"] = "char_lstm"
    vocab_size: PositiveInt = Field(default=80, description="characters in the vocabulary (LEAF: 80)")
    embedding_dim: PositiveInt = Field(default=8, description="embedding size (LEAF: 8)")
    hidden: PositiveInt = Field(default=256, description="LSTM units per layer (LEAF: 256)")
    layers: PositiveInt = Field(default=2, description="stacked LSTM layers (LEAF: 2)")

    def check_input(self, input_shape: tuple[int, ...]) -> str | None:
        """``None`` for a 1-D sequence shape ``(seq_len,)``."""
        shape = tuple(input_shape)
        if len(shape) != 1 or int(shape[0]) < 1:
            return f"char_lstm needs sequences of character indices, shape (seq_len,), got {shape}"
        return None

    def check_dataset(self, input_shape: tuple[int, ...], vocab_size: int | None) -> str | None:
        """A token dataset whose vocabulary fits the embedding."""
        reason = self.check_input(input_shape)
        if reason is not None:
            return reason
        if vocab_size is None:
            return "char_lstm needs a dataset of character indices (e.g. shakespeare); this one has real-valued features"
        if vocab_size > self.vocab_size:
            return f"the dataset's vocabulary has {vocab_size} characters, more than model.vocab_size = {self.vocab_size}"
        return None

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import CharLSTM

        return CharLSTM(self.vocab_size, self.embedding_dim, self.hidden, self.layers, num_classes)


@MODELS.register
class PflCNNConfig(ModelConfig):
    """pfl-research's CIFAR-10 benchmark CNN (Granqvist et al., NeurIPS 2024, ``simple_cnn`` of its
    benchmarks): two valid 3x3 convolutions (32, 64 channels) with ReLU, one 2x2 max-pool, dropout 0.25,
    a ReLU hidden layer of ``hidden`` units, dropout 0.5 and a linear output; Glorot-uniform weights.
    On CIFAR-10's 3x32x32 images it has 1,626,442 parameters. Its dropout masks come from each job's own
    random stream (:mod:`hierfl.learn.randomness`)."""

    name: Literal["pfl_cnn"] = "pfl_cnn"
    hidden: PositiveInt = Field(default=128, description="units of the hidden layer (pfl-research: 128)")
    dropout: tuple[float, float] = Field(default=(0.25, 0.5), description="drop rates after the pool and after "
                                                                          "the hidden layer (pfl-research: 0.25, 0.5)")

    @field_validator("dropout")
    @classmethod
    def _rates(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= float(p) < 1.0 for p in value):
            raise ValueError(f"drop rates must be in [0, 1), got {list(value)}")
        return value

    def check_input(self, input_shape: tuple[int, ...]) -> str | None:
        """``None`` for ``(C, H, W)`` input with ``H``, ``W`` at least 6, else the reason."""
        shape = tuple(input_shape)
        if not (len(shape) == 3 and int(shape[0]) >= 1 and int(shape[1]) >= 6 and int(shape[2]) >= 6):
            return f"pfl_cnn needs (C, H, W) input with H and W >= 6, got {shape}"
        return None

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import PflCNN

        c, h, w = input_shape
        return PflCNN((c, h, w), num_classes, int(self.hidden), (float(self.dropout[0]), float(self.dropout[1])))


_FACTORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def resolve_factory(path: str) -> Any:
    """The callable ``module:name`` names. ``module`` is an importable module (an installed one, a package
    plug-in's) or the file name, without ``.py``, of a loaded file plug-in (whose module name is a hash);
    a Ray worker resolves it the same way after its plug-ins are installed.

    Raises ``ValueError`` with the reason when it cannot be imported or is not callable.
    """
    import importlib

    from hierfl.config.plugins import loaded_plugins

    if not _FACTORY.match(path):
        raise ValueError(f"factory must be 'package.module:function', got {path!r}")
    mod_name, attr = path.split(":")
    stems = {os.path.splitext(os.path.basename(ref.path))[0]: ref.module
             for ref in loaded_plugins() if ref.kind == "file" and ref.path}
    name = stems.get(mod_name, mod_name) if mod_name not in sys.modules else mod_name
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 — any failure of the user's module is reported, not raised
        raise ValueError(f"cannot import {mod_name!r} ({type(exc).__name__}: {exc}); give its file or package "
                         "under plugins: (or --plugin), or install it") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"module {mod_name!r} has no callable {attr!r}")
    return fn


@MODELS.register
class TorchModelConfig(ModelConfig):
    """Any torch network a plug-in brings: ``factory: "package.module:function"`` is called as
    ``function(input_shape, num_classes, **kwargs)`` and must return an ``nn.Module`` mapping a flat
    ``(batch, prod(input_shape))`` float batch to ``(batch, num_classes)`` logits.

    The module keeps its own initialisation: the factory runs with torch's generator forked and seeded
    from the run's initialisation seed (restored afterwards), so the initial model is a function of the
    seed only. Batch norm (running statistics carried in the model state, :mod:`hierfl.models.state`),
    dropout (masks from each job's stream, :mod:`hierfl.learn.randomness`) and any layer train on both the
    one-job and the batched path; other random operations in ``forward`` are refused."""

    name: Literal["torch"] = "torch"
    factory: str = Field(description="the network's constructor, 'package.module:function' (a plug-in's file "
                                     "name or module, or an installed module)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")

    @classmethod
    def example(cls) -> TorchModelConfig:
        """A factory every installation has: :func:`hierfl.models.nets.bn_mlp` (batch norm and dropout)."""
        return cls(factory="hierfl.models.nets:bn_mlp", kwargs={"hidden": 16})

    @field_validator("factory")
    @classmethod
    def _importable(cls, value: str) -> str:
        resolve_factory(value)
        return value

    def check_dataset(self, input_shape: tuple[int, ...], vocab_size: int | None) -> str | None:
        """The factory's module is built once: a reason when it fails or returns no ``nn.Module``."""
        reason = self.check_input(input_shape)
        if reason is not None:
            return reason
        try:
            self.build(input_shape, 2)
        except Exception as exc:  # noqa: BLE001 — the user's factory: every failure becomes a config problem
            return f"factory {self.factory!r}: {exc}"
        return None

    def build(self, input_shape: tuple[int, ...], num_classes: int, *, seed: int = 0) -> torch.nn.Module:
        """Call the factory under a forked torch generator seeded from ``seed``; check what it returns."""
        import torch

        from hierfl.core.rng import stream_seed
        from hierfl.models.state import check_buffers

        shape = tuple(int(s) for s in input_shape)
        fn = resolve_factory(self.factory)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(stream_seed(int(seed), "model.torch_init"))
            module = fn(shape, int(num_classes), **self.kwargs)
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f"returned {type(module).__name__}, not a torch.nn.Module")
        module = module.to("cpu").float()
        check_buffers(module)
        return module
