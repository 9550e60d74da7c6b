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

from hierfl.learn.staging import Staging, Transfers

__all__ = ["KeptTensor", "DeviceVectors", "keep", "load_into"]


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


class DeviceVectors:
    """A job method's access to its host's training device (:attr:`JobContext.device_vectors
    <hierfl.core.method.JobContext.device_vectors>`): the vectors a job computes with stay there.

    * :meth:`shared` — a host vector that many jobs read unchanged (the round's start model, the server control
      that came with the job): uploaded once per distinct object and reused while it is among the last
      :attr:`KEEP` such vectors; one the host's staging already holds on the device (an aggregate computed there)
      is not uploaded at all. Identity is what is compared: the aggregators replace their vectors and never
      write one in place, as the staging of the fast path assumes (:class:`hierfl.learn.staging.Staging`).
    * :meth:`state` — a device's kept vector (its :class:`KeptTensor` as it is, a host vector loaded after a
      resume: uploaded, or zeros made on the device for one never written); :meth:`keep` — what the job leaves
      in the device's state (a :class:`KeptTensor`).
    * :meth:`result` — the job's result left on the device where the host takes it there (the local executor: an
      aggregation folds it where it is, :class:`hierfl.learn.staging.DeviceRow`), else :meth:`download` — the
      result's vectors into one host vector (``out`` when given), one copy.

    Every crossing is counted in the host's :class:`~hierfl.learn.staging.Transfers` (``transfers``). On a CPU
    device (``on_host``) a job method keeps its numpy code: the host's memory is the device's.
    """

    KEEP = 8  # shared vectors kept (a round's start model and control, for a few edges whose jobs interleave)

    def __init__(self, staging: Staging) -> None:
        self.staging = staging
        self.device = str(staging.device)
        self.transfers = staging.transfers
        # (host array, its float32 copy on the device), newest last; the host array is held, so its id and
        # buffer are not reused while it is listed
        self._shared: list[tuple[Any, Any]] = []

    @property
    def on_host(self) -> bool:
        """Whether the training device is the host's CPU (numpy is the device's arithmetic there)."""
        return self.device == "cpu"

    def shared(self, vector: Any) -> Any:
        """The read-only float32 device copy of the host vector ``vector`` (a :class:`KeptTensor`: its tensor)."""
        if isinstance(vector, KeptTensor):
            return vector.tensor
        kept = self.staging.on_device(vector)  # (an aggregate computed on the device, or a model staged there)
        if kept is not None:
            return kept
        for host, tensor in self._shared:
            if host is vector:
                return tensor
        tensor = self._upload(vector)
        self._shared = self._shared[-(self.KEEP - 1):] + [(vector, tensor)]
        return tensor

    def state(self, kept: Any, size: int) -> Any:
        """A device's kept vector of ``size`` on the device: its :class:`KeptTensor` (not copied: a job replaces
        state, never writes it in place), a host vector (uploaded, counted), or zeros for None (never written)."""
        import torch

        if isinstance(kept, KeptTensor):
            return kept.tensor
        if kept is None:
            return torch.zeros(int(size), dtype=torch.float32, device=self.device)
        return self._upload(kept)

    def keep(self, tensor: Any) -> KeptTensor:
        """``tensor`` (owned by the caller from now on by no one else) as a device's kept vector."""
        return KeptTensor(tensor, self.transfers)

    def download(self, tensors: list[Any], out: np.ndarray | None = None) -> np.ndarray:
        """The float32 tensors one after another as one host vector (into ``out`` when given): one call,
        counted as the model-sized vectors it moves."""
        import torch

        flat = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        self.transfers.count("d2h", len(tensors))
        if out is None:
            return flat.cpu().numpy().copy()
        torch.from_numpy(out).copy_(flat)
        return out

    def result(self, tensors: list[Any], out: np.ndarray | None, resident: bool) -> Any:
        """The job's result made of the float32 ``tensors`` one after another: left on the device (``resident``,
        the host takes it there, and no ``out``: a :class:`~hierfl.learn.staging.DeviceRow`, which an aggregation
        folds where it is and anything else copies to the host once), else :meth:`download`."""
        if not resident or out is not None:
            return self.download(tensors, out)
        import torch

        from hierfl.learn.staging import DeviceStack

        return DeviceStack(torch.cat(tensors).unsqueeze(0), self.staging).row(0)

    def _upload(self, vector: Any) -> Any:
        import torch

        self.transfers.count("h2d", 1)
        host = np.ascontiguousarray(np.asarray(vector), dtype=np.float32)
        return torch.from_numpy(host).to(self.device, copy=True)
