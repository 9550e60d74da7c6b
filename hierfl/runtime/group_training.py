"""A device host's training of one fast-path group: into host rows, or left on the training device.

:func:`train_group` is the body of :meth:`hierfl.runtime.device_host.DeviceHost.train_group` (results as rows of
one host array, what the Ray executor ships through the object store) and of
:meth:`~hierfl.runtime.device_host.DeviceHost.train_group_resident` (results as a
:class:`~hierfl.learn.staging.DeviceStack` on the training device, what the local executor's aggregations fold
there: :mod:`hierfl.learn.staging`). Both train the same sub-groups with the same trainers, so a result's bits
do not depend on where it is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.learn.staging import DeviceStack, host_of
from hierfl.runtime.role_common import NONFINITE, OutOfDeviceMemory, flag_nonfinite, group_max_of, out_of_memory_text

if TYPE_CHECKING:
    from hierfl.runtime.device_host import DeviceHost

__all__ = ["train_group"]


def _dp_vmapped(host: DeviceHost) -> Any:
    """The vmap trainer for DP-SGD groups where the hand-written chain trainer groups the others (per-sample
    gradients need ``torch.func``), made on first use and sharing the host's transfer counter."""
    if host._dp_vmapped is None:
        from hierfl.learn.vmapped import VmapTrainer

        host._dp_vmapped = VmapTrainer(host.trainer, host.device)
        host._dp_vmapped.staging = host.staging
    return host._dp_vmapped


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's CUDA out-of-memory error (torch is loaded: a group was training)."""
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError)


def subgroups(host: DeviceHost, devices: list[int], spec: TrainSpec) -> tuple[list[list[int]], list[np.ndarray]]:
    """The group's sub-groups (job positions, in order of first appearance) and each job's labels.

    Each job reads its own labels (a shared dataset with malicious sharers shows their shares flipped to all but
    themselves), so jobs reading different label arrays never share a sub-group; the CPU's hand-written trainer
    runs devices of equal sample count in lockstep, the vmap trainer pads.
    """
    labels = [host.labels_of(spec, device) for device in devices]
    by_key: dict[tuple[int, int], list[int]] = {}
    for k, device in enumerate(devices):
        size = int(host.rows_of(device, spec).size) if host.batched is not None else 0
        by_key.setdefault((size, id(labels[k])), []).append(k)
    return list(by_key.values()), labels


def train_group(host: DeviceHost, devices: list[int], seeds: list[int], spec: TrainSpec, params: list[np.ndarray],
                resident: bool) -> tuple[Any, list[dict[str, float]]]:
    """The jobs of one group (see :meth:`DeviceHost.train_group <hierfl.runtime.device_host.DeviceHost.train_group>`):
    ``(results, stats)``, the results rows of a host array, or with ``resident`` a
    :class:`~hierfl.learn.staging.DeviceStack` when a group trainer trains them (jobs trained one at a time: the
    host array still)."""
    k_all = len(devices)
    if ((host.batched is None and host.vmapped is None) or spec.method is not None or spec.attack is not None
            or spec.model or spec.frozen):
        # (the group trainers hold model 0's plain training only, and freeze no gradients; a job method's job runs
        # alone)
        out = host.take_block(k_all, spec)
        stats: list[dict[str, float]] = [{} for _ in devices]
        for k, (device, seed) in enumerate(zip(devices, seeds)):
            _, stats[k] = host.train(device, seed, spec, _cpu_start(params[k]), out=out[k])
        return out, stats
    groups, labels = subgroups(host, devices, spec)
    on_device = resident and host.device != "cpu"  # CUDA: the results stay there, no host rows
    # (an array of an earlier group that no result refers to any more: no fresh pages every round)
    out = None if on_device else host.take_block(k_all, spec)
    stats = [{} for _ in devices]
    stack: Any = None
    trainer: Any = host.batched if host.batched is not None else host.vmapped
    if spec.dp_sgd is not None and trainer is not host.vmapped:  # per-sample gradients: torch.func's vmap
        trainer = _dp_vmapped(host)
    for ks in groups:
        if len(ks) == 1 and host.device == "cpu":
            assert out is not None
            k = ks[0]
            _, stats[k] = host.train(devices[k], seeds[k], spec, _cpu_start(params[k]), out=out[k])
            continue
        args = ([params[k] for k in ks], host.x, labels[ks[0]], [host.rows_of(devices[k], spec) for k in ks], spec,
                [seeds[k] for k in ks])
        try:
            if on_device:
                state, st = trainer.train_resident(*args)
                stack = _place(stack, state, ks, k_all)
                finite = _finite_rows(state)
            else:
                assert out is not None
                st, finite = _into_rows(trainer, args, out, ks, resident)
        except Exception as exc:
            if not _out_of_memory(exc):
                raise
            # the run cannot go on with this group on this device: say which settings lower the need
            raise OutOfDeviceMemory(out_of_memory_text(len(ks), host.device, host.configured_device,
                                                       group_max_of(host.model_spec), str(exc))) from None
        for j, (k, one) in enumerate(zip(ks, st)):
            stats[k] = one if finite[j] else {**one, NONFINITE: 1.0}
    if not resident:
        return out, stats
    import torch

    if on_device:
        return DeviceStack(stack, host.staging), stats
    assert out is not None
    return DeviceStack(torch.from_numpy(out), host.staging, host=out), stats


def _cpu_start(params: Any) -> Any:
    """A job trained alone starts from a host array: a model kept on a CPU device is its own memory (no crossing),
    one on an accelerator is copied (counted)."""
    from hierfl.learn.staging import DeviceModel

    return params.view() if isinstance(params, DeviceModel) and params.cpu is not None else host_of(params)


def _into_rows(trainer: Any, args: tuple[Any, ...], out: np.ndarray, ks: list[int],
               resident: bool) -> tuple[list[dict[str, float]], list[bool]]:
    """One sub-group trained into its rows of the host array ``out`` (a CPU's stack, or the Ray path's results);
    consecutive jobs (a whole round's group) train straight in them."""
    direct = ks == list(range(ks[0], ks[0] + len(ks)))
    rows = out[ks[0]: ks[0] + len(ks)] if direct else np.empty((len(ks), out.shape[1]), dtype=np.float32)
    if resident:  # the CPU: the rows are the device stack, nothing crosses back
        state, st = trainer.train_resident(*args, rows)
        trained = state.numpy()
        if not np.may_share_memory(trained, rows):
            rows[...] = trained
    else:
        st = trainer.train_group(*args, rows)
    if not direct:
        out[ks] = rows
    return st, [NONFINITE not in flag_nonfinite(rows[j], {}) for j in range(len(ks))]


def _place(stack: Any, state: Any, ks: list[int], k_all: int) -> Any:
    """A sub-group's device state into the group's device stack (the whole group in order: the state itself)."""
    import torch

    if len(ks) == k_all and ks == list(range(k_all)):
        return state
    if stack is None:
        stack = torch.empty((k_all, state.shape[1]), dtype=state.dtype, device=state.device)
    stack[torch.tensor(ks, dtype=torch.int64, device=state.device)] = state
    return stack


def _finite_rows(state: Any) -> list[bool]:
    """Whether each row of a device state is finite (one small copy of ``K`` flags, not of the rows)."""
    import torch

    return [bool(v) for v in torch.isfinite(state).all(dim=1).cpu().tolist()]
