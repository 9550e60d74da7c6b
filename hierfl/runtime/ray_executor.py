"""The Ray executor: ``DeviceHost`` actors (many virtual devices each), a ``Leader`` actor and the cloud role.

The cloud role runs in the driver's process by default (:class:`~hierfl.runtime.driver_cloud.DriverCloud`,
behind the same ``.remote`` calls as an actor handle); a Ray client (``ray://``) keeps it as a
``Cloud`` actor (``RayStart(cloud=...)``). "The cloud actor" below means whichever runs it.

This is the one place ``ray.remote`` is applied. Updates travel host → leader → cloud as object
references passed as top-level arguments (Ray resolves them inside the receiving actor; the cloud
role in the driver reads them as zero-copy views of the local object store, and a Ray client's
driver, whose cloud is an actor, never downloads a parameter vector). The number of hosts follows the cluster's CPUs or
``runtime.workers``. The virtual clock, not Ray's completion order, decides what happens.

Coalescing. The driver runs ahead in virtual time and blocks only when an event needs a result
(a job's completion, an evaluation). Jobs submitted meanwhile are buffered and dispatched, at the
latest when the driver is about to block, as one task per host; fold-ins of arriving updates are
buffered likewise and sent as one call. Every job is still submitted before the event that
consumes it, and all jobs that overlap in virtual time run in parallel, but Ray's fixed cost per
task (several milliseconds with an 800 KB result on a small machine) is paid per batch, not per
job. A batch's results are the rows of one array; receivers take zero-copy row views, and its
stats list is fetched once, by the first ``wait`` on one of its jobs (:class:`BatchStats`), so
a job costs the driver no Ray call of its own.

Placement. A job's result does not depend on where it runs (it is a pure function of its start
model, the device's data and its seed), so jobs go to the host with the fewest outstanding jobs;
every host holds the shared, read-only training arrays from the object store. A trainer that keeps
per-device state in the host (SCAFFOLD's control variates) is the exception: each device then has
a fixed home host, ``device % workers``, and all its jobs run there in submission order (Ray runs
one caller's tasks on an actor in order), so its state evolves exactly as in the local executor.
Personalised trainers' device state (local layers) instead travels with the jobs: a job takes
the handle of its device's state and returns the new state as a third batch array, whose handle
the executor keeps (``_states``); such jobs are pooled like any other.

Start-up. Nothing of Ray's start needs the data, so :class:`RayStart` begins it as soon as the
scenario is loaded: ``ray.init`` (or attaching to a cluster), then the actors are requested, and
their processes import torch (seconds each) while the driver generates the data. The executor then
puts the data into the object store once, sends each actor its references (``setup``) and a
warm-up job (torch's lazy start-up), and returns without waiting: an actor runs its calls in the
order they were sent, so the first jobs simply queue behind the warm-up. Nothing here changes what
a job computes. Attaching to a running cluster (``address``) skips ``ray.init``'s daemons; an
address where nothing listens fails within seconds instead of Ray's minutes of retries, and so
does a cluster that refuses this process's authentication token (:mod:`hierfl.runtime.ray_auth`).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.executor import Executor, Job, RunData, Term
from hierfl.learn.batched import JobGroups
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost, ModelSpec, fast_path_of
from hierfl.runtime import ray_auth, signals
from hierfl.runtime.driver_cloud import DriverCloud
from hierfl.runtime.ray_head import lean_init
from hierfl.runtime.start import ExecutorStart

__all__ = ["RayExecutor", "RayStart", "RayDeviceHost", "RayLeaderHost", "RayCloud", "probe_address"]

_MAX_BUFFERED_JOBS_PER_HOST = 64
_PROBE_TIMEOUT_S = 5.0
_INIT_ATTEMPTS = 2          # ray.init tries on a busy machine
_INIT_RETRY_PAUSE_S = 2.0


class HostActor(DeviceHost):
    """A :class:`DeviceHost` whose process starts before the data exists: ``setup`` builds the role."""

    def __init__(self, import_torch: bool = True) -> None:  # the role's own __init__ runs in setup, with the data
        if import_torch:  # the slow part of an actor's start: done while the driver builds
            importlib.import_module("torch")
        # else: torch comes with setup, after the data is in the object store; at that moment the
        # driver holds its freshly generated arrays and their store copy at once (RayStart._start)

    def setup(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray], model: ModelSpec,
              eval_sets: Any = None, x_test: np.ndarray | None = None, y_test: np.ndarray | None = None) -> float:
        """Become the device host of this run's data (and of the test set, for :meth:`evaluate`);
        returns the actor's ``time.time()``."""
        DeviceHost.__init__(self, x_train, y_train, parts, model, eval_sets)
        self.x_test, self.y_test = x_test, y_test
        return time.time()

    def warm(self, spec: TrainSpec, params: np.ndarray) -> float:
        """:meth:`DeviceHost.warmup` and one evaluation's lazy start-up; returns the actor's ``time.time()``."""
        self.warmup(spec, params)
        if self.x_test is not None and len(self.x_test):
            self.evaluate(np.asarray(params), rows=2)
        return time.time()

    def evaluate(self, params: np.ndarray, rows: int | None = None) -> tuple[float, float]:
        """(accuracy, loss) of the global model ``params`` on the test set: :meth:`Cloud.evaluate`'s
        computation (the same trainer code and torch thread count, so the same bits), run here so that
        the cloud actor never imports torch. ``rows``: only the first ones (the warm-up)."""
        x, y = (self.x_test, self.y_test) if rows is None else (self.x_test[:rows], self.y_test[:rows])
        return self.trainer.evaluate(np.asarray(params)[: self.trainer.num_params], x, y)

    def model_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in this process, which has torch: the build's model work (initial parameters,
        layout, FLOPs), so that the driver need not import torch. Runs before :meth:`setup`."""
        return fn(*args)


class CloudActor(Cloud):
    """A :class:`Cloud` whose process starts before the data exists: ``setup`` builds the role."""

    def __init__(self) -> None:  # the role's own __init__ runs in setup, with the data
        # no torch here: the cloud aggregates with numpy, and the Ray executor evaluates on a host;
        # torch is imported on first use only if a robust rule needs a validation loss (Zeno)
        pass

    def setup(self, init_params: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, model: ModelSpec,
              robust: Any = None) -> float:
        """Become the cloud of this run; returns the actor's ``time.time()``."""
        Cloud.__init__(self, init_params, x_test, y_test, model, robust)
        return time.time()

    def warm(self) -> float:
        """:meth:`Cloud.warmup` when this cloud will evaluate (a robust rule's validation loss), else
        nothing (it would import torch); returns the actor's ``time.time()``."""
        if self.robust is not None and self.robust.validation > 0:
            self.warmup()
        return time.time()


