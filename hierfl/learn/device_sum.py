"""The weighted sum of a round's results on their training device (:mod:`hierfl.learn.staging`).

:class:`DeviceWeightedSum` has the interface of :class:`hierfl.core.aggregate.WeightedSum` (``add``, ``result``,
``count``, ``total_weight``, ``folds``), the streaming float64 average of federated averaging (McMahan et al., 2017) as
Flower's ``aggregate`` computes it, and its bits; the aggregating roles use it for results kept on a device
(:meth:`~hierfl.learn.staging.DeviceRow.accumulator`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.aggregate import WeightedSum
from hierfl.learn.staging import DeviceModel, DeviceRow, DeviceStack, Staging

__all__ = ["DeviceWeightedSum", "DeviceControlSum", "split_controlled"]


def _cpu_view(vector: Any) -> np.ndarray:
    """What the numpy kernel folds: a CPU device's result or model in its own memory (no crossing), else the array."""
    if isinstance(vector, DeviceRow) and vector.stack.host is not None:
        return vector.view()
    if isinstance(vector, DeviceModel) and vector.cpu is not None:
        return vector.cpu
    return np.asarray(vector)


class DeviceWeightedSum:
    """:class:`~hierfl.core.aggregate.WeightedSum` on the training device: ``add(v, w)`` repeatedly, then ``result()``.

    The arithmetic is the numpy reference's, operation by operation, in the order of the ``add`` calls:
    the first update ``v₁·w₁`` in float64, each next one ``acc += float64(v)·w`` (a product then a sum, two
    kernels: never a fused multiply-add, which rounds once instead of twice), then ``acc / W`` (by a float64
    tensor on the device: CUDA turns a division by a host scalar into a multiplication by its reciprocal,
    which rounds differently) rounded to float32 — IEEE operations, each correctly rounded, so the bits are
    the reference's. While every update is one and the same object, nothing is computed and the result is
    the reference's own (a host copy of that one vector, averaged by :class:`WeightedSum`, which returns it
    unchanged where that is exact). Host vectors added among device rows are uploaded (counted). The result
    is copied to the host once, into a reused buffer (counted).

    ``kernel``: ``torch`` (the default on an accelerator) or ``numpy`` (the default on a CPU device, whose
    memory is the host's: the reference itself on the rows in place, block by block through a cache-sized
    scratch, which is faster there than whole-vector torch passes; the same bits either way, as the tests hold).
    """

    def __init__(self, staging: Staging, kernel: str | None = None) -> None:
        self.staging = staging
        kernel = kernel or ("numpy" if staging.device == "cpu" else "torch")
        if kernel not in ("numpy", "torch") or (kernel == "numpy" and staging.device != "cpu"):
            raise ValueError(f"kernel must be torch, or numpy on a CPU device; got {kernel!r} on {staging.device}")
        self._host_sum = WeightedSum() if kernel == "numpy" else None
        self._acc: Any = None
        self._tmp: Any = None
        self._same: Any = None
        self._weights: list[float] = []
        self.total_weight = 0.0
        self.count = 0
        self.folds = 0

    def add(self, vector: Any, weight: float) -> None:
        """Fold in one update (a :class:`DeviceRow`, or a host vector: uploaded)."""
        w = float(weight)
        if not np.isfinite(w) or w < 0:
            raise ValueError(f"aggregation weights must be finite and >= 0, got {weight!r}")
        if self._host_sum is not None:  # a CPU device: the reference on the rows where they are
            self._host_sum.add(_cpu_view(vector), w)
            self.total_weight, self.count, self.folds = (self._host_sum.total_weight, self._host_sum.count,
                                                         self._host_sum.folds)
            return
        if self._acc is None and (self._same is None or vector is self._same):
            self._same = vector  # (the same object again: deferred, as the reference does)
            self._weights.append(w)
        else:
            self._flush()
            self._fold(vector, w)
        self.total_weight += w
        self.count += 1

    def _tensor(self, vector: Any) -> Any:
        import torch

        if isinstance(vector, (DeviceRow, DeviceModel)) and vector.staging.device == self.staging.device:
            return vector.tensor
        host = np.ascontiguousarray(np.asarray(vector), dtype=np.float32)
        self.staging.transfers.count("h2d", 1)
        return torch.from_numpy(host).to(self.staging.device)

    def _fold(self, vector: Any, w: float) -> None:
        import torch

        t = self._tensor(vector)
        if self._acc is None:
            self._acc = t.to(torch.float64)
            self._acc.mul_(w)
        else:
            if tuple(t.shape) != tuple(self._acc.shape):
                raise ValueError(f"vector shapes differ: {tuple(t.shape)} vs {tuple(self._acc.shape)}")
            if self._tmp is None:
                self._tmp = torch.empty_like(self._acc)
            self._tmp.copy_(t)       # float32 → float64: exact
            self._tmp.mul_(w)        # one rounding, as numpy's multiply
            self._acc.add_(self._tmp)  # one rounding, as numpy's +=
        self.folds += 1

    def _flush(self) -> None:
        same, weights = self._same, self._weights
        if same is None:
            return
        self._same, self._weights = None, []
        for w in weights:
            self._fold(same, w)

    def __getstate__(self) -> dict[str, Any]:
        # a checkpoint of a running aggregation holds the partial sum on the host (its float64 bits, exactly)
        state = dict(self.__dict__)
        state["_acc"] = None if self._acc is None else self._acc.cpu().numpy().copy()
        state["_tmp"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._acc is not None:
            import torch

            self._acc = torch.from_numpy(self._acc).to(self.staging.device)

    def result_resident(self) -> Any:
        """``Σ w_k v_k / Σ w_k`` left on the device (:class:`~hierfl.learn.staging.DeviceModel`: copied to the host
        only when something there reads it), the same bits as :meth:`result`; where every update was one and the
        same vector, that vector itself, as :meth:`result` gives it."""
        import torch

        if self._host_sum is not None:
            out = self._host_sum.result()
            if out is self._host_sum._same:  # (one vector every time: that vector, as result() returns it)
                self.staging.transfers.count("d2h", 1)
                self.staging.keep(out, out)
                return out
            return DeviceModel(torch.from_numpy(out), self.staging, cpu=out)
        if self._acc is None:
            return self.result()  # (one object every time: the reference's rules, and its identity)
        if self.total_weight <= 0:
            raise ValueError("aggregation weights sum to zero: nothing to average")
        acc = self._acc
        acc.div_(torch.tensor(self.total_weight, dtype=torch.float64, device=acc.device))
        self._acc = self._tmp = None
        model = acc.to(torch.float32)
        return DeviceModel(model, self.staging, cpu=model.numpy() if self.staging.device == "cpu" else None)

    def result(self) -> np.ndarray:
        """``Σ w_k v_k / Σ w_k`` as a host float32 vector; raises if nothing (or only zero weight) was added."""
        import torch

        if self._host_sum is not None:
            out = self._host_sum.result()
            self.staging.transfers.count("d2h", 1)  # (the CPU: the aggregate is host memory already)
            self.staging.keep(out, out)
            return out
        if self._same is None and self._acc is None:
            raise ValueError("aggregation needs at least one update")
        if self.total_weight <= 0:
            raise ValueError("aggregation weights sum to zero: nothing to average")
        if self._acc is None:  # one object every time: the reference on its host copy (bits and identity rules)
            ref = WeightedSum()
            host = np.asarray(self._same)
            for w in self._weights:
                ref.add(host, w)
            self._same, self._weights = None, []
            return ref.result()
        acc = self._acc
        acc.div_(torch.tensor(self.total_weight, dtype=torch.float64, device=acc.device))
        model = acc.to(torch.float32)  # float64 → float32, round to nearest (as numpy's astype)
        out = self.staging.buffers.take(int(acc.shape[0]))
        torch.from_numpy(out).copy_(model)  # device → host: one copy
        self.staging.transfers.count("d2h", 1)
        self.staging.keep(out, model)  # (a group that starts from it next uses this copy: no upload)
        self._acc = self._tmp = None
        return out


def split_controlled(row: DeviceRow) -> tuple[DeviceRow, Any]:
    """A control-variates message kept on its device (layout :data:`~hierfl.core.message.CONTROLLED`, a job
    method's result left there) as its model part (a :class:`DeviceRow`, views of the same memory) and its control
    part (a tensor view); nothing is copied."""
    from hierfl.core.message import CONTROLLED, MODEL

    stack = row.stack
    parts = CONTROLLED.slices(CONTROLLED.num_params_of(int(stack.tensor.shape[1])))
    model = DeviceStack(stack.tensor[:, parts[MODEL]], stack.staging,
                        None if stack.host is None else stack.host[:, parts[MODEL]]).row(row.index)
    return model, row.tensor[parts["control"]]


class DeviceControlSum:
    """``Σ κ_i Δc_i`` of control-variates messages kept on the training device (docs/explanation/algorithms.md §5.6),
    summed there in float64 with the numpy reference's operations in its order: each
    ``float64(Δc_i)·κ_i`` one rounding, each sum one rounding (the reference is the aggregating role's host sum).
    :meth:`host` is the sum as the host's float64 vector, copied once (counted); ``start`` continues a host sum."""

    def __init__(self, staging: Staging, start: np.ndarray | None = None) -> None:
        import torch

        self.staging = staging
        self.acc: Any = None
        if start is not None:  # (a sum begun on the host, from updates read there: uploaded, counted)
            staging.transfers.count("h2d", 1)
            self.acc = torch.from_numpy(np.ascontiguousarray(start, dtype=np.float64)).to(staging.device, copy=True)

    def add(self, control: Any, coef: float) -> None:
        """Fold in one message's control part (a float32 tensor on the device) with its coefficient ``κ_i``."""
        import torch

        dc = control.to(torch.float64) * float(coef)
        self.acc = dc if self.acc is None else self.acc + dc

    def host(self) -> np.ndarray:
        """The float64 sum on the host (one copy, counted)."""
        self.staging.transfers.count("d2h", 1)
        return self.acc.cpu().numpy().copy()
