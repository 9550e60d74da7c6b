"""Ray itself for the Ray executor: started or attached to, its role actors requested, watched, shut down.

The actors' classes, and the one place ``ray.remote`` is applied, are in :mod:`hierfl.runtime.ray_actors`
(re-exported here). The number of hosts follows the cluster's CPUs or ``runtime.workers``.

Start-up. Nothing of Ray's start needs the data, so :class:`RayStart` begins it as soon as the
scenario is loaded: ``ray.init`` (or attaching to a cluster), then the actors are requested, and
their processes import torch (seconds each) while the driver generates the data. The executor then
puts the data into the object store once, sends each actor its references (``setup``) and a
warm-up job (torch's lazy start-up), and returns without waiting: an actor runs its calls in the
order they were sent, so the first jobs simply queue behind the warm-up. Nothing here changes what
a job computes. Attaching to a running cluster (``address``) skips ``ray.init``'s daemons; an
address where nothing listens fails within seconds instead of Ray's minutes of retries, and so
does a cluster that refuses this process's authentication token (:mod:`hierfl.runtime.ray_auth`).

Losses. :class:`RayCluster` is the executor's link to the cluster (``executor.cluster``): which
errors mean a lost actor or node, a probe of the raylet and the GCS, and who owns Ray.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from hierfl.config.errors import ConfigError, Problem
from hierfl.config.plugins import bundle as plugin_bundle
from hierfl.runtime import ray_auth, signals
from hierfl.runtime.driver_cloud import DriverCloud
from hierfl.runtime.executor import ClusterLink, RunData
from hierfl.runtime.gpu_placement import cluster_gpus, placement_problem
from hierfl.runtime.ray_actors import CloudActor as CloudActor
from hierfl.runtime.ray_actors import HostActor as HostActor
from hierfl.runtime.ray_actors import IdleHosts as IdleHosts
from hierfl.runtime.ray_actors import IdleLeader as IdleLeader
from hierfl.runtime.ray_actors import LeaderActor as LeaderActor
from hierfl.runtime.ray_actors import RayCloud as RayCloud
from hierfl.runtime.ray_actors import RayDeviceHost as RayDeviceHost
from hierfl.runtime.ray_actors import RayLeaderHost as RayLeaderHost
from hierfl.runtime.ray_head import lean_init
from hierfl.runtime.start import ExecutorStart

if TYPE_CHECKING:
    from hierfl.runtime.ray_executor import RayExecutor

__all__ = ["RayStart", "RayCluster", "IdleHosts", "IdleLeader", "RayDeviceHost", "RayLeaderHost", "RayCloud", "HostActor", "CloudActor", "LeaderActor",
           "probe_address", "is_lost", "listen_to_ray"]

_PROBE_TIMEOUT_S = 5.0
_INIT_ATTEMPTS = 2          # ray.init tries on a busy machine
_INIT_RETRY_PAUSE_S = 2.0


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


def listen_to_ray() -> None:
    """Relay Ray's messages again (a new executor), less the raylet's death notice: Ray's relay of
    cluster errors to the driver (``print_to_stdstream``, Ray's private module) prints the dead
    raylet's last log lines (about 8 KB), and hierfl's cluster watch reports the loss in one line
    (:mod:`hierfl.runtime.cluster_watch`). Everything after :meth:`RayCluster.silence` is dropped.
    The filter is installed once per process; best effort."""
    _RAY_MESSAGES["muted"] = False
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
        self._workers_auto = workers == "auto"  # (named in a placement message: auto is one host per CPU)
        self.hosts: list[Any] = []
        self.cloud: Any = None
        self.leader: Any = None  # the leaders' host actor, once a run with edge servers asked for it (leader_host)
        self._pool_key: tuple[Any, ...] | None = None  # set when this run's hosts may be kept (IdleHosts)
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
            if not (address or os.environ.get("RAY_ADDRESS")):  # a local instance: Ray's token warning in our words
                ray_auth.local_token_notice()
            _init_with_retry(address)
            self.owns_ray = True
            signals.reassert()  # ray.init installs its own SIGTERM handler: SIGTERM must stay Ctrl-C
        self.marks["ray_ready"] = time.time()
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.workers = max(1, int(total_cpus)) if workers == "auto" else int(workers)
        host_cpus = min(1.0, total_cpus / self.workers)
        self.gpus_fit()  # before any actor is asked for: one that cannot be placed would wait forever
        # on a run's own (one-machine) instance only the first host imports torch at once (it makes
        # the initial model: model_call); the others import it with their set-up, after the data's
        # put, the run's memory peak, which they would raise by about 0.14 GB each (scale, goal
        # (c)). On a cluster a host's import may overlap the driver's build as before.
        gpus = {"num_gpus": self.gpus_per_host} if self.gpus_per_host > 0 else {}
        plugins = plugin_bundle()  # every actor loads the driver's plug-ins before it unpickles the run's values
        # hosts kept from this process's last run on this instance (IdleHosts)
        keeps = not self.owns_ray and IdleHosts.applies()
        self._pool_key = IdleHosts.key(host_cpus, self.gpus_per_host) if keeps else None
        if self._pool_key is None and not self.owns_ray:
            IdleHosts.free_cpus()  # hosts kept by an earlier run would hold the CPUs this run's new hosts need
        # kept hosts first (a host forgets its last run, plug-ins included: which one serves which index changes no
        # bit), new ones after; a run with plug-ins has the kept ones load them (new ones load them as they start)
        self.hosts = [] if self._pool_key is None else (
            IdleHosts.lend(self._pool_key, self.workers, plugins) if plugins
            else IdleHosts.take(self._pool_key, self.workers))
        self.hosts += [RayDeviceHost.options(num_cpus=host_cpus, scheduling_strategy="SPREAD", **gpus).remote(
            h == 0 or not self.owns_ray, plugins) for h in range(len(self.hosts), self.workers)]
        self.cloud = (DriverCloud(CloudActor()) if self.cloud_in == "driver"
                      else RayCloud.options(num_cpus=0).remote(plugins))

    def leader_host(self) -> Any:
        """The leaders' host actor of this run (edge servers): the one this process's last run kept
        (:class:`IdleLeader`, where its hosts may be kept too), else a new one; :meth:`close` keeps or ends it."""
        if self.leader is None:
            plugins = plugin_bundle()
            kept = None if self._pool_key is None else IdleLeader.lend(IdleLeader.key(self._pool_key), plugins)
            # plug-ins first (constructor), then the role (setup: its arguments may hold a plug-in's values)
            self.leader = kept if kept is not None else RayLeaderHost.options(num_cpus=0).remote(plugins)
        return self.leader

    def gpus_fit(self) -> None:
        """Raise :class:`~hierfl.config.errors.ConfigError` (``runtime.gpus_per_host``) if the cluster's
        nodes cannot take ``workers`` hosts of ``gpus_per_host`` GPUs each (Ray would leave the others
        waiting forever, without a word): the check of :func:`hierfl.core.gpu_shares.placement_problem`
        on the GPUs of the cluster's nodes as they are now (an autoscaling cluster's GPU nodes must be up)."""
        if self.gpus_per_host <= 0:
            return
        problem = placement_problem(self.workers, self.gpus_per_host, cluster_gpus())
        if problem is not None:
            if self._workers_auto:
                problem += " (workers: auto is one host per CPU)"
            raise ConfigError([Problem("runtime.gpus_per_host", problem, self.gpus_per_host)], "runtime")

    def refused(self) -> ConfigError | None:
        """The configuration error that stopped the start (a placement that cannot be satisfied), else None."""
        return self._error if isinstance(self._error, ConfigError) else None

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
        from hierfl.runtime.ray_executor import RayExecutor

        return RayExecutor(data, start=self)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this start began it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.owns_ray:
            ray.shutdown()  # ends every process of this instance, the actors included
            return
        if self._pool_key is not None and self.hosts:  # (a host that died or hangs is killed, not kept)
            IdleHosts.keep(self._pool_key, self.hosts)
            self.hosts = []
        if self._pool_key is not None and self.leader is not None:  # (the same for the leaders' host)
            IdleLeader.keep(IdleLeader.key(self._pool_key), self.leader)
            self.leader = None
        for actor in [*self.hosts, self.leader, self.cloud]:
            try:
                if actor is not None and not isinstance(actor, DriverCloud):
                    ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass


def is_lost(exc: BaseException | None) -> bool:
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


class RayCluster(ClusterLink):
    """The Ray executor's link to its cluster (``executor.cluster``), through its start (:class:`RayStart`)."""

    def __init__(self, start: RayStart) -> None:
        self._start = start

    def is_lost(self, exc: BaseException) -> bool:
        """:func:`is_lost`."""
        return is_lost(exc)

    def probe(self) -> Callable[[], str | None] | None:
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

    def silence(self) -> None:
        """Ray's relays of worker logs and cluster errors print nothing more (after the cluster was lost,
        they would print kilobytes of the dead raylet's log). Ray's private module: best effort."""
        try:
            worker = ray._private.worker
            worker.global_worker_stdstream_dispatcher.remove_handler("ray_print_logs")
        except Exception:  # noqa: BLE001 - another Ray version: its messages stay
            pass
        _RAY_MESSAGES["muted"] = True

    def hand_over(self) -> bool:
        """Stop owning Ray (this executor's close leaves it up); whether it owned it."""
        return self._start.hand_over()

    def take_over(self, owned: bool) -> None:
        """Own Ray (this executor's close shuts it down) if ``owned``."""
        self._start.take_over(owned)
