"""A model's state vector: its parameters, then its running statistics (floating-point buffers).

Batch normalisation keeps running means and variances that are no parameters but are part of what a
trained model is: they travel with the model, a job returns them, and every aggregation rule treats
them as it treats the parameters (the weighted average of the running statistics, as federated averaging's
reference implementations average a whole ``state_dict``). So the flat float32 vector every trainer,
message and aggregator handles is ``parameters ++ buffers``:

* parameters first, in ``module.named_parameters()`` order (what the optimiser updates: gradients,
  weight decay, momentum and proximal terms touch only these leading entries);
* then every persistent floating-point buffer, in ``module.named_buffers()`` order (updated by the
  forward pass in training mode, never by the optimiser).

``num_batches_tracked`` (an integer counter) is not carried: a batch-norm layer reads it only when its
``momentum`` is None (a cumulative average), which :func:`check_buffers` refuses. Other integer buffers
are refused too; non-persistent buffers are constants of the architecture and stay in the module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["buffers_as_views", "check_buffers", "state_buffers", "state_layout", "trainable_size"]


def state_buffers(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The persistent floating-point buffers carried in the state vector, in ``named_buffers`` order."""
    out = []
    for prefix, sub in module.named_modules():
        for name, buf in sub._buffers.items():
            if buf is None or name in sub._non_persistent_buffers_set or not buf.is_floating_point():
                continue
            out.append((f"{prefix}.{name}" if prefix else name, buf))
    return out


def check_buffers(module: torch.nn.Module) -> None:
    """Raise ``ValueError`` for buffers the state vector cannot carry (see the module docstring)."""
    from torch import nn

    for prefix, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._NormBase) and sub.track_running_stats and sub.momentum is None:
            raise ValueError(f"layer {prefix!r} ({type(sub).__name__}) has momentum=None (a cumulative average "
                             "over num_batches_tracked, which the model state does not carry); give it a momentum")
        for name, buf in sub._buffers.items():
            if buf is None or name in sub._non_persistent_buffers_set or buf.is_floating_point():
                continue
            if name == "num_batches_tracked" and isinstance(sub, nn.modules.batchnorm._NormBase):
                continue
            raise ValueError(f"buffer {prefix + '.' if prefix else ''}{name} is not floating point ({buf.dtype}); "
                             "the model state carries parameters and floating-point buffers only")


def state_layout(module: torch.nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of each parameter, then of each carried buffer: the order of the state vector."""
    check_buffers(module)
    return ([(name, tuple(p.shape)) for name, p in module.named_parameters()]
            + [(name, tuple(b.shape)) for name, b in state_buffers(module)])


def trainable_size(module: torch.nn.Module) -> int:
    """Entries of the state vector that are parameters (its leading part)."""
    return sum(p.numel() for p in module.parameters())


def buffers_as_views(module: torch.nn.Module, flat: torch.Tensor, offset: int) -> None:
    """Make every carried buffer of ``module`` a view into ``flat`` from ``offset`` on (vector order), holding
    ``flat``'s values: loading a state vector into ``flat`` then sets the running statistics too."""
    for prefix, sub in module.named_modules():
        for name, buf in list(sub._buffers.items()):
            if buf is None or name in sub._non_persistent_buffers_set or not buf.is_floating_point():
                continue
            n = buf.numel()
            sub._buffers[name] = flat[offset: offset + n].view(buf.shape)
            offset += n
