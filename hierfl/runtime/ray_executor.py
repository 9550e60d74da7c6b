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
``executor.servers``, :mod:`hierfl.runtime.ray_servers`) and the checkpoint state (:class:`RayState`,
``executor.state``, :mod:`hierfl.runtime.ray_state`); both are re-exported here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.learn.batched import JobGroups
from hierfl.runtime.driver_cloud import get
from hierfl.runtime.executor_api import Executor, Job, RunData, eval_groups
from hierfl.runtime.ray_batches import Batches, Slot, model_ref, ref_row, unique_refs
from hierfl.runtime.ray_cluster import (RayCloud, RayCluster, RayDeviceHost, RayLeaderHost, RayStart, is_lost,
                                        listen_to_ray, probe_address)
from hierfl.runtime.ray_servers import RayServers
from hierfl.runtime.ray_state import RayState
from hierfl.runtime.gpu_placement import cluster_gpus
from hierfl.runtime.role_common import device_of, on_cpu
from hierfl.runtime.roles import fast_path_of, group_max_of

__all__ = ["RayExecutor", "RayServers", "RayState", "RayStart", "RayDeviceHost", "RayLeaderHost", "RayCloud",
           "is_lost", "probe_address"]


def _note_idle_gpus(data: RunData, gpus_per_host: float) -> None:
    """Warn when ``runtime.device: auto`` will train on CPUs beside idle GPUs: a host that reserves no GPU
    sees none (:func:`hierfl.runtime.gpu_placement.hide_unreserved_gpus`), so ``auto`` is ``cpu`` there."""
    if gpus_per_host > 0 or device_of(data.model) != "auto":
        return
    gpus = sum(cluster_gpus())
    if gpus > 0:
        logging.getLogger(__name__).warning(
            "runtime.device: auto trains on the CPU in every device host: the hosts reserve no GPU "
            "(runtime.gpus_per_host: 0) and so see none, though the cluster has %g GPU(s); set "
            "runtime.gpus_per_host (e.g. 1, with runtime.workers: %g) to train on them", gpus, gpus)


class RayExecutor(Executor):
    """Runs the roles as Ray actors on a local or remote cluster."""

    name = "ray"

    def __init__(self, data: RunData, workers: int | str = "auto", address: str | None = None,
                 start: RayStart | None = None) -> None:
        self._start = (start or RayStart("ray", workers, address, gpus_per_host=data.gpus_per_host)).check()
        listen_to_ray()
        _note_idle_gpus(data, self._start.gpus_per_host)
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
        if data.num_edges > 0:  # a kept leaders' host, or a new one (RayStart.leader_host)
            self.leaders = self._start.leader_host()
            self.leaders.setup.remote(data.robust)
        # set-up and warm-up are sent, not awaited: each actor runs them before the jobs sent after them
        self._setups = [h.setup.remote(x_ref, y_ref, parts_ref, data.model, evals_ref, xt_ref, yt_ref)
                        for h in self.hosts]
        # the cloud reserves no GPU (in the driver or an actor): its torch work, if any, runs on the CPU
        self._cloud_setup = self.cloud.setup.remote(self._init, xt_ref, yt_ref, on_cpu(data.model), data.robust,
                                                     data.public)
        # a device's per-device state that was never written starts from the initial model (JobContext.base)
        self._bases = [h.set_state_base.remote(self._init) for h in self.hosts]
        self._warms = [h.warm.remote(data.spec, self._init) for h in self.hosts]
        self._cloud_warm = self.cloud.warm.remote()
        groups = JobGroups(group_max_of(data.model)) if fast_path_of(data.model) else None  # the opt-in fast path
        self._batches = Batches(self.hosts, self.leaders, self.cloud, groups)
        self.servers = RayServers(self._batches, data.robust is not None)
        self.state = RayState(self, self._batches)
        self.cluster = RayCluster(self._start)

    def _get(self, refs: Any) -> Any:
        """``ray.get`` (of refs or the cloud role's results in the driver: :func:`~hierfl.runtime.driver_cloud.get`);
        if it fails, a failed set-up or warm-up (the first cause) is raised instead."""
        try:
            return get(refs)
        except Exception:
            get([*self._setups, self._cloud_setup, *self._bases, *self._warms, self._cloud_warm])
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
        return np.asarray(get(self.cloud.similarity.remote(base_pos, index[:k], rows[:k], *refs, measure=measure)))

    def fetch(self, params: Any) -> np.ndarray:
        """Download a vector to the driver (final model only)."""
        self._batches.need(params)
        self._batches.flush()
        self._batches.check()
        ref, row = ref_row(params)
        arr = self._get(ref)
        return np.array(arr if row is None else arr[row], dtype=np.float32)

    def close(self) -> None:
        """Kill the actors (or keep them for this process's next run: :meth:`RayStart.close`); shut Ray down
        if this executor's start began it."""
        self._start.close()


def _evaluating(spec: TrainSpec) -> Any:
    """The job method devices are evaluated through (its ``device_evaluation``, with state their home host
    keeps), or None."""
    method = spec.method
    return method if method is not None and method.device_evaluation else None
