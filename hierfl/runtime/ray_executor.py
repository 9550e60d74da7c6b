"""The Ray executor: ``DeviceHost`` actors (many virtual devices each), a ``Leader`` actor and a ``Cloud`` actor.

This is the one place ``ray.remote`` is applied. Updates travel host → leader → cloud as object
references passed as top-level arguments (Ray resolves them inside the receiving actor; the
driver never downloads a parameter vector). The number of hosts follows the cluster's CPUs or
``runtime.workers``. The virtual clock, not Ray's completion order, decides what happens.

Coalescing. The driver runs ahead in virtual time and blocks only when an event needs a result
(a job's completion, an evaluation). Jobs submitted meanwhile are buffered and dispatched, at the
latest when the driver is about to block, as one task per host; fold-ins of arriving updates are
buffered likewise and sent as one call. Every job is still submitted before the event that
consumes it, and all jobs that overlap in virtual time run in parallel, but Ray's fixed cost per
task (several milliseconds with an 800 KB result on a small machine) is paid per batch, not per
job. A batch's results are the rows of one array; receivers take zero-copy row views.

Placement. A job's result does not depend on where it runs (it is a pure function of its start
model, the device's data and its seed), so jobs go to the host with the fewest outstanding jobs;
every host holds the shared, read-only training arrays from the object store. A trainer that keeps
per-device state in the host (SCAFFOLD's control variates) is the exception: each device then has
a fixed home host, ``device % workers``, and all its jobs run there in submission order (Ray runs
one caller's tasks on an actor in order), so its state evolves exactly as in the local executor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.executor import Executor, Job, RunData, Term
from hierfl.learn.batched import JobGroups
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost, fast_path_of

__all__ = ["RayExecutor", "RayDeviceHost", "RayLeaderHost", "RayCloud"]

# Actor classes (typed Any: Ray's remote wrappers are dynamic).
RayDeviceHost: Any = ray.remote(DeviceHost)
RayLeaderHost: Any = ray.remote(LeaderHost)
RayCloud: Any = ray.remote(Cloud)

_MAX_BUFFERED_JOBS_PER_HOST = 16


@dataclass(eq=False)
class Slot:
    """Handle of one job's result: row ``row`` of batch array ``ref`` (bound when dispatched)."""

    device: int
    seed: int
    spec: TrainSpec
    params: Any
    control: Any = None
    ref: Any = None
    row: int | None = None
    stats: Any = None
    host: int = -1
    group: int = -1  # fast path: the job's group (JobGroups), -1: none