# Actor classes (typed Any: Ray's remote wrappers are dynamic).
RayDeviceHost: Any = ray.remote(HostActor)
RayLeaderHost: Any = ray.remote(LeaderHost)
RayCloud: Any = ray.remote(CloudActor)


def probe_address(address: str, timeout_s: float = _PROBE_TIMEOUT_S) -> None:
    """Raise :class:`ConnectionError` at once if nothing listens at a Ray ``address``.

    ``ray.init`` retries an unreachable address for minutes; a TCP connect tells within
    ``timeout_s``. ``auto`` is resolved as Ray resolves it (``RAY_ADDRESS``, then the cluster
    ``ray start`` recorded on this machine); ``local`` starts a new instance and is not probed.
    """
    if address == "local":
        return
    target = address.split("://", 1)[1] if "://" in address else address
    if address == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
        except ImportError:  # another Ray version: leave it to ray.init
            return
        try:
            target = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError as exc:
            raise ConnectionError(f"no running Ray cluster found for address 'auto' ({exc}); start one with "
                                  "`ray start --head`, or name it with --address HOST:PORT") from None
    host, _, port = target.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        raise ConnectionError(f"cannot read a port in Ray address {address!r}; expected HOST:PORT, "
                              "ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address} ({host}:{port}: {exc.strerror or exc}); is the cluster "
                              "running? Start one with `ray start --head`, or fix --address / runtime.address") from None


def _init_with_retry(address: str | None, attempts: int = _INIT_ATTEMPTS) -> None:
    """``ray.init``, tried again (after a shutdown and a pause) when it fails for a reason other than
    an unreachable address: on a busy machine Ray's daemons sometimes miss their start-up deadline
    (reliability). The last failure is raised, naming the attempts."""
    for attempt in range(1, attempts + 1):
        try:
            if address:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
            else:  # a new local instance, without the daemons a run never uses (hierfl.runtime.ray_head)
                lean_init(logging_level=logging.WARNING, log_to_driver=True)
            return
        except ConnectionError:
            raise  # nothing listens there: trying again will not help
        except Exception as exc:  # noqa: BLE001 - retried, then raised with the attempts named
            if attempt == attempts:
                raise RuntimeError(f"Ray did not start after {attempts} attempts: {type(exc).__name__}: {exc}") from exc
            logging.getLogger(__name__).warning("Ray did not start (%s: %s); trying again", type(exc).__name__, exc)
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001 - best effort before the next attempt
                pass
            time.sleep(_INIT_RETRY_PAUSE_S)


