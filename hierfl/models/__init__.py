"""Model plug-ins: one config model per architecture, registered by the name used in YAML.

Every model takes a flat float32 batch of shape ``(batch, prod(input_shape))`` and returns
logits of shape ``(batch, num_classes)``; the CNN reshapes internally to ``(batch, C, H, W)``.

This module must import without torch (the config layer imports it); torch and
:mod:`hierfl.models.nets` are imported lazily inside :meth:`ModelConfig.build`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["MODELS", "CNNConfig", "LogRegConfig", "MLPConfig", "ModelConfig"]

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
        module = module.to_empty(device="cpu")
        nets.reset_parameters_(module, seed)
        return module

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        """Instantiate the module (called under ``torch.device('meta')``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _construct")

    def _label(self) -> str:
        return str(getattr(self, "name", type(self).__name__))


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
    hidden: list[PositiveInt] = Field(default_factory=lambda: [200, 200])

    def _construct(self, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
        from hierfl.models.nets import MLP

        return MLP(math.prod(input_shape), list(self.hidden), num_classes)


@MODELS.register
class CNNConfig(ModelConfig):
    """The CNN of McMahan et al. (2017), "Communication-Efficient Learning of Deep Networks
    from Decentralized Data": two 5x5 conv + ReLU + 2x2 max-pool blocks, a ReLU hidden layer,
    a linear output. Accepts any ``(C, H, W)`` input with ``H`` and ``W`` divisible by 4."""

    name: Literal["cnn"] = "cnn"
    channels: tuple[PositiveInt, PositiveInt] = (32, 64)
    hidden: PositiveInt = 512

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
