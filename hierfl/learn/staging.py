"""A fast-path group's results kept on the training device, and their aggregation there.

Without this, a group of ``K`` jobs trained on an accelerator ends with ``K`` model-sized device→host copies
(its results copied into host rows), and the protocols then fold those host rows into a float64 sum
(:class:`hierfl.core.aggregate.WeightedSum`). With it (the local executor's fast path), a group's results stay
where they were trained, as one stacked ``(K, P)`` tensor (:class:`DeviceStack`); an aggregation of them runs on
that device (:class:`~hierfl.learn.device_sum.DeviceWeightedSum`, the same float64 arithmetic in the same order
as the numpy reference) and only its result is copied to the host, once, into a reused buffer (pinned on CUDA). The model the group
starts from is uploaded once (:func:`stage_starts`: once per distinct start model, whatever ``K``), and the
device keeps its copy of the last models it uploaded or aggregated (:meth:`Staging.keep`), so the next round,
which starts from the aggregate just computed there, uploads nothing. So the model-sized host↔device transfers
of a synchronous averaging round are at most two (one after the first round), constant in ``K`` — an emulator on
one accelerator should not move ``K`` models a round where the algorithm (McMahan et al., 2017) broadcasts one.

:class:`Transfers` counts those crossings in the staging code. It counts them on every device as the copies
they are on an accelerator: on a CPU "device" a crossing is an in-memory copy or a zero-copy view, but the
same events are counted, so a CPU test holds the count a GPU run makes.

A result that something other than an aggregation needs (an evaluation, a checkpoint, an asynchronous mix, a
robust rule) is copied to the host on first use, one row (:meth:`DeviceRow.host`, counted), and that copy is
what every later use sees. torch is imported lazily: the aggregating roles import this module without it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["Transfers", "HostBuffers", "Staging", "DeviceStack", "DeviceRow", "DeviceModel", "stage_starts",
           "is_resident", "host_of"]


class Transfers:
    """Model-sized host↔device crossings so far: calls, and models moved (a call may move several)."""

    __slots__ = ("h2d_calls", "h2d_models", "d2h_calls", "d2h_models")

    def __init__(self) -> None:
        self.h2d_calls = self.h2d_models = self.d2h_calls = self.d2h_models = 0

    def count(self, way: str, models: int) -> None:
        """One call moving ``models`` models, host to device (``h2d``) or back (``d2h``)."""
        if way == "h2d":
            self.h2d_calls += 1
            self.h2d_models += int(models)
        elif way == "d2h":
            self.d2h_calls += 1
            self.d2h_models += int(models)
        else:
            raise ValueError(f"a transfer is h2d or d2h, got {way!r}")

    def as_dict(self) -> dict[str, int]:
        """The four counts by name."""
        return {name: int(getattr(self, name)) for name in self.__slots__}

    def reset(self) -> None:
        """Back to zero (a benchmark measures from here)."""
        self.__init__()  # type: ignore[misc]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Transfers):
            return self.as_dict() == other.as_dict()
        if isinstance(other, dict):
            return self.as_dict() == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"Transfers({self.as_dict()})"


class HostBuffers:
    """Reused host vectors that aggregates are copied into (pinned memory on CUDA: a faster, synchronous copy).

    A fresh vector per aggregate would cost its page faults every round. A buffer is handed out again only when
    nothing but this pool refers to it (its reference count, as :class:`hierfl.runtime.result_blocks.ResultBlocks`
    does for result rows): an aggregate still held as a model keeps its buffer. Reuse changes no value: the
    copy writes every element before anyone reads it.
    """

    def __init__(self, device: str = "cpu", keep: int = 3) -> None:
        self.device = device
        self.keep = int(keep)
        self._pool: dict[int, list[np.ndarray]] = {}
        self.reused = 0

    def take(self, size: int) -> np.ndarray:
        """A writable float32 vector of ``size`` that no one else refers to (contents undefined)."""
        pool = self._pool.setdefault(int(size), [])
        for buf in pool:
            # references: the pool's list, this loop's variable and getrefcount's argument
            if sys.getrefcount(buf) <= 3:
                self.reused += 1
                return buf
        if not self.device.startswith("cuda"):  # (pinned memory is CUDA's: elsewhere a plain array)
            buf = np.empty(int(size), dtype=np.float32)
        else:
            import torch

            # (the array keeps its pinned tensor alive: numpy's base is the tensor)
            buf = torch.empty(int(size), dtype=torch.float32, pin_memory=True).numpy()
        if len(pool) < self.keep:
            pool.append(buf)
        return buf


class Staging:
    """One device host's staging state: its training device, the transfer counter and the aggregate buffers."""

    KEEP = 2  # host models whose device copy is kept (a round's start model and the aggregate that follows)

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.transfers = Transfers()
        self.buffers = HostBuffers(device)
        # (host array, its float32 copy on the device), newest last: a model already on the device is not uploaded
        # again (a round's second group, the next round's start from the aggregate just computed there). The host
        # array is held, so its buffer is not reused while listed; models are replaced, never written in place.
        self._resident: list[tuple[np.ndarray, Any]] = []

    def on_device(self, host: Any) -> Any:
        """The device copy of the host array ``host`` (this very object), or None."""
        for array, tensor in self._resident:
            if array is host:
                return tensor
        return None

    def keep(self, host: np.ndarray, tensor: Any) -> None:
        """Remember ``tensor`` as the device copy of ``host``."""
        self._resident = [(a, t) for a, t in self._resident if a is not host][-(self.KEEP - 1):] + [(host, tensor)]

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # a copy (a checkpoint of a running aggregation) starts its own counter and buffers
        return Staging, (self.device,)