_RAY_MESSAGES = {"muted": False}


def _filter_ray_messages() -> None:
    """Ray's relay of cluster errors to the driver (``print_to_stdstream``, Ray's private module) drops
    the raylet's death notice, the dead raylet's last log lines (about 8 KB): hierfl's cluster watch
    reports the loss in one line (:mod:`hierfl.runtime.cluster_watch`). Everything after
    :meth:`RayExecutor.silence` is dropped. Installed once per process; best effort."""
    try:
        worker = ray._private.worker
        relay = worker.print_to_stdstream
    except Exception:  # noqa: BLE001 - another Ray version: its messages stay
        return
    if getattr(relay, "hierfl_filter", False):
        return

    def filtered(data: Any, ignore_prefix: bool) -> None:
        if _RAY_MESSAGES["muted"] or (data.get("pid") == "raylet" and any(
                str(line).startswith("Raylet is terminated") for line in data.get("lines", ()))):
            return
        relay(data, ignore_prefix)

    filtered.hierfl_filter = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = filtered


def _probe_cluster(endpoints: tuple[tuple[str, tuple[str, int]], ...], timeout_s: float = 2.0) -> str | None:
    """None while every endpoint accepts a TCP connection; else which refused it. Only a refusal
    counts (nothing listens there any more): a slow answer on a busy machine is not a loss."""
    for name, (host, port) in endpoints:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except ConnectionRefusedError:
            return f"the Ray {name} at {host}:{port} is gone"
        except OSError:
            continue
    return None


