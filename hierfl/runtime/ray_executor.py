"""The Ray executor: ``DeviceHost`` actors (many virtual devices each), a ``Leader`` actor and the cloud role.

The cloud role runs in the driver's process by default (:class:`~hierfl.runtime.driver_cloud.DriverCloud`,
behind the same ``.remote`` calls as an actor handle); a Ray client (``ray://``) keeps it as a
``Cloud`` actor (``RayStart(cloud=...)``). "The cloud actor" below means whichever runs it.

Updates travel host → leader → cloud as object references passed as top-level arguments (Ray
resolves them inside the receiving actor; the cloud role in the driver reads them as zero-copy
views of the local object store, and a Ray client's driver, whose cloud is an actor, never
downloads a parameter vector). The virtual clock, not Ray's completion order, decides what happens.

The executor is composed of: Ray and its actors (:mod:`hierfl.runtime.ray_cluster`: their start,
and ``executor.cluster``), the outbox that sends jobs and fold-ins in batches
(:mod:`hierfl.runtime.ray_batches`), the leader and cloud aggregation (:class:`RayServers`,
``executor.servers``) and the checkpoint state (:class:`RayState`, ``executor.state``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.learn.batched import JobGroups
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.executor import Executor, ExecutorState, Job, RunData, Servers, Term, eval_groups
from hierfl.runtime.ray_batches import (Batches, Slot, model_ref, ref_row, tags_kw, term_positions,
                                        unique_refs)
from hierfl.config.plugins import bundle as plugin_bundle
from hierfl.runtime.ray_cluster import (RayCloud, RayCluster, RayDeviceHost, RayLeaderHost, RayStart, is_lost,
                                        listen_to_ray, probe_address)
from hierfl.runtime.roles import fast_path_of

__all__ = ["RayExecutor", "RayServers", "RayState", "RayStart", "RayDeviceHost", "RayLeaderHost", "RayCloud",
           "is_lost", "probe_address"]


class RayServers(Servers):
    """The leader and cloud aggregation in their actors; inputs travel as refs, results come back as refs."""

    def __init__(self, batches: Batches, robust: bool) -> None:
        self._b = batches
        self.leaders, self.cloud = batches.leaders, batches.cloud
        self._robust = robust

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """Buffer the fold-in at the leader actor (sent in order with the others)."""
        self._b.fold_edge(edge, weight, update, control_coef, tag)

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """Ref of the new leader model."""
        assert self.leaders is not None
        self._b.need(base)
        self._b.flush()
        if opt is None and not pack_control and not self._robust:
            return self.leaders.commit.remote(edge)
        return self.leaders.commit.remote(edge, opt, None if base is None else model_ref(base), pack_control)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """Buffer the fold-in at the cloud actor (sent in order with the others)."""
        self._b.fold_cloud(weight, update, control_coef, tag)

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Ref of the new global model (pending fold-ins travel with the commit)."""
        self._b.need(base)
        adds, tags = self._b.take_cloud_adds()
        self._b.flush()
        # plain averaging needs no base (a robust rule may: norm clipping, Zeno, the records)
        base_ref = None if base is None or (opt is None and not self._robust) else model_ref(base)
        if not adds:
            return self.cloud.commit.remote(opt, base_ref)
        handles = [h for _, h, _ in adds]
        index, rows, refs = unique_refs(handles + ([base_ref] if base_ref is not None else []))
        base_pos = -1
        if base_ref is not None:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.add_many_commit.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds],
                                                 opt, base_pos, *refs, **tags_kw(tags))

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """The reports of ``tier``'s role (waits for its commits: actor calls run in order)."""
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            return []
        return list(ray.get(role.take_reports.remote()))

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """Zeno++ in the cloud actor (waits for its answer)."""
        self._b.need(base, candidate)
        self._b.flush()
        return bool(ray.get(self.cloud.screen.remote(model_ref(base), model_ref(candidate), tag)))

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """Ref of the ``tier`` rule's aggregate of ``models``, computed in the cloud actor."""
        self._b.need(*models, base)
        self._b.flush_jobs()
        extra = [] if base is None else [model_ref(base)]
        index, rows, refs = unique_refs(list(models) + extra)
        base_pos = -1
        if extra:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.robust_average.remote(tier, entity, list(weights), index, rows, tags, base_pos, *refs)

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """Ref of ``base`` stepped by the ``tier`` rule's aggregate of the deltas, computed in the actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.robust_combine.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, tags,
                                                      *refs)
        return self.cloud.robust_combine.remote(opt, coefs, plus, plus_rows, minus, minus_rows, tags, *refs)

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Ref of the weighted average, computed in the cloud actor (models may be job Slots)."""
        self._b.need(*models)
        self._b.flush_jobs()
        index, rows, refs = unique_refs(list(models))
        return self.cloud.average.remote(list(weights), index, rows, *refs)

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """Ref of ``Σ c·(a − b)`` computed in the leader or cloud actor (inputs resolved there, as refs)."""
        self._b.need(*[h for _, p, m in terms for h in (p, m)])
        self._b.flush()  # binds buffered jobs to their batch rows; keeps per-actor call order
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        handles = [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = unique_refs(handles)
        plus, minus, plus_rows, minus_rows = term_positions(terms, index, rows)
        return role.combine.remote([c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, *refs)

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """Ref of ``opt``'s step from ``base`` with ``Δ = Σ c·(a − b)``, computed in the leader or cloud actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.server_step.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, *refs)
        return self.cloud.server_step.remote(opt, coefs, plus, plus_rows, minus, minus_rows, *refs)

    def _step_args(self, tier: str, base: Any, terms: list[Term]) -> tuple[Any, ...]:
        """What a role's step from ``base`` with ``Δ = Σ c·(a − b)`` is called with: the coefficients,
        the positions and rows of the terms' vectors, and the unique refs (the base first: arrays[0])."""
        self._b.need(base, *[h for _, p, m in terms for h in (p, m)])
        self._b.flush()
        handles = [model_ref(base)] + [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = unique_refs(handles)
        plus, minus, plus_rows, minus_rows = term_positions(terms, index[1:], rows[1:])
        if tier == "edge" and self.leaders is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        return [c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, refs

    def control(self, edge: int | None = None) -> Any:
        """Ref of the cloud's control ``c`` (or ``edge``'s ``c_e``) after every call sent so far (actor calls
        run in order)."""
        self._b.flush()
        if edge is None:
            return self.cloud.get_control.remote()
        assert self.leaders is not None
        return self.leaders.get_control.remote(edge)

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
                 inputs: list[Any]) -> tuple[list[Any], float, dict[str, float], int]:
        """Computed in the cloud actor; the outputs are put into the object store (a server task is rare:
        one per round at most, so its result may cross to the driver and back)."""
        self._b.need(*inputs)
        self._b.flush_jobs()
        index, rows, refs = unique_refs(list(inputs))
        outputs, flops, stats, kept = ray.get(self.cloud.run_task.remote(name, dict(params), seed, tier, entity,
                                                                         index, rows, *refs))
        return [ray.put(o) for o in outputs], flops, stats, kept


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
        return {"hosts": hosts, "leaders": None if leaders is None else ray.get(leaders), "cloud": ray.get(cloud)}

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
        """Object refs and job slots live in this Ray session only."""
        return isinstance(obj, (Slot, ray.ObjectRef))

    def export_handle(self, handle: Any) -> Any:
        """A job slot's row and stats, or a ref's value."""
        if isinstance(handle, Slot):
            return self._export_slot(handle)
        return ("ref", ray.get(handle))

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


class RayExecutor(Executor):
    """Runs the roles as Ray actors on a local or remote cluster."""

    name = "ray"

    def __init__(self, data: RunData, workers: int | str = "auto", address: str | None = None,
                 start: RayStart | None = None) -> None:
        self._start = (start or RayStart("ray", workers, address, gpus_per_host=data.gpus_per_host)).check()
        listen_to_ray()
        self.workers = self._start.workers
        self.hosts: list[Any] = self._start.hosts
        self.cloud: Any = self._start.cloud
        # the data goes into the object store once; every actor reads it zero-copy from there
        x_ref, y_ref = ray.put(data.x_train), ray.put(data.y_train)
        parts_ref = ray.put(data.parts)
        evals_ref = ray.put(list(data.eval_sets))
        self._num_evals = len(data.eval_sets)
        self._eval_devices = [int(d) for d, _, _ in data.eval_sets]
        self._init = ray.put(np.asarray(data.init_params, dtype=np.float32))
        self.state_base: Any = None  # the model devices' state starts from, once replaced (None: the initial model)
        xt_ref, yt_ref = ray.put(data.x_test), ray.put(data.y_test)
        self._data_refs = (x_ref, y_ref, xt_ref, yt_ref)
        self._start.marks["data_in_store"] = time.time()
        self.leaders: Any = None
        if data.num_edges > 0:  # plug-ins first (constructor), then the role (its arguments may hold theirs)
            self.leaders = RayLeaderHost.options(num_cpus=0).remote(plugin_bundle())
            self.leaders.setup.remote(data.robust)
        # set-up and warm-up are sent, not awaited: each actor runs them before the jobs sent after them
        self._setups = [h.setup.remote(x_ref, y_ref, parts_ref, data.model, evals_ref, xt_ref, yt_ref)
                        for h in self.hosts]
        self._cloud_setup = self.cloud.setup.remote(self._init, xt_ref, yt_ref, data.model, data.robust,
                                                     data.public)
        # a device's per-device state that was never written starts from the initial model (JobContext.base)
        self._bases = [h.set_state_base.remote(self._init) for h in self.hosts]
        self._warms = [h.warm.remote(data.spec, self._init) for h in self.hosts]
        self._cloud_warm = self.cloud.warm.remote()
        groups = JobGroups() if fast_path_of(data.model) else None  # the opt-in fast path
        self._batches = Batches(self.hosts, self.leaders, self.cloud, groups)
        self.servers = RayServers(self._batches, data.robust is not None)
        self.state = RayState(self, self._batches)
        self.cluster = RayCluster(self._start)

    def _get(self, refs: Any) -> Any:
        """``ray.get``; if it fails, a failed set-up or warm-up (the first cause) is raised instead."""
        try:
            return ray.get(refs)
        except Exception:
            ray.get([*self._setups, self._cloud_setup, *self._bases, *self._warms, self._cloud_warm])
            raise

    def data_views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(x_train, y_train, x_test, y_test): read-only views of the object store's copy (no copy
        made); None through a Ray client (``ray://``), where reading them back would download a copy."""
        if self._start.client:
            return None
        x, y, xt, yt = ray.get(list(self._data_refs))
        return x, y, xt, yt

    def startup_marks(self) -> dict[str, float]:
        """Epoch seconds at which start-up steps ended: the driver's, and the actors' set-up and warm-up."""
        marks = dict(self._start.marks)
        setups, warms = self._get([*self._setups, self._cloud_setup]), self._get([*self._warms, self._cloud_warm])
        marks["hosts_set_up"] = max(setups[:-1])
        marks["hosts_warm"] = max(warms[:-1])
        marks["cloud_warm"] = warms[-1]
        return marks

    def initial_model(self) -> Any:
        """ObjectRef of the initial vector."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Buffer the job; it is dispatched before the driver next blocks."""
        self.state.checkpoint_over()
        batches = self._batches
        slot = Slot(device, seed, spec, params, control)
        if batches.groups is not None:
            if spec.keeps_device_state or control is not None:
                batches.need(params, control)
            else:
                slot.group, _ = batches.groups.add(slot, spec, params)
        batches.submit(slot)
        return slot, slot, -1

    def wait(self, job: Job) -> dict[str, float]:
        """The job's (small) stats; the parameter vector stays in the object store.

        A batch's stats are fetched once, by the first wait on one of its jobs. Everything buffered
        is sent first only when that fetch would block (the batch is not finished yet), so the
        hosts and receivers work while the driver waits; otherwise nothing is sent, and buffered
        jobs keep gathering into full batches (one task per batch, not per job: sending on every
        fetch made batches of one to three jobs with two hosts).
        """
        slot: Slot = job.params
        self._batches.need(slot)
        if slot.ref is None:
            self._batches.flush()
        try:
            box = slot.batch
            if box is None:  # a finished job restored from a checkpoint (a one-row batch of its own)
                return dict(self._get(slot.stats)[slot.row])
            if box.value is None:
                ready, _ = ray.wait([box.ref], timeout=0)
                if not ready:  # the driver is about to block: let the hosts and receivers work meanwhile
                    self._batches.flush()
                box.value = self._get(box.ref)
            return dict(box.value[slot.row])
        finally:
            if slot.host >= 0:  # a job restored from a checkpoint ran on no host of this executor
                self._batches.outstanding[slot.host] -= 1

    def set_state_base(self, params: Any) -> None:
        """A model ref, sent to every host after every buffered job (actor calls run in order)."""
        self._batches.need(params)
        self._batches.flush()
        self.state_base = model_ref(params)
        ray.get([h.set_state_base.remote(self.state_base) for h in self.hosts])

    def evaluate(self, params: Any, model: int = 0, test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """Evaluation runs in a host actor; only two floats come back."""
        self._batches.need(params)
        self._batches.flush()
        ref, row = ref_row(params)  # a model handle, or a job's result (a device's own model: party_models)
        # on the host with the fewest outstanding jobs (the cloud actor has no torch): the same
        # computation as Cloud.evaluate, so the same two floats whichever process runs it
        acc, loss = self._get(self.hosts[self._batches.least_busy()].evaluate.remote(ref, None, model, row, test_rows))
        return float(acc), float(loss)

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """Per model, its evaluation sets cut into one contiguous chunk per host; rows come back in order."""
        self._batches.need(params, *(per_device or {}).values())
        self._batches.flush()
        out = np.zeros((self._num_evals, 3))
        calls, where = [], []
        for model, group in eval_groups(self._num_evals, self._eval_devices, params, per_device):
            ref = model_ref(model)
            for host, slots in enumerate(self._eval_chunks(group, spec)):
                if not slots:
                    continue
                calls.append(self.hosts[host].evaluate_devices.remote(slots, ref, method=_evaluating(spec)))
                where.append(slots)
        for slots, rows_out in zip(where, ray.get(calls)):
            out[slots] = rows_out
        return out

    def _eval_chunks(self, group: list[int], spec: TrainSpec) -> list[list[int]]:
        """Each host's evaluation slots: one contiguous chunk per host, or — devices evaluated with state
        their home host keeps (a job method's ``device_evaluation``) — each device's slots at its home."""
        if _evaluating(spec) is not None:
            return [[k for k in group if self._eval_devices[k] % self.workers == host] for host in range(self.workers)]
        bounds = np.linspace(0, len(group), self.workers + 1).astype(int)
        return [group[int(bounds[host]):int(bounds[host + 1])] for host in range(self.workers)]

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> np.ndarray:
        """Computed in the cloud actor; only the matrix comes back."""
        self._batches.need(*models, base)
        self._batches.flush()
        handles = list(models) + ([] if base is None else [model_ref(base)])
        index, rows, refs = unique_refs(handles)
        k = len(models)
        base_pos = -1
        if base is not None:
            base_pos = index[k]
        return np.asarray(ray.get(self.cloud.similarity.remote(base_pos, index[:k], rows[:k], *refs, measure=measure)))

    def fetch(self, params: Any) -> np.ndarray:
        """Download a vector to the driver (final model only)."""
        self._batches.need(params)
        self._batches.flush()
        self._batches.check()
        ref, row = ref_row(params)
        arr = self._get(ref)
        return np.array(arr if row is None else arr[row], dtype=np.float32)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this executor's start began it."""
        if self.leaders is not None and not self._start.owns_ray:
            try:
                ray.kill(self.leaders)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        self._start.close()


def _evaluating(spec: TrainSpec) -> Any:
    """The job method devices are evaluated through (its ``device_evaluation``, with state their home host
    keeps), or None."""
    method = spec.method
    return method if method is not None and method.device_evaluation else None