def stage_starts(params: list[Any], num_params: int, staging: Staging, host: np.ndarray | None = None) -> Any:
    """The ``(K, P)`` float32 tensor of a group's start models on the training device.

    Each distinct start model (by identity: a round's jobs all download the same object) crosses once, in one
    call, whatever ``K``: on CUDA the distinct models are stacked in a pinned block, copied in one transfer and
    repeated on the device; on the CPU they are written into ``host`` (the group's result rows, trained in
    place) or a fresh array. The rows hold exact copies, so the bits are those of a per-row copy.
    """
    import torch

    k_jobs, P = len(params), int(num_params)
    first_of: dict[int, int] = {}  # id of a distinct start → its position among the distinct ones
    distinct: list[Any] = []  # host vectors (on the CPU: a model on the device as its memory), or None on a GPU
    kept: list[Any] = []      # their device copies where the device has one
    which = []
    for p in params:
        j = first_of.get(id(p))
        if j is None:
            j = first_of[id(p)] = len(distinct)
            if isinstance(p, DeviceModel) and p.staging.device == staging.device:
                # a model computed on the device (an edge's aggregate): trained from where it is, nothing crosses
                vec, tensor = (p.view() if staging.device == "cpu" else None), p.tensor
            else:
                vec = np.asarray(p)
                tensor = staging.on_device(vec)
            shape = tuple(p.shape) if isinstance(p, DeviceModel) else vec.shape
            if shape != (P,):
                raise ValueError(f"expected a flat parameter vector of shape ({P},), got {shape}")
            distinct.append(vec)
            kept.append(tensor)
        which.append(j)
    missing = [j for j, t in enumerate(kept) if t is None]
    if missing:
        staging.transfers.count("h2d", len(missing))
    if staging.device == "cpu":
        for j in missing:  # (the CPU: the host memory is the device's, the array is its own copy; listed so
            staging.keep(distinct[j], distinct[j])  # that the count is a GPU's)
        if host is None or not (host.dtype == np.float32 and host.flags.c_contiguous and host.shape == (k_jobs, P)
                                and not any(np.may_share_memory(v, host) for v in distinct)):
            host = np.empty((k_jobs, P), dtype=np.float32)
        if len(distinct) == 1:
            host[...] = distinct[0]  # (one broadcast copy instead of K row copies)
        else:
            for k, j in enumerate(which):
                host[k] = distinct[j]
        return torch.from_numpy(host)
    if missing:
        block = torch.empty((len(missing), P), dtype=torch.float32, pin_memory=True)
        block_np = block.numpy()
        for i, j in enumerate(missing):
            block_np[i] = distinct[j]
        moved = block.to(staging.device)  # (synchronous: the pinned block is free again when it returns)
        for i, j in enumerate(missing):
            kept[j] = moved[i]
            staging.keep(distinct[j], moved[i])
    if len(distinct) == 1:
        return kept[0].unsqueeze(0).expand(k_jobs, P).clone()
    return torch.stack(kept).index_select(0, torch.tensor(which, dtype=torch.int64, device=staging.device))


class DeviceStack:
    """A group's results: a ``(K, P)`` float32 tensor on the training device (on the CPU, ``host`` is the same
    memory as a numpy array: its rows need no copy)."""

    __slots__ = ("tensor", "staging", "host")

    def __init__(self, tensor: Any, staging: Staging, host: np.ndarray | None = None) -> None:
        self.tensor = tensor
        self.staging = staging
        self.host = host

    def row(self, k: int) -> DeviceRow:
        """Job ``k``'s result."""
        return DeviceRow(self, k)


def _plain(array: np.ndarray) -> np.ndarray:
    """What a pickled :class:`DeviceRow` becomes: its host copy (a checkpoint holds no device memory)."""
    return array


class _HostReadable:
    """What a model kept on a device shows the host: numpy reads (``np.asarray``) and pickles (a checkpoint, the
    Ray object store) see its host copy, made once by :meth:`host`."""

    __slots__ = ()

    def host(self) -> np.ndarray:  # pragma: no cover - each kind defines it
        raise NotImplementedError

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.host()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        return _plain, (self.host(),)