class RayStart(ExecutorStart):
    """Ray up (started or attached to) and the actors' processes starting, before the data exists.

    ``ray.init`` runs here, on the caller's thread (Ray ties the daemons it starts to the thread
    that starts them); the actors are only requested, so their processes start and import torch
    while the caller generates the data. :meth:`executor` hands the data over.
    """

    kind = "ray"

    def __init__(self, kind: str = "ray", workers: int | str = "auto", address: str | None = None,
                 cloud: str = "auto", gpus_per_host: float = 0.0) -> None:
        super().__init__(kind)
        if gpus_per_host < 0:
            raise ValueError(f"gpus_per_host must be >= 0, got {gpus_per_host}")
        self.gpus_per_host = float(gpus_per_host)  # runtime.gpus_per_host: each host actor's num_gpus
        self.owns_ray = False
        self.client = bool(address and "://" in address)  # a Ray client: the object store is remote
        if cloud not in ("auto", "driver", "actor"):
            raise ValueError(f"cloud must be auto, driver or actor, not {cloud!r}")
        # the cloud role runs in the driver (hierfl.runtime.driver_cloud): one process and about 0.1 GB
        # less; a Ray client keeps the actor, since there every input would cross the network
        self.cloud_in = ("actor" if self.client else "driver") if cloud == "auto" else cloud
        self.workers = 0
        self.hosts: list[Any] = []
        self.cloud: Any = None
        self._closed = False
        self._error: Exception | None = None
        try:
            self._start(workers, address)
        except Exception as exc:  # noqa: BLE001 - raised by executor(), where the run reports it
            self._error = exc

    def _start(self, workers: int | str, address: str | None) -> None:
        if address and (address != "auto" or not ray.is_initialized()):
            # also when this process is already connected: an address that answers nothing is an error
            probe_address(address)
        if not ray.is_initialized():
            # a token-protected cluster named by its address (or RAY_ADDRESS, as in a job): token mode
            # where the user meant it, and a refused token reported now, not after Ray's retries
            ray_auth.prepare(address or os.environ.get("RAY_ADDRESS"))
            _init_with_retry(address)
            self.owns_ray = True
            signals.reassert()  # ray.init installs its own SIGTERM handler: SIGTERM must stay Ctrl-C
        self.marks["ray_ready"] = time.time()
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.workers = max(1, int(total_cpus)) if workers == "auto" else int(workers)
        host_cpus = min(1.0, total_cpus / self.workers)
        # on a run's own (one-machine) instance only the first host imports torch at once (it makes
        # the initial model: model_call); the others import it with their set-up, after the data's
        # put, the run's memory peak, which they would raise by about 0.14 GB each (scale, goal
        # (c)). On a cluster a host's import may overlap the driver's build as before.
        gpus = {"num_gpus": self.gpus_per_host} if self.gpus_per_host > 0 else {}
        self.hosts = [RayDeviceHost.options(num_cpus=host_cpus, scheduling_strategy="SPREAD", **gpus).remote(
            h == 0 or not self.owns_ray) for h in range(self.workers)]
        self.cloud = (DriverCloud(CloudActor()) if self.cloud_in == "driver"
                      else RayCloud.options(num_cpus=0).remote())

    def model_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the first host actor, which imports torch anyway: the driver process then
        never imports torch (1.6 CPU s and about 0.2 GB less per run, on 2 cores part of the
        wall too). The call waits for the actor's start, which overlaps the data's generation. The
        result is the same bits as in this process (the initial parameters are a function of the
        seed only). If Ray did not start, or the actor fails, it runs here instead, so that errors
        are reported as before (a failed start by :meth:`executor`, a model error as itself)."""
        if self._error is None and self.hosts:
            try:
                return ray.get(self.hosts[0].model_call.remote(fn, *args))
            except Exception:  # noqa: BLE001 - the same call here: its own error, or the start's, is raised later
                pass
        return fn(*args)

    def check(self) -> RayStart:
        """Raise what went wrong while starting (e.g. :class:`ConnectionError` for an address where
        nothing listens); kept until the data is handed over, so the run reports it as a start-up failure."""
        if self._error is not None:
            raise self._error
        return self

    def hand_over(self) -> bool:
        """Stop owning Ray (:meth:`close` then leaves it up for another start); whether this start owned it."""
        owned, self.owns_ray = self.owns_ray, False
        return owned

    def take_over(self, owned: bool) -> None:
        """Own Ray (``close`` shuts it down) if ``owned``: what another start's :meth:`hand_over` gave up."""
        self.owns_ray = self.owns_ray or bool(owned)

    def executor(self, data: RunData) -> RayExecutor:
        """Hand the data over; returns the executor (which now owns Ray and the actors)."""
        return RayExecutor(data, start=self)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this start began it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.owns_ray:
            ray.shutdown()  # ends every process of this instance, the actors included
            return
        for actor in [*self.hosts, self.cloud]:
            try:
                if actor is not None and not isinstance(actor, DriverCloud):
                    ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass


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
    state: Any = None       # personalised jobs: handle of the device's state going in
    state_ref: Any = None   # ... and the batch array of the states coming out (row ``row``)
    batch: BatchStats | None = None  # the stats of the batch it was dispatched in, fetched once


@dataclass(eq=False)
class BatchStats:
    """The stats list of one dispatched batch, shared by its slots: fetched by the first ``wait`` on
    one of them, so the other jobs of the batch cost the driver no Ray call at all."""

    ref: Any
    value: list[dict[str, float]] | None = None


@dataclass(eq=False)
class StateOf:
    """Handle of the device state a personalised job returns (row ``slot.row`` of ``slot.state_ref``)."""

    slot: Slot


