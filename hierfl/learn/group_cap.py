"""The fast path's group cap (``runtime.group_max: auto``), resolved once at start from the scenario and the
training device's *total* memory.

A group of ``K`` jobs holds, on its device, ``K`` copies of everything one job's step needs: its parameters
(the stacked state), their gradient, the optimizer's state (momentum: one more vector; Adam and AdamW: two,
Kingma & Ba 2015; a proximal anchor, Li et al. 2020, and Nesterov's scratch: one each) and the activations of
its batch, kept for the backward pass and matched by their gradients. In float32 bytes::

    job_bytes = 4 · (P · (3 + slots) + 2 · B · A)

with ``P`` the parameters, ``B`` the batch, ``A`` the activation floats of one sample (the input and every leaf
module's output, measured by one forward pass of one sample) and the ``3`` the state, its gradient and its
staging copy. The cap is the number of such jobs that fit in :data:`MEMORY_SHARE` of the device's total
memory (the rest: the data set's device copy, the allocator's slack, another process), at least 1::

    group_max = max(1, floor(MEMORY_SHARE · total_memory / job_bytes))

There is no fixed upper bound, on any device: a round's jobs start together, so when memory allows the group
is the whole round. On a GPU a larger group does more work per kernel launch and per copy. On a CPU a group
of 128 costs what two groups of 64 cost per job (measured in CPU seconds, one torch thread: the recipe's CNN
batched with vmap 0.99x, the Linear-chain trainer 0.87x to 0.98x), so the CPU needs no ceiling either.

Only the total memory enters, never the free memory, the timing or the number of workers: the groups (and so a
run's bits) are a function of the scenario and the device's size, and ``config.yaml`` records the number, so
repeating the run from it repeats the groups. ``runtime.group_max: N`` sets it instead.
"""

from __future__ import annotations

import os
from typing import Any

from hierfl.core.work import TrainSpec

__all__ = ["MEMORY_SHARE", "job_bytes", "cap_for", "total_memory", "activation_floats",
           "optimizer_slots", "resolve_group_cap"]

MEMORY_SHARE = 0.5
"""The share of the device's total memory a group may plan to use."""


def optimizer_slots(spec: TrainSpec) -> int:
    """Vectors of optimizer state per job besides the parameters and their gradient."""
    slots = 2 if spec.adaptive else (1 if spec.momentum else 0)
    return slots + (1 if spec.proximal > 0 else 0) + (1 if spec.nesterov else 0)


def job_bytes(num_params: int, batch: int, activations: int, slots: int) -> int:
    """Bytes one job of a group needs on its device (module docstring)."""
    return 4 * (int(num_params) * (3 + int(slots)) + 2 * int(batch) * int(activations))


def cap_for(memory: int, per_job: int) -> int:
    """``max(1, floor(MEMORY_SHARE · memory / per_job))``: as many jobs as fit, and one where none does (a job
    alone needs what it needs; if it does not fit either, the run ends with the out-of-memory message)."""
    if per_job <= 0:
        raise ValueError("a job needs a positive number of bytes")
    return max(1, int(MEMORY_SHARE * int(memory)) // int(per_job))


def total_memory(device: str) -> int:
    """The training device's total memory in bytes: the GPU's (``torch.cuda.get_device_properties``), or the
    machine's physical memory for the CPU."""
    if device == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def activation_floats(model_cfg: Any, input_shape: tuple[int, ...], num_classes: int) -> int:
    """Floats one sample's forward pass produces: its input and the output of every leaf module."""
    import torch

    module = model_cfg.build(tuple(input_shape), int(num_classes))
    module.eval()  # (no running statistics move; the sizes are those of training)
    sizes = [int(torch.Size(input_shape).numel())]

    def hook(_mod: Any, _inp: Any, out: Any) -> None:
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                sizes.append(int(t.numel()))

    leaves = [m for m in module.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            module(torch.zeros((1, *input_shape)))
    finally:
        for h in handles:
            h.remove()
    return sum(sizes)


def resolve_group_cap(model_cfg: Any, input_shape: tuple[int, ...], num_classes: int, num_params: int, batch: int,
                      spec: TrainSpec, device: str, memory: int | None = None) -> dict[str, int]:
    """The cap for a scenario on ``device`` (``cpu``/``cuda``, resolved), and what it was computed from.

    Returns ``{"group_max", "memory_bytes", "job_bytes"}``; ``memory`` replaces the device's total memory
    (tests). Runs where torch is (a device host under Ray: ``ExecutorStart.model_call``).
    """
    from hierfl.learn.vmapped import resolve_device

    mem = total_memory(resolve_device(device)) if memory is None else int(memory)
    per_job = job_bytes(num_params, batch, activation_floats(model_cfg, input_shape, num_classes),
                        optimizer_slots(spec))
    return {"group_max": cap_for(mem, per_job), "memory_bytes": mem, "job_bytes": per_job}