class DeviceRow(_HostReadable):
    """One job's result on the training device (row ``index`` of its group's :class:`DeviceStack`).

    :meth:`host` is its host copy, made on first use and kept (every later use sees the same array, so
    identity checks on models hold); numpy functions see that copy (``__array__``); pickling keeps only it.
    """

    __slots__ = ("stack", "index", "_host", "_view")

    def __init__(self, stack: DeviceStack, index: int) -> None:
        self.stack = stack
        self.index = int(index)
        self._host: np.ndarray | None = None
        self._view: np.ndarray | None = None

    def view(self) -> np.ndarray:
        """On a CPU device: the result's row in the stack's own memory, kept (one object, as the rows of the host
        path are), no crossing. (A CUDA row has none: :meth:`host`.)"""
        if self._view is None:
            if self.stack.host is None:
                raise ValueError("a result on an accelerator has no host view: copy it with host()")
            self._view = self.stack.host[self.index]
        return self._view

    @property
    def tensor(self) -> Any:
        """The result's ``(P,)`` float32 tensor on the training device."""
        return self.stack.tensor[self.index]

    @property
    def staging(self) -> Staging:
        """Its host's staging state."""
        return self.stack.staging

    def host(self) -> np.ndarray:
        """The result as a host float32 vector (copied once, counted as one model device→host)."""
        if self._host is None:
            stack = self.stack
            stack.staging.transfers.count("d2h", 1)
            if stack.host is not None:
                self._host = stack.host[self.index]  # (the CPU: the group's result row itself)
            else:
                self._host = self.tensor.cpu().numpy()
        return self._host

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self.stack.tensor.shape[1]),)

    def finite(self) -> bool:
        """Whether every value is finite, read as one flag (the result stays where it is)."""
        import torch

        return bool(torch.isfinite(self.tensor).all())

    def accumulator(self) -> Any:
        """A weighted sum on this result's device (what an aggregator folds it into:
        :class:`~hierfl.learn.device_sum.DeviceWeightedSum`)."""
        from hierfl.learn.device_sum import DeviceWeightedSum

        return DeviceWeightedSum(self.stack.staging)


class DeviceModel(_HostReadable):
    """A model computed on the training device (an edge server's aggregate, :meth:`DeviceWeightedSum.result_resident
    <hierfl.learn.device_sum.DeviceWeightedSum.result_resident>`), kept there: a ``(P,)`` float32 tensor.

    The next jobs train from it and the next aggregation folds it where it is; only a use on the host (an output,
    a checkpoint, a message coded for a channel) copies it, once (:meth:`host`, counted), and every later use sees
    that copy. Pickling keeps only the host copy, so a checkpoint holds no device memory and loads on any device.
    On a CPU device ``cpu`` is the tensor's own memory as a numpy array (training reads it in place); the copy is
    still counted, as an accelerator makes it.
    """

    __slots__ = ("tensor", "staging", "cpu", "_host", "__weakref__")

    def __init__(self, tensor: Any, staging: Staging, cpu: np.ndarray | None = None) -> None:
        self.tensor = tensor
        self.staging = staging
        self.cpu = cpu
        self._host: np.ndarray | None = None

    def view(self) -> np.ndarray:
        """On a CPU device: the model's own memory, no crossing (an accelerator's model has none: :meth:`host`)."""
        if self.cpu is None:
            raise ValueError("a model on an accelerator has no host view: copy it with host()")
        return self.cpu

    def host(self) -> np.ndarray:
        """The model as a host float32 vector (copied once, counted as one model device→host)."""
        if self._host is None:
            self.staging.transfers.count("d2h", 1)
            if self.cpu is not None:
                self._host = self.cpu
            else:
                import torch

                out = self.staging.buffers.take(int(self.tensor.shape[0]))
                torch.from_numpy(out).copy_(self.tensor)
                self._host = out
                self.staging.keep(out, self.tensor)  # (a later start from the host copy uploads nothing)
        return self._host

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self.tensor.shape[0]),)

    def accumulator(self) -> Any:
        """A weighted sum on this model's device (:class:`~hierfl.learn.device_sum.DeviceWeightedSum`)."""
        from hierfl.learn.device_sum import DeviceWeightedSum

        return DeviceWeightedSum(self.staging)


def host_of(vector: Any) -> Any:
    """``vector`` as a host array where it is a model or result kept on a device (copied, counted), else itself."""
    return vector.host() if isinstance(vector, (DeviceRow, DeviceModel)) else vector


def is_resident(vector: Any) -> bool:
    """Whether ``vector`` is kept on its training device (a result, :class:`DeviceRow`, or an aggregate,
    :class:`DeviceModel`)."""
    return isinstance(vector, (DeviceRow, DeviceModel))
