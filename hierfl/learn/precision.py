"""Arithmetic precision of the forward pass (``runtime.precision``): ``fp32`` (default) or ``bf16``.

``bf16`` runs every model's forward pass under ``torch.autocast(device_type, dtype=torch.bfloat16)``
— the single-job trainer (:meth:`hierfl.learn.local.LocalTrainer.train`), the batched trainer
(:class:`hierfl.learn.vmapped.VmapTrainer`), meta-learning's support/query losses and evaluation.
Autocast runs the matrix products and convolutions in bfloat16 and keeps everything else in
float32; the logits are cast back to float32 before the cross-entropy, so the loss, its reduction,
the gradients of the parameters, the optimiser state and the parameters themselves (the master
weights that travel between devices and servers) stay float32. The backward pass runs outside the
autocast region, as torch recommends: autograd replays each op in the dtype its forward used.

``fp32`` changes nothing: no autocast region is entered and the code paths are those of a build
without this setting (bit-identical). The hand-written Linear/ReLU gradients
(:class:`~hierfl.learn.chain.LinearChain`, :class:`~hierfl.learn.batched.BatchedTrainer`) exist to
match autograd's float32 bits; under ``bf16`` those models take autograd (one job) and vmap (a
group) like any other model.

The numerical contract (``docs/howto/batched-learning.md``): bf16 runs are bit-identical run to run
on the same device and thread count, emulated times never depend on the precision, and the final
accuracy stays within a stated tolerance of fp32's (measured on CPU).
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["PRECISIONS", "autocast", "check_precision", "cuda_determinism"]

PRECISIONS = ("fp32", "bf16")
"""Allowed values of ``runtime.precision``."""


def check_precision(precision: str, device: str = "cpu") -> str:
    """``precision`` if it is allowed on the torch ``device`` (``cpu`` or ``cuda``), else ``ValueError``.

    CUDA ``bf16`` needs a GPU with bfloat16 support: elsewhere torch's autocast disables itself with
    a warning, which would run fp32 under a bf16 label, so it is refused instead.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"runtime.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "bf16" and device == "cuda":
        import torch

        if not torch.cuda.is_bf16_supported():
            raise ValueError("runtime.precision is bf16 but this GPU does not support bfloat16 "
                             "(torch.cuda.is_bf16_supported() is false); allowed here: fp32")
    return precision


def autocast(precision: str, device: str) -> Any:
    """The context the forward pass runs in: bf16 autocast on ``device``'s type, or nothing (fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    # (device_type is the kind of device, "cuda" for "cuda:1": torch's autocast takes no index)
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def cuda_determinism() -> None:
    """Make CUDA arithmetic repeatable for every trainer of the process: no TF32 (it would change fp32 results
    by the GPU's choice of kernel), cuDNN's deterministic algorithms and no autotuning (a run's bits must not
    depend on timing). Called by every trainer that trains on a GPU; idempotent."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
