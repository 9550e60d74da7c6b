"""Forward and backward of ``Linear``/``ReLU`` chains (``logreg``, ``mlp``) by hand, identical to autograd.

For a small model the autograd engine (graph construction, Python-side ``backward``,
``AccumulateGrad``) costs several times the arithmetic. :class:`LinearChain` computes the
mean cross-entropy loss and the parameter gradients with no graph, calling exactly the ATen
operations autograd runs for ``F.cross_entropy(module(x), y).backward()`` on these modules, with
the same argument layouts (torch 2.13, CPU, float32):

* forward: ``addmm(b, h, W.t())`` per layer (``F.linear`` on 2-D input), ``relu`` between layers,
  ``log_softmax(·, 1)``, ``nll_loss_forward`` (mean);
* backward: ``nll_loss_backward``, ``_log_softmax_backward_data``; per layer, last first:
  bias ``g.sum(0, keepdim=True).view(b.shape)`` (autograd's ``sum_to``), weight ``g.t().mm(h)``
  (``mm_mat2_backward`` for the column-major ``W.t()``), input ``g.mm(W)`` then
  ``threshold_backward(·, relu output, 0)``.

So the gradients (values and strides) and the loss are the same bits as autograd's;
``tests/learn/test_fastpath.py`` checks it on many random shapes and seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["LinearChain"]


class LinearChain:
    """Loss and gradients of ``Linear → ReLU → … → Linear`` with mean cross-entropy, without autograd.

    Parameters
    ----------
    weights, biases
        The layers' parameter tensors (usually views into the trainer's flat buffer), input first.
    """

    def __init__(self, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]) -> None:
        import torch

        self.weights = list(weights)
        self.biases = list(biases)
        self._weights_t = [w.t() for w in weights]  # views: they follow the weights' in-place updates
        # d loss / d loss, as autograd seeds it (on the layers' device)
        self._one = torch.ones((), dtype=torch.float32, device=weights[0].device)
        aten = torch.ops.aten
        self._nll = aten.nll_loss_forward.default
        self._nll_back = aten.nll_loss_backward.default
        self._lsm_back = aten._log_softmax_backward_data.default
        self._relu_back = aten.threshold_backward.default

    @classmethod
    def of(cls, module: torch.nn.Module) -> LinearChain | None:
        """The chain of a ``LogReg`` or ``MLP`` module (exact types), else ``None``."""
        import torch
        from torch import nn

        from hierfl.models.nets import MLP, LogReg

        if type(module) is LogReg:
            layers: list[nn.Module] = [module.linear]
        elif type(module) is MLP:
            layers = list(module.layers)
            if not all(type(m) is (nn.Linear if k % 2 == 0 else nn.ReLU) for k, m in enumerate(layers)):
                return None
            if len(layers) % 2 != 1:
                return None
            layers = layers[::2]
        else:
            return None
        weights, biases = [], []
        for lin in layers:
            assert isinstance(lin, nn.Linear)
            if lin.bias is None or lin.weight.dtype != torch.float32 or lin.bias.dtype != torch.float32:
                return None
            weights.append(lin.weight)
            biases.append(lin.bias)
        return cls(weights, biases)

    def loss_and_grads(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``(mean cross-entropy, gradients)`` on a ``(B, in_features)`` float32 batch with int64 labels.

        Gradients come in parameter order (``W0, b0, W1, b1, …``) as new tensors. Call it under
        ``torch.no_grad()`` (else autograd records a graph nobody uses; the numbers are the same).
        """
        import torch

        acts = [x]
        h = x
        last = len(self.weights) - 1
        for i, (wt, b) in enumerate(zip(self._weights_t, self.biases)):
            h = torch.addmm(b, h, wt)
            if i < last:
                h = torch.relu(h)
                acts.append(h)
        lsm = torch.log_softmax(h, 1)
        loss, total_weight = self._nll(lsm, y, None, 1, -100)
        g = self._nll_back(self._one, lsm, y, None, 1, -100, total_weight)
        g = self._lsm_back(g, lsm, 1, lsm.dtype)
        grads: list[torch.Tensor] = [g] * (2 * len(self.weights))
        for i in range(last, -1, -1):
            # autograd's sum_to is sum(0, keepdim=True).view(b.shape): the same reduction as sum(0)
            grads[2 * i + 1] = g.sum(0)
            grads[2 * i] = g.t().mm(acts[i])
            if i > 0:
                g = self._relu_back(g.mm(self.weights[i]), acts[i], 0)
        return loss, grads
