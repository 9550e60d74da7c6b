"""Torch modules for the model plug-ins; every module takes a flat ``(batch, features)`` batch."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["CNN", "CharLSTM", "MLP", "LogReg", "reset_parameters_"]


class LogReg(nn.Module):
    """Multinomial logistic regression: ``logits = x @ W.T + b``."""

    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a ``(batch, in_features)`` batch (extra sample dims are flattened)."""
        return self.linear(x.flatten(1))


class MLP(nn.Module):
    """``Linear+ReLU`` blocks of the given hidden sizes followed by a linear output layer."""

    def __init__(self, in_features: int, hidden: Sequence[int], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a ``(batch, in_features)`` batch (extra sample dims are flattened)."""
        return self.layers(x.flatten(1))


class CNN(nn.Module):
    """CNN of McMahan et al. (2017): conv5x5+ReLU+pool2, conv5x5+ReLU+pool2, FC+ReLU, FC."""

    def __init__(
        self, input_shape: tuple[int, int, int], channels: Sequence[int], hidden: int, num_classes: int
    ) -> None:
        super().__init__()
        c, h, w = input_shape
        if h % 4 or w % 4:
            raise ValueError(f"cnn needs H and W divisible by 4, got {input_shape}")
        c1, c2 = channels
        self.input_shape = (c, h, w)
        self.features = nn.Sequential(
            nn.Conv2d(c, c1, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(c2 * (h // 4) * (w // 4), hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a flat ``(batch, C*H*W)`` batch (or an already shaped ``(batch, C, H, W)``)."""
        x = x.reshape(x.shape[0], *self.input_shape)
        return self.classifier(self.features(x).flatten(1))


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model: embedding, stacked LSTM, linear layer on the last step's output."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden: int, layers: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden, num_layers=layers, batch_first=True)
        self.decoder = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a ``(batch, seq_len)`` batch of character indices (any float/int dtype)."""
        out, _ = self.lstm(self.embedding(x.reshape(x.shape[0], -1).long()))
        return self.decoder(out[:, -1, :])


@torch.no_grad()
def reset_parameters_(module: nn.Module, seed: int | torch.Generator) -> nn.Module:
    """Re-initialise every ``Linear``/``Conv2d`` like PyTorch's default, from one generator.

    Visits layers in ``module.modules()`` order (construction order for these nets), weight
    before bias: weights ``kaiming_uniform_(a=sqrt(5))``, biases ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))`` — exactly ``nn.Linear.reset_parameters`` / ``nn.Conv2d.reset_parameters``,
    but drawing from a ``torch.Generator`` seeded with ``seed`` instead of the global RNG, so the
    result depends on ``seed`` only. ``Embedding`` weights are ``N(0, 1)`` and every ``LSTM``
    parameter ``U(-1/sqrt(hidden), 1/sqrt(hidden))`` (in registration order), as in their
    ``reset_parameters``.
    """
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    for layer in module.modules():
        if isinstance(layer, nn.Embedding):
            nn.init.normal_(layer.weight, generator=gen)
        elif isinstance(layer, nn.LSTM):
            bound = 1.0 / math.sqrt(layer.hidden_size)
            for p in layer.parameters():
                nn.init.uniform_(p, -bound, bound, generator=gen)
        elif isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=gen)
            if layer.bias is not None:
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(layer.weight)
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(layer.bias, -bound, bound, generator=gen)
        elif any(True for _ in layer.parameters(recurse=False)):
            raise TypeError(f"reset_parameters_: no deterministic init for {type(layer).__name__}")
    return module