class RayExecutor(Executor):
    """Runs the roles as Ray actors on a local or remote cluster."""

    name = "ray"

    def __init__(self, data: RunData, workers: int | str = "auto", address: str | None = None,
                 start: RayStart | None = None) -> None:
        self._start = (start or RayStart("ray", workers, address, gpus_per_host=data.gpus_per_host)).check()
        _RAY_MESSAGES["muted"] = False
        _filter_ray_messages()
        self.workers = self._start.workers
        self.hosts: list[Any] = self._start.hosts
        self.cloud: Any = self._start.cloud
        # the data goes into the object store once; every actor reads it zero-copy from there
        x_ref, y_ref = ray.put(data.x_train), ray.put(data.y_train)
        parts_ref = ray.put(data.parts)
        evals_ref = ray.put(list(data.eval_sets))
        self._num_evals = len(data.eval_sets)
        self._eval_devices = [int(d) for d, _, _ in data.eval_sets]
        self._states: dict[int, Any] = {}
        self._base: Any = None  # where stateless devices take their local layers (None: the initial model)
        self._init = ray.put(np.asarray(data.init_params, dtype=np.float32))
        xt_ref, yt_ref = ray.put(data.x_test), ray.put(data.y_test)
        self._data_refs = (x_ref, y_ref, xt_ref, yt_ref)
        self._start.marks["data_in_store"] = time.time()
        self.leaders: Any = RayLeaderHost.options(num_cpus=0).remote(data.robust) if data.num_edges > 0 else None
        # set-up and warm-up are sent, not awaited: each actor runs them before the jobs sent after them
        self._setups = [h.setup.remote(x_ref, y_ref, parts_ref, data.model, evals_ref, xt_ref, yt_ref)
                        for h in self.hosts]
        self._cloud_setup = self.cloud.setup.remote(self._init, xt_ref, yt_ref, data.model, data.robust)
        self._robust = data.robust is not None
        self._warms = [h.warm.remote(data.spec, self._init) for h in self.hosts]
        self._cloud_warm = self.cloud.warm.remote()
        self._outstanding = [0] * self.workers
        # fold-ins return nothing and nobody waits on them; a lost input (a dead host's result)
        # would make one fail unseen, so their refs are checked at every checkpoint and at the end
        self._unchecked: list[Any] = []
        self._jobs: list[Slot] = []
        self._cloud_adds: list[tuple[float, Any, float | None]] = []
        self._edge_adds: list[tuple[int, float, Any, float | None]] = []
        # Byzantine tags of the buffered adds, parallel to the lists above (robust aggregation only)
        self._cloud_tags: list[Any] = []
        self._edge_tags: list[Any] = []
        self._groups: JobGroups | None = JobGroups() if fast_path_of(data.model) else None  # opt-in fast path
        self._exported: dict[int, tuple[Any, Any]] = {}  # id(ref) -> (ref, value) fetched by the current checkpoint

    def _started(self) -> list[Any]:
        return [*self._setups, self._cloud_setup, *self._warms, self._cloud_warm]

    def _get(self, refs: Any) -> Any:
        """``ray.get``; if it fails, a failed set-up or warm-up (the first cause) is raised instead."""
        try:
            return ray.get(refs)
        except Exception:
            ray.get(self._started())
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

    # -- buffering ----------------------------------------------------------------------------
    @staticmethod
    def _ref_row(handle: Any) -> tuple[Any, int | None]:
        if isinstance(handle, StateOf):
            return handle.slot.state_ref, handle.slot.row
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
            if spec.personal is not None:
                self._dispatch_personal(host, spec, batch)
                continue
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
            box = BatchStats(stats_ref)
            for k, slot in enumerate(batch):
                slot.ref, slot.row, slot.stats, slot.batch = out_ref, k, stats_ref, box

    def _dispatch_personal(self, host: int, spec: TrainSpec, batch: list[Slot]) -> None:
        """One call for a host's personalised jobs: start models and device states in, three arrays out."""
        index, rows, arrays = self._unique_refs([slot.params for slot in batch] + [slot.state for slot in batch])
        k = len(batch)
        out_ref, stats_ref, state_ref = self.hosts[host].train_many.options(num_returns=3).remote(
            [s.device for s in batch], [s.seed for s in batch], spec, index[:k], rows[:k], None, *arrays,
            state_index=index[k:], state_rows=rows[k:])
        box = BatchStats(stats_ref)
        for j, slot in enumerate(batch):
            slot.ref, slot.row, slot.stats, slot.state_ref, slot.batch = out_ref, j, stats_ref, state_ref, box

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
            tags, self._cloud_tags = self._cloud_tags, []
            index, rows, refs = self._unique_refs([h for _, h, _ in adds])
            self._unchecked.append(
                self.cloud.add_many.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds], *refs,
                                           **self._tags_kw(tags)))
        if self._edge_adds and self.leaders is not None:
            eadds, self._edge_adds = self._edge_adds, []
            etags, self._edge_tags = self._edge_tags, []
            index, rows, refs = self._unique_refs([h for _, _, h, _ in eadds])
            self._unchecked.append(
                self.leaders.add_many.remote([e for e, _, _, _ in eadds], [w for _, w, _, _ in eadds], index, rows,
                                             [c for *_, c in eadds], *refs, **self._tags_kw(etags)))
            self._prune_unchecked()

    @staticmethod
    def _tags_kw(tags: list[Any]) -> dict[str, Any]:
        """``tags=…`` for an add call when one of the updates is Byzantine (else nothing: today's call)."""
        return {"tags": tags} if any(t is not None for t in tags) else {}

    def flush(self) -> None:
        """Dispatch everything buffered (called before the driver blocks)."""
        self._flush_adds()

    # -- executor interface -------------------------------------------------------------------
    def initial_model(self) -> Any:
        """ObjectRef of the initial vector."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Buffer the job; it is dispatched before the driver next blocks."""
        if self._exported:  # a checkpoint is over (taken between two events): let its fetched batches go
            self._exported.clear()
        slot = Slot(device, seed, spec, params, control)
        if spec.personal is not None:  # the device's state goes in; the job's new state becomes its state
            state = self._states.get(device, self._base if self._base is not None else self._init)
            if isinstance(state, StateOf) and state.slot.ref is None:
                self._flush_jobs()  # its previous job is still buffered: bind it to its batch first
            slot.state = state
            self._states[device] = StateOf(slot)
            self._jobs.append(slot)
            if len(self._jobs) >= _MAX_BUFFERED_JOBS_PER_HOST * self.workers:
                self._flush_jobs()
            return slot, slot, -1
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
        """The job's (small) stats; the parameter vector stays in the object store.

        A batch's stats are fetched once, by the first wait on one of its jobs. Everything buffered
        is sent first only when that fetch would block (the batch is not finished yet), so the
        hosts and receivers work while the driver waits; otherwise nothing is sent, and buffered
        jobs keep gathering into full batches (one task per batch, not per job: sending on every
        fetch made batches of one to three jobs with two hosts).
        """
        slot: Slot = job.params
        self._need(slot)
        if slot.ref is None:
            self.flush()
        try:
            box = slot.batch
            if box is None:  # a finished job restored from a checkpoint (a one-row batch of its own)
                return dict(self._get(slot.stats)[slot.row])
            if box.value is None:
                ready, _ = ray.wait([box.ref], timeout=0)
                if not ready:  # the driver is about to block: let the hosts and receivers work meanwhile
                    self._flush_adds()
                box.value = self._get(box.ref)
            return dict(box.value[slot.row])
        finally:
            if slot.host >= 0:  # a job restored from a checkpoint ran on no host of this executor
                self._outstanding[slot.host] -= 1

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Ref of the weighted average, computed in the cloud actor (models may be job Slots)."""
        self._need(*models)
        self._flush_jobs()
        index, rows, refs = self._unique_refs(list(models))
        return self.cloud.average.remote(list(weights), index, rows, *refs)

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """Buffer the fold-in at the leader actor (sent in order with the others)."""
        self._need(update)
        self._edge_adds.append((edge, weight, update, control_coef))
        self._edge_tags.append(tag)

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
        if opt is None and not pack_control and not self._robust:
            return self.leaders.commit.remote(edge)
        return self.leaders.commit.remote(edge, opt, None if base is None else self._model_ref(base), pack_control)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """Buffer the fold-in at the cloud actor (sent in order with the others)."""
        self._need(update)
        self._cloud_adds.append((weight, update, control_coef))
        self._cloud_tags.append(tag)

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Ref of the new global model (pending fold-ins travel with the commit)."""
        self._need(base)
        adds, self._cloud_adds = self._cloud_adds, []
        tags, self._cloud_tags = self._cloud_tags, []
        self._flush_adds()
        # plain averaging needs no base (a robust rule may: norm clipping, Zeno, the records)
        base_ref = None if base is None or (opt is None and not self._robust) else self._model_ref(base)
        if not adds:
            return self.cloud.commit.remote(opt, base_ref)
        handles = [h for _, h, _ in adds]
        index, rows, refs = self._unique_refs(handles + ([base_ref] if base_ref is not None else []))
        base_pos = -1
        if base_ref is not None:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.add_many_commit.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds],
                                                 opt, base_pos, *refs, **self._tags_kw(tags))

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """The reports of ``tier``'s role (waits for its commits: actor calls run in order)."""
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            return []
        return list(ray.get(role.take_reports.remote()))

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """Ref of the ``tier`` rule's aggregate of ``models``, computed in the cloud actor."""
        self._need(*models, base)
        self._flush_jobs()
        extra = [] if base is None else [self._model_ref(base)]
        index, rows, refs = self._unique_refs(list(models) + extra)
        base_pos = -1
        if extra:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.robust_average.remote(tier, entity, list(weights), index, rows, tags, base_pos, *refs)

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """Zeno++ in the cloud actor (waits for its answer)."""
        self._need(base, candidate)
        self._flush_adds()
        return bool(ray.get(self.cloud.screen.remote(self._model_ref(base), self._model_ref(candidate), tag)))

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """Ref of ``opt``'s step from ``base`` with ``Δ = Σ c·(a − b)``, computed in the leader or cloud actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.server_step.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, *refs)
        return self.cloud.server_step.remote(opt, coefs, plus, plus_rows, minus, minus_rows, *refs)

    def _step_args(self, tier: str, base: Any, terms: list[Term]) -> tuple[Any, ...]:
        """What a role's step from ``base`` with ``Δ = Σ c·(a − b)`` is called with: the coefficients,
        the positions and rows of the terms' vectors, and the unique refs (the base first: arrays[0])."""
        self._need(base, *[h for _, p, m in terms for h in (p, m)])
        self._flush_adds()
        handles = [self._model_ref(base)] + [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = self._unique_refs(handles)
        plus, minus, plus_rows, minus_rows = self._term_positions(terms, index[1:], rows[1:])
        if tier == "edge" and self.leaders is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        return [c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, refs

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """Ref of ``base`` stepped by the ``tier`` rule's aggregate of the deltas, computed in the actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.robust_combine.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, tags,
                                                      *refs)
        return self.cloud.robust_combine.remote(opt, coefs, plus, plus_rows, minus, minus_rows, tags, *refs)

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
        """Evaluation runs in a host actor; only two floats come back."""
        self._need(params)
        self.flush()
        ref, row = self._ref_row(params)
        if row is not None:
            raise ValueError("evaluate expects a model handle, not a job result")
        # on the host with the fewest outstanding jobs (the cloud actor has no torch): the same
        # computation as Cloud.evaluate, so the same two floats whichever process runs it
        host = min(range(self.workers), key=lambda h: (self._outstanding[h], h))
        acc, loss = self._get(self.hosts[host].evaluate.remote(ref))
        return float(acc), float(loss)

    def fetch(self, params: Any) -> np.ndarray:
        """Download a vector to the driver (final model only)."""
        self._need(params)
        self.flush()
        self._check_unchecked()
        ref, row = self._ref_row(params)
        arr = self._get(ref)
        return np.array(arr if row is None else arr[row], dtype=np.float32)

    def device_state(self, device: int) -> np.ndarray | None:
        """Download ``device``'s state (after its last submitted job)."""
        handle = self._states.get(device)
        if handle is None:
            return None
        self.flush()
        ref, row = self._ref_row(handle)
        arr = ray.get(ref)
        return np.array(arr if row is None else arr[row], dtype=np.float32)

    def set_personal_base(self, params: Any) -> None:
        """A model ref (the warm-up's global model)."""
        self._need(params)
        self.flush()
        self._base = self._model_ref(params)

    def set_device_state(self, device: int, state: np.ndarray) -> None:
        """Put ``device``'s state (into the object store)."""
        self._states[device] = ray.put(np.array(state, dtype=np.float32))

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """Per model, its evaluation sets cut into one contiguous chunk per host; rows come back in order."""
        self._need(params, *(per_device or {}).values())
        self.flush()
        out = np.zeros((self._num_evals, 3))
        calls, where = [], []
        for model, group in self._eval_groups(self._num_evals, self._eval_devices, params, per_device):
            model_ref = self._model_ref(model)
            bounds = np.linspace(0, len(group), self.workers + 1).astype(int)
            for host in range(self.workers):
                slots = group[int(bounds[host]):int(bounds[host + 1])]
                if not slots:
                    continue
                base = self._base if self._base is not None else self._init
                handles = [self._states.get(self._eval_devices[k], base) for k in slots]
                index, rows, refs = self._unique_refs(handles)
                calls.append(self.hosts[host].evaluate_devices.remote(spec.personal, slots, index, rows, model_ref,
                                                                      *refs))
                where.append(slots)
        for slots, rows_out in zip(where, ray.get(calls)):
            out[slots] = rows_out
        return out

    def similarity(self, models: list[Any], base: Any = None) -> np.ndarray:
        """Computed in the cloud actor; only the matrix comes back."""
        self._need(*models, base)
        self._flush_adds()
        handles = list(models) + ([] if base is None else [self._model_ref(base)])
        index, rows, refs = self._unique_refs(handles)
        k = len(models)
        base_pos = -1
        if base is not None:
            base_pos = index[k]
        return np.asarray(ray.get(self.cloud.similarity.remote(base_pos, index[:k], rows[:k], *refs)))

    def close(self) -> None:
        """Kill the actors; shut Ray down if this executor's start began it."""
        if self.leaders is not None and not self._start.owns_ray:
            try:
                ray.kill(self.leaders)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        self._start.close()

    def hand_over_cluster(self) -> bool:
        """Stop owning Ray (this executor's close leaves it up); whether it owned it."""
        return self._start.hand_over()

    def take_over_cluster(self, owned: bool) -> None:
        """Own Ray (this executor's close shuts it down) if ``owned``."""
        self._start.take_over(owned)

    def silence(self) -> None:
        """Ray's relays of worker logs and cluster errors print nothing more (after the cluster was lost,
        they would print kilobytes of the dead raylet's log). Ray's private module: best effort."""
        try:
            worker = ray._private.worker
            worker.global_worker_stdstream_dispatcher.remove_handler("ray_print_logs")
        except Exception:  # noqa: BLE001 - another Ray version: its messages stay
            pass
        _RAY_MESSAGES["muted"] = True

    def cluster_probe(self) -> Callable[[], str | None] | None:
        """TCP connections to this node's raylet and to the GCS (a refused one: that process is gone).

        Ray's core worker ends the driver's process itself (exit status 1, no Python exception) when
        it next touches the object store of a raylet that died, so a loss must be seen from outside
        the calls into Ray: :class:`~hierfl.runtime.cluster_watch.ClusterWatch` runs this probe on a
        thread. None through a Ray client (``ray://``): this machine runs no raylet of the cluster."""
        if self._start.client:
            return None
        try:
            node = ray._private.worker.global_worker.node
            raylet = (str(node.node_ip_address), int(node.node_manager_port))
            gcs_host, _, gcs_port = str(node.gcs_address).rpartition(":")
            gcs = (gcs_host.strip("[]") or "127.0.0.1", int(gcs_port))
        except Exception:  # noqa: BLE001 - a Ray without these fields: nothing to watch
            return None
        return functools.partial(_probe_cluster, (("raylet", raylet), ("GCS", gcs)))

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
        # also: each device's state handle (personalised trainers) and the personal base model
        out: dict[str, Any] = {"states": self._states, "base": self._base}
        if self._groups is not None:
            out.update({"open": list(self._groups.open), "next_id": self._groups._next_id})
        return out

    def set_driver_state(self, state: Any) -> None:
        """Re-form the open group from the restored (undispatched) job slots, in their order."""
        self._states, self._base = state["states"], state["base"]
        if "open" not in state or self._groups is None:
            return
        self._groups._next_id = int(state["next_id"])
        for slot in state["open"]:
            slot.group, closed = self._groups.add(slot, slot.spec, slot.params)
            assert not closed, "a restored open group closed while being re-formed"
            self._jobs.append(slot)

    def export_roles(self) -> dict[str, Any]:
        """Every buffered call is sent and checked first; actor calls run in order, so the states
        reflect all of them. (A checkpoint begins here: the batches fetched for its handles are
        forgotten.)"""
        self._exported.clear()
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
        """Object refs, job slots and device-state handles live in this Ray session only."""
        return isinstance(obj, (Slot, StateOf, ray.ObjectRef))

    def export_handle(self, handle: Any) -> Any:
        """A job slot's row and stats, a device state's value, or a ref's value."""
        if isinstance(handle, StateOf):
            if handle.slot.state_ref is None:
                self.flush()
            return ("ref", np.array(ray.get(handle.slot.state_ref)[handle.slot.row]))
        if isinstance(handle, Slot):
            if self._groups is not None and any(handle is j for j in self._groups.open):
                # an undispatched job of the open fast-path group: kept as the job itself
                params = handle.params
                value = self.export_handle(params) if self.is_handle(params) else ("value", params)
                return ("pending", handle.device, handle.seed, handle.spec, value)
            if handle.ref is None:
                self.flush()
            stats = handle.batch.value if handle.batch is not None else None
            if stats is None:
                stats = self._export_get(handle.stats)
            return ("slot", np.array(self._export_get(handle.ref)[handle.row]), dict(stats[handle.row]))
        return ("ref", ray.get(handle))

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
