"""Torch modules for the model plug-ins; every module takes a flat ``(batch, features)`` batch."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["CNN", "CharLSTM", "DualInput", "MLP", "LogReg", "PflCNN", "bn_mlp", "FinalBlockTaps", "reset_parameters_", "slim_size"]


def slim_size(channels: int, width: float) -> int:
    """Channels a slimmable layer keeps at width multiplier ``width``: ``⌈width · channels⌉`` (at least 1)."""
    if not 0.0 < width <= 1.0:
        raise ValueError(f"width must be in (0, 1], got {width}")
    return max(1, math.ceil(width * channels))


class FinalBlockTaps:
    """Feature taps around a model's final block and a slim pass through it (Mendieta et al., CVPR
    2022: a Lipschitz term of the last block is measured at full and at reduced width).

    A model with this mixin splits its forward pass into ``stem → final block → head``:
    :meth:`taps` returns the features entering the block (``f_in``), leaving it (``f_out``) and the
    logits; :meth:`slim_block` runs the block at a width multiplier on the first channels of ``f_in``
    with the same weights, channel-sliced (a "universally slimmable" layer without batch norm, which
    these nets do not have). :meth:`final_block_layers` names the block's weight layers (its FLOPs).
    """

    def taps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(f_in, f_out, logits)`` of a batch; the logits are exactly ``forward(x)``'s."""
        raise NotImplementedError

    def slim_block(self, f_in: torch.Tensor, width: float) -> torch.Tensor:
        """The final block at width ``width`` on the first :func:`slim_size` channels of ``f_in``."""
        raise NotImplementedError

    def final_block_layers(self) -> list[nn.Module]:
        """The weight layers of the final block (for its FLOPs)."""
        raise NotImplementedError


class LogReg(nn.Module):
    """Multinomial logistic regression: ``logits = x @ W.T + b``."""

    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a ``(batch, in_features)`` batch (extra sample dims are flattened)."""
        return self.linear(x.flatten(1))


class MLP(nn.Module, FinalBlockTaps):
    """``Linear+ReLU`` blocks of the given hidden sizes followed by a linear output layer.

    Its final block (:class:`FinalBlockTaps`) is the last ``Linear+ReLU`` (needs one hidden layer)."""

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

    def _check_block(self) -> None:
        if len(self.layers) < 3:
            raise ValueError("an mlp without hidden layers has no final block to tap or slim")

    def taps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``f_in`` = input of the last hidden ``Linear``, ``f_out`` = its ReLU output, then the logits."""
        self._check_block()
        f_in = self.layers[:-3](x.flatten(1))
        f_out = self.layers[-3:-1](f_in)
        return f_in, f_out, self.layers[-1](f_out)

    def slim_block(self, f_in: torch.Tensor, width: float) -> torch.Tensor:
        """``ReLU(f_in[:, :k_in] W[:k_out, :k_in]ᵀ + b[:k_out])`` with ``k = ⌈width · size⌉``."""
        self._check_block()
        lin = self.layers[-3]
        k_in, k_out = slim_size(lin.in_features, width), slim_size(lin.out_features, width)
        return torch.relu(nn.functional.linear(f_in[:, :k_in], lin.weight[:k_out, :k_in], lin.bias[:k_out]))

    def final_block_layers(self) -> list[nn.Module]:
        """The last hidden ``Linear``."""
        self._check_block()
        return [self.layers[-3]]


