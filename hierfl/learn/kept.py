"""A device's kept state on the training device between its jobs (``training.optimizer_state: per_device``).

A device's optimizer state (SGD's momentum buffer, Adam's moments) is kept in its home host across its jobs.
On an accelerator, copying it to the host after every job and back before the next one moves two or three
model-sized vectors per job that no one on the host reads. :class:`KeptTensor` keeps such a vector where it was
computed: the next job of the device continues from it with a copy on the device (not a crossing), and only a
reader on the host (a checkpoint, the memory report) makes a host copy. A checkpoint therefore holds plain numpy
vectors, as before, and loads on any device; the continuation computes with the same values, hence the same bits.

The crossings that remain (a kept vector read on the host, a host vector loaded into a job on the device, e.g.
after a resume) are counted in the host's transfer counter (:class:`hierfl.learn.staging.Transfers`). torch is
imported lazily.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.learn.staging import Transfers

__all__ = ["KeptTensor", "keep", "load_into"]


def _plain(array: np.ndarray) -> np.ndarray:
    """What a pickled :class:`KeptTensor` becomes: its host copy."""
    return array


class KeptTensor:
    """One float32 vector of a device's kept state, on the training device (``tensor``, owned: nothing else
    writes it). numpy functions see a host copy (``__array__``, counted); pickling keeps only that copy."""

    __slots__ = ("tensor", "transfers")

    def __init__(self, tensor: Any, transfers: Transfers) -> None:
        self.tensor = tensor
        self.transfers = transfers

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.tensor.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel()) * 4

    def host(self) -> np.ndarray:
        """A host copy (one model-sized crossing, counted)."""
        self.transfers.count("d2h", 1)
        return self.tensor.cpu().numpy().copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.host()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        return _plain, (self.host(),)


def keep(tensor: Any, transfers: Transfers | None) -> Any:
    """What a job leaves of ``tensor`` (a buffer the next job reuses) in its device's kept state: on the training
    device a copy there (``transfers`` given: an accelerator's trainer), else a host numpy copy."""
    if transfers is None:
        return tensor.cpu().numpy().copy()
    return KeptTensor(tensor.detach().clone(), transfers)


def load_into(buffer: Any, kept: Any, transfers: Transfers | None) -> None:
    """Write a kept vector into ``buffer`` (a job's optimizer buffer, flat or a view of the same size): from the
    device where it is kept (no crossing), or from a host vector (one upload on an accelerator, counted)."""
    import torch

    if isinstance(kept, KeptTensor):
        buffer.copy_(kept.tensor.view_as(buffer))
        return
    values = np.asarray(kept, dtype=np.float32)
    if buffer.device.type == "cpu" and transfers is None:
        buffer.numpy()[...] = values.reshape(buffer.shape)
        return
    if transfers is not None:
        transfers.count("h2d", 1)
    buffer.copy_(torch.from_numpy(np.ascontiguousarray(values)).view_as(buffer))
