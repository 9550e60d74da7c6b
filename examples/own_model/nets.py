"""A plug-in's own torch network for ``model: {name: torch, factory: "nets:bn_dropout_cnn"}``.

The factory is called as ``bn_dropout_cnn(input_shape, num_classes, **kwargs)`` and returns any
``nn.Module`` mapping a flat ``(batch, C*H*W)`` batch to logits. This one has batch norm (its running
statistics travel with the model and are averaged like its parameters) and two dropouts (their masks
come from each training job's own random stream), so it trains the same alone or batched
(docs/howto/models.md). Load it with ``plugins: [nets.py]`` or ``--plugin nets.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

HIERFL_API = "1"  # the plug-in API major version this file is written for


class BnDropoutCNN(nn.Module):
    """conv3x3 → batch norm → ReLU → 2x2 max-pool → channel dropout → linear → ReLU → dropout → linear."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, channels: int, hidden: int,
                 drop: float) -> None:
        super().__init__()
        c, h, w = input_shape
        self.input_shape = (c, h, w)
        self.conv = nn.Conv2d(c, channels, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout2d(drop)
        self.hidden = nn.Linear(channels * (h // 2) * (w // 2), hidden)
        self.out = nn.Linear(hidden, num_classes)
        self.p = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.bn(self.conv(x.reshape(x.shape[0], *self.input_shape)))), 2)
        h = F.relu(self.hidden(self.drop(h).flatten(1)))
        return self.out(F.dropout(h, self.p, self.training))  # a functional dropout: also the job's stream


def bn_dropout_cnn(input_shape: tuple[int, ...], num_classes: int, channels: int = 8, hidden: int = 32,
                   drop: float = 0.25) -> nn.Module:
    """The network for ``(C, H, W)`` images; torch's own initialisation (seeded by hierfl)."""
    if len(input_shape) != 3:
        raise ValueError(f"bn_dropout_cnn needs (C, H, W) images, got {tuple(input_shape)}")
    c, h, w = (int(s) for s in input_shape)
    return BnDropoutCNN((c, h, w), num_classes, channels, hidden, drop)