class RayExecutor(Executor):
    """Runs the roles as Ray actors on a local or remote cluster."""

    name = "ray"

    def __init__(self, data: RunData, workers: int | str = "auto", address: str | None = None) -> None:
        self._owns_ray = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
            else:
                ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
            self._owns_ray = True
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.workers = max(1, int(total_cpus)) if workers == "auto" else int(workers)
        host_cpus = min(1.0, total_cpus / self.workers)
        x_ref, y_ref = ray.put(data.x_train), ray.put(data.y_train)
        parts_ref = ray.put(data.parts)
        self.hosts: list[Any] = [
            RayDeviceHost.options(num_cpus=host_cpus, scheduling_strategy="SPREAD").remote(
                x_ref, y_ref, parts_ref, data.model)
            for _ in range(self.workers)
        ]
        self.leaders: Any = RayLeaderHost.options(num_cpus=0).remote() if data.num_edges > 0 else None
        self._init = ray.put(np.asarray(data.init_params, dtype=np.float32))
        self.cloud: Any = RayCloud.options(num_cpus=0).remote(self._init, ray.put(data.x_test), ray.put(data.y_test),
                                                         data.model)
        self._outstanding = [0] * self.workers
        # fold-ins return nothing and nobody waits on them; a lost input (a dead host's result)
        # would make one fail unseen, so their refs are checked at every checkpoint and at the end
        self._unchecked: list[Any] = []
        self._jobs: list[Slot] = []
        self._cloud_adds: list[tuple[float, Any, float | None]] = []
        self._edge_adds: list[tuple[int, float, Any, float | None]] = []
        self._groups: JobGroups | None = JobGroups() if fast_path_of(data.model) else None  # opt-in fast path
        ray.get([a.ready.remote() for a in self._actors()])
        # start-up cost (process start, torch's lazy init) is paid here, not in the first round
        ray.get([h.warmup.remote(data.spec, self._init) for h in self.hosts] + [self.cloud.warmup.remote()])

    def _actors(self) -> list[Any]:
        return [*self.hosts, self.cloud] + ([self.leaders] if self.leaders is not None else [])

    # -- buffering ----------------------------------------------------------------------------
    @staticmethod
    def _ref_row(handle: Any) -> tuple[Any, int | None]:
        if isinstance(handle, Slot):
            return handle.ref, handle.row
        return handle, None

    def _need(self, *handles: Any) -> None:
        """Fast path: close the open group if one of ``handles`` is one of its jobs (rule: JobGroups)."""
        if self._groups is not None and self._groups.open and any(
                isinstance(h, Slot) and h.group == self._groups.open_id for h in handles):
            self._groups.seal()

    def _flush_jobs(self) -> None:
        if not self._jobs:
            return
        jobs, self._jobs = self._jobs, []
        if self._groups is not None and self._groups.open:  # an open group is dispatched whole, once closed
            self._jobs = [s for s in jobs if s.group == self._groups.open_id]
            jobs = [s for s in jobs if s.group != self._groups.open_id]
        groups: dict[tuple[int, TrainSpec], list[Slot]] = {}
        group_host: dict[int, int] = {}
        for slot in jobs:
            if slot.spec.control_variates:  # per-device state lives in its host: a fixed home
                host = slot.device % self.workers
            elif slot.group in group_host:  # a fast-path group is trained whole by one host
                host = group_host[slot.group]
            else:
                host = min(range(self.workers), key=lambda h: (self._outstanding[h], h))
                if slot.group >= 0:
                    group_host[slot.group] = host
            self._outstanding[host] += 1
            slot.host = host
            groups.setdefault((host, slot.spec), []).append(slot)
        for (host, spec), batch in groups.items():
            controls = [slot.control for slot in batch if slot.control is not None]
            index, rows, arrays = self._unique_refs([slot.params for slot in batch] + controls)
            control_index: list[int] | None = None
            if controls:
                it = iter(index[len(batch):])
                control_index = [next(it) if slot.control is not None else -1 for slot in batch]
                index, rows = index[:len(batch)], rows[:len(batch)]
            out_ref, stats_ref = self.hosts[host].train_many.options(num_returns=2).remote(
                [s.device for s in batch], [s.seed for s in batch], spec, index, rows, control_index, *arrays,
                groups=[s.group for s in batch] if self._groups is not None and not spec.control_variates else None)
            for k, slot in enumerate(batch):
                slot.ref, slot.row, slot.stats = out_ref, k, stats_ref

    def _unique_refs(self, handles: list[Any]) -> tuple[list[int], list[int | None], list[Any]]:
        """(index into unique refs, row, unique refs): a batch array is sent once per call."""
        refs: list[Any] = []
        index, rows = [], []
        for h in handles:
            ref, row = self._ref_row(h)
            if ref is None:
                raise RuntimeError("an update was aggregated before its training job was dispatched")
            pos = next((i for i, r in enumerate(refs) if r is ref), None)
            if pos is None:
                refs.append(ref)
                pos = len(refs) - 1
            index.append(pos)
            rows.append(row)
        return index, rows, refs

    def _flush_adds(self) -> None:
        self._flush_jobs()
        if self._cloud_adds:
            adds, self._cloud_adds = self._cloud_adds, []
            index, rows, refs = self._unique_refs([h for _, h, _ in adds])
            self._unchecked.append(
                self.cloud.add_many.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds], *refs))
        if self._edge_adds and self.leaders is not None:
            eadds, self._edge_adds = self._edge_adds, []
            index, rows, refs = self._unique_refs([h for _, _, h, _ in eadds])
            self._unchecked.append(
                self.leaders.add_many.remote([e for e, _, _, _ in eadds], [w for _, w, _, _ in eadds], index, rows,
                                             [c for *_, c in eadds], *refs))
            self._prune_unchecked()

    def flush(self) -> None:
        """Dispatch everything buffered (called before the driver blocks)."""
        self._flush_adds()

    # -- executor interface -------------------------------------------------------------------
    def initial_model(self) -> Any:
        """ObjectRef of the initial vector."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Buffer the job; it is dispatched before the driver next blocks."""
        slot = Slot(device, seed, spec, params, control)
        if self._groups is not None:
            if spec.control_variates or control is not None:
                self._need(params, control)
            else:
                slot.group, _ = self._groups.add(slot, spec, params)
        self._jobs.append(slot)
        if len(self._jobs) >= _MAX_BUFFERED_JOBS_PER_HOST * self.workers:
            self._flush_jobs()
        return slot, slot, -1

    def wait(self, job: Job) -> dict[str, float]:
        """Block on the job's (small) stats; the parameter vector stays in the object store."""
        slot: Slot = job.params
        self._need(slot)
        if slot.ref is None:
            self.flush()
        else:
            self._flush_adds()  # let the receivers work while the driver waits
        try:
            return dict(ray.get(slot.stats)[slot.row])
        finally:
            if slot.host >= 0:  # a job restored from a checkpoint ran on no host of this executor
                self._outstanding[slot.host] -= 1

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Ref of the weighted average, computed in the cloud actor (models may be job Slots)."""
        self._need(*models)
        self._flush_jobs()
        index, rows, refs = self._unique_refs(list(models))
        return self.cloud.average.remote(list(weights), index, rows, *refs)

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None) -> None:
        """Buffer the fold-in at the leader actor (sent in order with the others)."""
        self._need(update)
        self._edge_adds.append((edge, weight, update, control_coef))

    def _model_ref(self, handle: Any) -> Any:
        ref, row = self._ref_row(handle)
        if row is not None:
            raise ValueError("a server optimizer's base must be a model handle, not a job result")
        return ref

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """Ref of the new leader model."""
        assert self.leaders is not None
        self._need(base)
        self._flush_adds()
        if opt is None and not pack_control:
            return self.leaders.commit.remote(edge)
        return self.leaders.commit.remote(edge, opt, None if base is None else self._model_ref(base), pack_control)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None) -> None:
        """Buffer the fold-in at the cloud actor (sent in order with the others)."""
        self._need(update)
        self._cloud_adds.append((weight, update, control_coef))

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Ref of the new global model (pending fold-ins travel with the commit)."""
        self._need(base)
        adds, self._cloud_adds = self._cloud_adds, []
        self._flush_adds()
        base_ref = None if base is None or opt is None else self._model_ref(base)  # plain averaging needs no base
        if not adds:
            return self.cloud.commit.remote(opt, base_ref)
        handles = [h for _, h, _ in adds]
        index, rows, refs = self._unique_refs(handles + ([base_ref] if base_ref is not None else []))
        base_pos = -1
        if base_ref is not None:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.add_many_commit.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds],
                                                 opt, base_pos, *refs)

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """Ref of ``opt``'s step from ``base`` with ``Δ = Σ c·(a − b)``, computed in the leader or cloud actor."""
        self._need(base, *[h for _, p, m in terms for h in (p, m)])
        self._flush_adds()
        base_ref = self._model_ref(base)
        handles = [base_ref] + [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = self._unique_refs(handles)  # the base comes first: arrays[0] in the role
        plus, minus, plus_rows, minus_rows = self._term_positions(terms, index[1:], rows[1:])
        coefs = [c for c, _, _ in terms]
        if tier == "edge":
            if self.leaders is None:
                raise RuntimeError("no leader actor: the scenario has no edge servers")
            return self.leaders.server_step.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, *refs)
        return self.cloud.server_step.remote(opt, coefs, plus, plus_rows, minus, minus_rows, *refs)

    def control(self) -> Any:
        """Ref of the cloud's control ``c`` after every call sent so far (actor calls run in order)."""
        self._flush_adds()
        return self.cloud.get_control.remote()

    @staticmethod
    def _term_positions(terms: list[Term], index: list[int], rows: list[int | None]
                        ) -> tuple[list[int], list[int], list[int | None], list[int | None]]:
        plus: list[int] = []
        minus: list[int] = []
        plus_rows: list[int | None] = []
        minus_rows: list[int | None] = []
        k = 0
        for _, p, m in terms:
            plus.append(index[k])
            plus_rows.append(rows[k])
            k += 1
            if m is None:
                minus.append(-1)
                minus_rows.append(None)
            else:
                minus.append(index[k])
                minus_rows.append(rows[k])
                k += 1
        return plus, minus, plus_rows, minus_rows

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """Ref of ``Σ c·(a − b)`` computed in the leader or cloud actor (inputs resolved there, as refs)."""
        self._need(*[h for _, p, m in terms for h in (p, m)])
        self._flush_adds()  # binds buffered jobs to their batch rows; keeps per-actor call order
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        handles = [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = self._unique_refs(handles)
        plus, minus, plus_rows, minus_rows = self._term_positions(terms, index, rows)
        return role.combine.remote([c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, *refs)

    def evaluate(self, params: Any) -> tuple[float, float]:
        """Evaluation runs in the cloud actor; only two floats come back."""
        self._need(params)
        self.flush()
        ref, row = self._ref_row(params)
        if row is not None:
            raise ValueError("evaluate expects a model handle, not a job result")
        acc, loss = ray.get(self.cloud.evaluate.remote(ref))
        return float(acc), float(loss)

    def fetch(self, params: Any) -> np.ndarray:
        """Download a vector to the driver (final model only)."""
        self._need(params)
        self.flush()
        self._check_unchecked()
        ref, row = self._ref_row(params)
        arr = ray.get(ref)
        return np.array(arr if row is None else arr[row], dtype=np.float32)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this executor started it."""
        for actor in self._actors():
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        if self._owns_ray:
            ray.shutdown()

    # -- checkpoints and recovery -------------------------------------------------------------
    def _prune_unchecked(self) -> None:
        """Check the fold-ins that have finished (keeps the list short on long runs)."""
        if len(self._unchecked) < 256:
            return
        done, self._unchecked = ray.wait(self._unchecked, num_returns=len(self._unchecked), timeout=0)
        ray.get(done)

    def _check_unchecked(self) -> None:
        """Raise if a fold-in failed (e.g. its update came from a host that died)."""
        calls, self._unchecked = self._unchecked, []
        ray.get(calls)

    def driver_state(self) -> Any:
        """The open fast-path group's jobs, in order (they are not dispatched yet; sealing the group
        early would change its members' bits), and the next group id."""
        if self._groups is None:
            return None
        return {"open": list(self._groups.open), "next_id": self._groups._next_id}

    def set_driver_state(self, state: Any) -> None:
        """Re-form the open group from the restored (undispatched) job slots, in their order."""
        if state is None or self._groups is None:
            return
        self._groups._next_id = int(state["next_id"])
        for slot in state["open"]:
            slot.group, closed = self._groups.add(slot, slot.spec, slot.params)
            assert not closed, "a restored open group closed while being re-formed"
            self._jobs.append(slot)

    def export_roles(self) -> dict[str, Any]:
        """Every buffered call is sent and checked first; actor calls run in order, so the states
        reflect all of them."""
        self.flush()
        self._check_unchecked()
        hosts: dict[int, np.ndarray] = {}
        for part in ray.get([h.export_state.remote() for h in self.hosts]):
            hosts.update(part)
        leaders = None if self.leaders is None else self.leaders.export_state.remote()
        cloud = self.cloud.export_state.remote()
        return {"hosts": hosts, "leaders": None if leaders is None else ray.get(leaders), "cloud": ray.get(cloud)}

    def import_roles(self, state: dict[str, Any]) -> None:
        """Device state goes to each device's home host (``device % workers``, whatever the old count)."""
        per_host: list[dict[int, np.ndarray]] = [{} for _ in self.hosts]
        for device, c in state["hosts"].items():
            per_host[int(device) % self.workers][int(device)] = c
        calls = [h.import_state.remote(part) for h, part in zip(self.hosts, per_host)]
        calls.append(self.cloud.import_state.remote(state["cloud"]))
        if self.leaders is not None and state["leaders"] is not None:
            calls.append(self.leaders.import_state.remote(state["leaders"]))
        ray.get(calls)

    def is_handle(self, obj: Any) -> bool:
        """Object refs and job slots live in this Ray session only."""
        return isinstance(obj, (Slot, ray.ObjectRef))

    def export_handle(self, handle: Any) -> Any:
        """A job slot's row and stats, or a ref's value."""
        if isinstance(handle, Slot):
            if self._groups is not None and any(handle is j for j in self._groups.open):
                # an undispatched job of the open fast-path group: kept as the job itself
                params = handle.params
                value = self.export_handle(params) if self.is_handle(params) else ("value", params)
                return ("pending", handle.device, handle.seed, handle.spec, value)
            if handle.ref is None:
                self.flush()
            return ("slot", np.array(ray.get(handle.ref)[handle.row]), dict(ray.get(handle.stats)[handle.row]))
        return ("ref", ray.get(handle))

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
            return Slot(-1, 0, None, None, ref=ray.put(np.asarray(row)[None, :]), row=0, stats=ray.put([stats]),
                        host=-1)
        return ray.put(value[1])

    def is_lost(self, exc: BaseException) -> bool:
        """An actor died, a worker crashed, a node or an object was lost (in ``exc`` or its causes)."""
        lost = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.OwnerDiedError, ray.exceptions.ActorUnavailableError)
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            if isinstance(e, lost):
                return True
            todo += [e.__cause__, e.__context__, getattr(e, "cause", None) if isinstance(
                getattr(e, "cause", None), BaseException) else None]
        return False
