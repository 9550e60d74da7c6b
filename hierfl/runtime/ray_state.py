"""The Ray executor's checkpoint state (``executor.state``): the actors' state, and this Ray session's
handles (object refs, job slots) exported by value and put back into a fresh session's object store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from hierfl.runtime.driver_cloud import InDriver, get
from hierfl.runtime.executor_api import ExecutorState
from hierfl.runtime.ray_batches import Batches, Slot

if TYPE_CHECKING:
    from hierfl.runtime.ray_executor import RayExecutor

__all__ = ["RayState"]


class RayState(ExecutorState):
    """The Ray executor's checkpoint state: the actors' state, and the handles of this Ray session by value."""

    def __init__(self, ex: RayExecutor, batches: Batches) -> None:
        self._ex, self._b = ex, batches
        self._exported: dict[int, tuple[Any, Any]] = {}  # id(ref) -> (ref, value) fetched by the current checkpoint

    def checkpoint_over(self) -> None:
        """A checkpoint is over (taken between two events): let its fetched batches go."""
        if self._exported:
            self._exported.clear()

    def driver_state(self) -> Any:
        """The open fast-path group's jobs, in order (they are not dispatched yet; sealing the group
        early would change its members' bits), and the next group id; the model devices' state starts from,
        if it was replaced (None: the initial model)."""
        out: dict[str, Any] = {"base": self._ex.state_base}
        groups = self._b.groups
        if groups is not None:
            out.update({"open": list(groups.open), "next_id": groups.next_id})
        return out

    def set_driver_state(self, state: Any) -> None:
        """Re-form the open group from the restored (undispatched) job slots, in their order; give the hosts
        the state base."""
        if state.get("base") is not None:
            self._ex.set_state_base(state["base"])
        if "open" not in state or self._b.groups is None:
            return
        self._b.reopen(state["open"], int(state["next_id"]))

    def export_roles(self) -> dict[str, Any]:
        """Every buffered call is sent and checked first; actor calls run in order, so the states
        reflect all of them. (A checkpoint begins here: the batches fetched for its handles are
        forgotten.)"""
        self._exported.clear()
        self._b.flush()
        self._b.check()
        ex = self._ex
        hosts: dict[int, dict[str, np.ndarray]] = {}
        for part in ray.get([h.export_state.remote() for h in ex.hosts]):
            hosts.update(part)
        leaders = None if ex.leaders is None else ex.leaders.export_state.remote()
        cloud = ex.cloud.export_state.remote()
        return {"hosts": hosts, "leaders": None if leaders is None else ray.get(leaders), "cloud": get(cloud)}

    def device_state_bytes(self) -> tuple[int, int]:
        """Summed over the device-host actors (after every call sent so far)."""
        self._b.flush()
        parts = ray.get([h.state_bytes.remote() for h in self._ex.hosts])
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    def reset_devices(self, devices: list[int]) -> None:
        """Every buffered job is sent first (actor calls run in order), then each device's home host forgets it."""
        self._b.flush()
        ex = self._ex
        ray.get([ex.hosts[h].reset_devices.remote([int(d) for d in devices if int(d) % ex.workers == h])
                 for h in range(len(ex.hosts))])

    def import_roles(self, state: dict[str, Any]) -> None:
        """Device state goes to each device's home host (``device % workers``, whatever the old count)."""
        ex = self._ex
        per_host: list[dict[int, Any]] = [{} for _ in ex.hosts]
        for device, c in state["hosts"].items():
            per_host[int(device) % ex.workers][int(device)] = c
        calls = [h.import_state.remote(part) for h, part in zip(ex.hosts, per_host)]
        calls.append(ex.cloud.import_state.remote(state["cloud"]))
        if ex.leaders is not None and state["leaders"] is not None:
            calls.append(ex.leaders.import_state.remote(state["leaders"]))
        ray.get(calls)

    def is_handle(self, obj: Any) -> bool:
        """Object refs, job slots and the cloud role's results kept in the driver live in this Ray session only."""
        return isinstance(obj, (Slot, ray.ObjectRef, InDriver))

    def export_handle(self, handle: Any) -> Any:
        """A job slot's row and stats, or a ref's value."""
        if isinstance(handle, Slot):
            return self._export_slot(handle)
        return ("ref", get(handle))

    def _export_slot(self, handle: Slot) -> Any:
        """A job of the open fast-path group as the job itself; any other job as its row and stats."""
        groups = self._b.groups
        if groups is not None and any(handle is j for j in groups.open):
            # an undispatched job of the open fast-path group: kept as the job itself
            params = handle.params
            value = self.export_handle(params) if self.is_handle(params) else ("value", params)
            return ("pending", handle.device, handle.seed, handle.spec, value)
        if handle.ref is None:
            self._b.flush()
        stats = handle.batch.value if handle.batch is not None else None
        if stats is None:
            stats = self._export_get(handle.stats)
        return ("slot", np.array(self._export_get(handle.ref)[handle.row]), dict(stats[handle.row]))

    def _export_get(self, ref: Any) -> Any:
        """``ray.get`` of a batch array or stats list, once per checkpoint: a checkpoint exports every
        job in flight, thousands of rows of a few dozen batches."""
        hit = self._exported.get(id(ref))
        if hit is None or hit[0] is not ref:
            hit = self._exported[id(ref)] = (ref, ray.get(ref))
        return hit[1]

    def import_handle(self, value: Any) -> Any:
        """A finished job becomes a one-row batch put in the object store (and no host's outstanding job)."""
        kind = value[0]
        if kind == "pending":  # set_driver_state puts it back into the open group
            _, device, seed, spec, params = value
            return Slot(device, seed, spec, self.import_handle(params))
        if kind == "value":
            return value[1]
        if kind == "slot":
            _, row, stats = value
            # a finished job's result put back: it is never dispatched again, so it carries no spec
            return Slot(-1, 0, None, None, ref=ray.put(np.asarray(row)[None, :]),  # type: ignore[arg-type]
                        row=0, stats=ray.put([stats]), host=-1)
        return ray.put(value[1])