class CNN(nn.Module, FinalBlockTaps):
    """CNN of McMahan et al. (2017): conv5x5+ReLU+pool2, conv5x5+ReLU+pool2, FC+ReLU, FC.

    Its final block (:class:`FinalBlockTaps`) is the second convolution block (conv+ReLU+pool), the
    last one with spatial features, as Mendieta et al. slim a ResNet's last residual stage."""

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

    def taps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``f_in`` = the first block's pooled maps, ``f_out`` = the second block's, then the logits."""
        x = x.reshape(x.shape[0], *self.input_shape)
        f_in = self.features[:3](x)
        f_out = self.features[3:](f_in)
        return f_in, f_out, self.classifier(f_out.flatten(1))

    def slim_block(self, f_in: torch.Tensor, width: float) -> torch.Tensor:
        """The second block on the first ``⌈width · c1⌉`` maps with the first ``⌈width · c2⌉`` filters."""
        conv = self.features[3]
        k_in, k_out = slim_size(conv.in_channels, width), slim_size(conv.out_channels, width)
        out = nn.functional.conv2d(f_in[:, :k_in], conv.weight[:k_out, :k_in], conv.bias[:k_out],
                                   padding=conv.padding)
        return self.features[5](torch.relu(out))

    def final_block_layers(self) -> list[nn.Module]:
        """The second convolution."""
        return [self.features[3]]


class DualInput(nn.Module):
    """Dual-input wrapper with a shared backbone (Yuan et al., ECCV 2022): the backbone ``φ``
    sees two views of each sample shifted by an input-shaped offset ``t``,
    ``x_L = (1 − a)·x + a·t`` and ``x_R = (1 + a)·x − a·t``, and a linear head classifies
    ``concat(ReLU(φ(x_L)), ReLU(φ(x_R)))``.

    ``offset`` is not a parameter: a trainer sets it (a device's own offset, a tensor of the flat
    input's size) before a pass; None is the zero offset. The ReLU on the backbone's features is ours
    (the authors' backbones end in a ReLU layer) [design default].
    """

    def __init__(self, backbone: nn.Module, features: int, num_classes: int, a: float) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(2 * features, num_classes)
        self.a = float(a)
        self.offset: torch.Tensor | None = None

    def views(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x_L, x_R)`` of a flat batch for ``offset`` (default: the module's own; None: zero)."""
        t = self.offset if offset is None else offset
        x = x.flatten(1)
        if t is None:
            return (1.0 - self.a) * x, (1.0 + self.a) * x
        return (1.0 - self.a) * x + self.a * t, (1.0 + self.a) * x - self.a * t

    def pair(self, x_left: torch.Tensor, x_right: torch.Tensor) -> torch.Tensor:
        """Logits of two views through the shared backbone."""
        feats = torch.cat([torch.relu(self.backbone(x_left)), torch.relu(self.backbone(x_right))], dim=1)
        return self.head(feats)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of a flat batch with the module's offset."""
        return self.pair(*self.views(x))


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


class PflCNN(nn.Module):
    """pfl-research's CIFAR-10 benchmark CNN (Granqvist et al., "pfl-research: simulation framework for
    accelerating research in private federated learning", NeurIPS 2024; its ``simple_cnn``): conv3x3(32)+ReLU,
    conv3x3(64)+ReLU (valid convolutions), 2x2 max-pool, dropout 0.25, FC(128)+ReLU, dropout 0.5, FC.
    On 3x32x32 input: 1,626,442 parameters. Weights Glorot-uniform (:meth:`extra_init_`), biases PyTorch's
    default, as the reference initialises them."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, hidden: int = 128,
                 dropout: tuple[float, float] = (0.25, 0.5)) -> None:
        super().__init__()
        c, h, w = input_shape
        if h < 6 or w < 6:
            raise ValueError(f"pfl_cnn needs H and W >= 6, got {input_shape}")
        self.input_shape = (c, h, w)
        self.layers = nn.Sequential(
            nn.Conv2d(c, 32, kernel_size=3), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(dropout[0]), nn.Flatten(),
            nn.Linear(64 * ((h - 4) // 2) * ((w - 4) // 2), hidden), nn.ReLU(),
            nn.Dropout(dropout[1]), nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a flat ``(batch, C*H*W)`` batch."""
        return self.layers(x.reshape(x.shape[0], *self.input_shape))

    def extra_init_(self, gen: torch.Generator) -> None:
        """Glorot-uniform weights of every conv and linear layer, in order (the reference's TF2-matching init)."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight, generator=gen)



def bn_mlp(input_shape: Sequence[int], num_classes: int, hidden: int = 32, dropout: float = 0.25) -> nn.Module:
    """A factory for ``model: {name: torch}`` (its example): flatten, ``Linear → BatchNorm1d → ReLU → Dropout``,
    a linear output. Torch's own initialisation; running statistics and dropout masks as every model's."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(int(s) for s in input_shape), hidden), nn.BatchNorm1d(hidden),
                         nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_classes))

# layers whose own reset_parameters draws no random numbers (ones and zeros, reset running statistics)
_DETERMINISTIC = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.RMSNorm, nn.PReLU)


@torch.no_grad()
def reset_parameters_(module: nn.Module, seed: int | torch.Generator) -> nn.Module:
    """Re-initialise every layer like PyTorch's default, from one generator.

    Visits layers in ``module.modules()`` order (construction order for these nets), weight
    before bias: ``Linear`` and every convolution (``Conv1d/2d/3d``, transposed) get weights
    ``kaiming_uniform_(a=sqrt(5))``, biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` — exactly their
    ``reset_parameters`` — but drawing from a ``torch.Generator`` seeded with ``seed`` instead of the
    global RNG, so the result depends on ``seed`` only. ``Embedding`` weights are ``N(0, 1)`` and every
    recurrent layer's (``LSTM``, ``GRU``, ``RNN``) parameter ``U(-1/sqrt(hidden), 1/sqrt(hidden))`` (in
    registration order), as in their ``reset_parameters``. Normalisation layers (batch, instance, group,
    layer and RMS norm) and PReLU take their own deterministic rule: scale 1, shift 0, running mean 0 and
    variance 1; PReLU's slope 0.25. A module with an ``extra_init_(generator)`` method (a net whose reference initialises
    otherwise, e.g. Xavier) gets it called last, with the same generator.
    """
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    for layer in module.modules():
        if isinstance(layer, nn.Embedding):
            nn.init.normal_(layer.weight, generator=gen)
            if layer.padding_idx is not None:  # as Embedding.reset_parameters: the padding row is zero
                layer.weight[layer.padding_idx].fill_(0)
        elif isinstance(layer, nn.RNNBase):
            bound = 1.0 / math.sqrt(layer.hidden_size)
            for p in layer.parameters():
                nn.init.uniform_(p, -bound, bound, generator=gen)
        elif isinstance(layer, (nn.Linear, nn.modules.conv._ConvNd)):
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=gen)
            if layer.bias is not None:
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(layer.weight)
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(layer.bias, -bound, bound, generator=gen)
        elif isinstance(layer, _DETERMINISTIC):
            layer.reset_parameters()
        elif any(True for _ in layer.parameters(recurse=False)):
            raise TypeError(f"reset_parameters_: no deterministic init for {type(layer).__name__}")
    extra = getattr(module, "extra_init_", None)
    if extra is not None:
        extra(gen)
    return module
