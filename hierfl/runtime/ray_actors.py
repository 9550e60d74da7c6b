"""The Ray executor's actors: the role classes its actors run, and the host actors kept between runs.

This is the one place ``ray.remote`` is applied (:data:`RayDeviceHost` from :class:`HostActor`,
:data:`RayLeaderHost` from :class:`LeaderActor` (a :class:`~hierfl.runtime.roles.LeaderHost`),
:data:`RayCloud` from :class:`CloudActor`). Each actor's process starts before the run's data exists
(:class:`~hierfl.runtime.ray_cluster.RayStart`): its constructor only loads the driver's plug-ins
(and, for a host, imports torch), and ``setup`` builds the role once the data is in the object store.
:class:`IdleHosts` keeps a finished run's host actors for this process's next run of the same shape, and
:class:`IdleLeader` its leaders' host for the next run with edge servers.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.runtime.gpu_placement import hide_unreserved_gpus
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost, ModelSpec

__all__ = ["HostActor", "CloudActor", "LeaderActor", "IdleHosts", "IdleLeader", "RayDeviceHost", "RayLeaderHost", "RayCloud"]


_PLUGIN_SCOPES: list[Any] = []
"""The open :func:`hierfl.config.plugins.isolated` scopes of this actor's process (one actor a process): the
plug-ins a run loaded here, forgotten when the actor forgets the run (:func:`_forget_plugins`)."""


def _install_plugins(plugins: Any) -> None:
    """Load the driver's plug-ins in this actor's process (:func:`hierfl.config.plugins.install_bundle`),
    before any later call's arguments, which may hold a plug-in's classes, are unpickled here. They are loaded
    inside an isolated scope, so that the actor can forget them with the run and be kept for the next one."""
    if plugins:
        from hierfl.config.plugins import install_bundle, isolated

        # the scope restores the registries as they were: with every built-in registered first (the scenario
        # schema imports them all), so that forgetting the plug-ins leaves a whole, valid configuration
        importlib.import_module("hierfl.scenario.schema")
        scope = isolated()
        scope.__enter__()
        _PLUGIN_SCOPES.append(scope)
        install_bundle(plugins)


def _forget_plugins() -> None:
    """Forget every plug-in :func:`_install_plugins` loaded (registrations, modules, the loader's record): the
    process is then as a new actor's, and a kept actor serves a run with other plug-ins, or none, alike."""
    while _PLUGIN_SCOPES:
        _PLUGIN_SCOPES.pop().__exit__(None, None, None)


class HostActor(DeviceHost):
    """A :class:`DeviceHost` whose process starts before the data exists: ``setup`` builds the role."""

    def __init__(self, import_torch: bool = True, plugins: Any = ()) -> None:  # the role's own __init__ runs in setup
        # first: a host that reserved no GPU (runtime.gpus_per_host: 0) must see none, before torch
        # initialises CUDA, or runtime.device: auto would put a CUDA context and a data copy in every host
        hide_unreserved_gpus()
        _install_plugins(plugins)  # plain data: nothing of a plug-in is unpickled before this
        if import_torch:  # the slow part of an actor's start: done while the driver builds
            importlib.import_module("torch")
        # else: torch comes with setup, after the data is in the object store; at that moment the
        # driver holds its freshly generated arrays and their store copy at once (RayStart._start)

    def setup(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray], model: ModelSpec,
              eval_sets: Any = None, x_test: np.ndarray | None = None, y_test: np.ndarray | None = None) -> float:
        """Become the device host of this run's data (and of the test set, for :meth:`evaluate`);
        returns the actor's ``time.time()``."""
        self.__dict__.clear()  # a host kept from an earlier run (IdleHosts) keeps nothing of it
        DeviceHost.__init__(self, x_train, y_train, parts, model, eval_sets)
        self.x_test, self.y_test = x_test, y_test
        return time.time()

    def warm(self, spec: TrainSpec, params: np.ndarray) -> float:
        """:meth:`DeviceHost.warmup` and one evaluation's lazy start-up; returns the actor's ``time.time()``."""
        self.warmup(spec, params)
        if self.x_test is not None and len(self.x_test):
            self.evaluate(np.asarray(params), rows=2)
        return time.time()

    def evaluate(self, params: np.ndarray, rows: int | None = None, model: int = 0,
                 row: int | None = None, test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """(accuracy, loss) of the global model ``params`` on the test set: :meth:`Cloud.evaluate`'s
        computation (the same trainer code and torch thread count, so the same bits), run here so that
        the cloud actor never imports torch. ``rows``: only the first ones (the warm-up); ``model``: the
        architecture of ``params`` (``models:``); ``row``: ``params`` is a batch of job results, evaluate that row;
        ``test_rows``: only the test set's ``[start, stop)`` rows (one domain's)."""
        x, y = (self.x_test, self.y_test) if rows is None else (self.x_test[:rows], self.y_test[:rows])
        if test_rows is not None:
            x, y = x[test_rows[0]:test_rows[1]], y[test_rows[0]:test_rows[1]]
        trainer = self.trainers[model]
        vector = np.asarray(params) if row is None else np.asarray(params)[row]
        return trainer.evaluate(vector[: trainer.num_params], x, y)

    def model_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in this process, which has torch: the build's model work (initial parameters,
        layout, FLOPs), so that the driver need not import torch. Runs before :meth:`setup`."""
        return fn(*args)

    def release(self) -> bool:
        """Forget the run (its data, models, per-device state, plug-ins) and wait idle for the next run's
        :meth:`setup` (:class:`IdleHosts`); True."""
        self.__dict__.clear()
        _forget_plugins()
        return True

    def install(self, plugins: Any) -> bool:
        """Load a run's plug-ins in this kept host (:meth:`IdleHosts.lend`), as a new host's constructor would; True.
        Sent before any call whose arguments may hold a plug-in's values (actor calls run in order)."""
        _install_plugins(plugins)
        return True


class CloudActor(Cloud):
    """A :class:`Cloud` whose process starts before the data exists: ``setup`` builds the role."""

    def __init__(self, plugins: Any = ()) -> None:  # the role's own __init__ runs in setup, with the data
        hide_unreserved_gpus()  # it reserves none: its torch work (a validation loss) runs on the CPU
        _install_plugins(plugins)
        # no torch here: the cloud aggregates with numpy, and the Ray executor evaluates on a host;
        # torch is imported on first use only if a robust rule needs a validation loss (Zeno)
        pass

    def setup(self, init_params: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, model: ModelSpec,
              robust: Any = None, public: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        """Become the cloud of this run; returns the actor's ``time.time()``."""
        Cloud.__init__(self, init_params, x_test, y_test, model, robust, public)
        return time.time()

    def warm(self) -> float:
        """:meth:`Cloud.warmup` when this cloud will evaluate (a robust rule's validation loss), else
        nothing (it would import torch); returns the actor's ``time.time()``."""
        if self.robust is not None and self.robust.validation > 0:
            self.warmup()
        return time.time()


class LeaderActor(LeaderHost):
    """A :class:`LeaderHost` that loads the run's plug-ins first: ``setup`` builds the role (its
    arguments may hold a plug-in's aggregation rule, unpicklable before the plug-in is loaded)."""

    def __init__(self, plugins: Any = ()) -> None:
        hide_unreserved_gpus()  # it reserves no GPU
        _install_plugins(plugins)

    def setup(self, *args: Any) -> None:
        """Become the leaders' host (:class:`LeaderHost`'s arguments)."""
        self.__dict__.clear()  # a leaders' host kept from an earlier run (IdleLeader) keeps nothing of it
        LeaderHost.__init__(self, *args)

    def release(self) -> bool:
        """Forget the run (the leaders' models, sums and optimiser state, plug-ins) and wait idle for the next
        run's :meth:`setup` (:class:`IdleLeader`); True."""
        self.__dict__.clear()
        _forget_plugins()
        return True

    def install(self, plugins: Any) -> bool:
        """Load a run's plug-ins in this kept leaders' host, as a new one's constructor would; True."""
        _install_plugins(plugins)
        return True


KEEP_S = float(os.environ.get("HIERFL_KEEP_HOSTS_S", "15"))
"""How long a finished run's host actors are kept for the next run of the process (:class:`IdleHosts`), seconds."""


class _KeptSlot:
    """One slot of this process for actors kept between runs, with its timer: each subclass has its own
    ``_kept``, ``_timer`` and ``_lock``."""

    _kept: tuple[tuple[Any, ...], Any] | None = None
    _timer: threading.Timer | None = None
    _lock = threading.Lock()

    @classmethod
    def _pop(cls) -> tuple[tuple[Any, ...], Any] | None:
        """Empty the slot (its timer cancelled) and return what it held."""
        with cls._lock:
            kept, cls._kept = cls._kept, None
            if cls._timer is not None:
                cls._timer.cancel()
                cls._timer = None
        return kept


class IdleHosts(_KeptSlot):
    """Host actors a finished run left running, for the next run of this process on the same Ray instance.

    A host's process start (a Python process importing hierfl and torch) is most of a short Ray run's wall
    time, so a process that makes many runs on one instance it attached to (a notebook, a test session, a
    script looping over seeds) keeps the last run's hosts instead of killing them. A host forgets the run
    when it is kept (:meth:`HostActor.release`) and builds itself anew in the next :meth:`HostActor.setup`,
    so a run on kept hosts computes exactly what it would on new ones.

    Kept hosts hold the CPUs they reserved, which other work would wait for, so they are kept briefly and
    only for the like: for :data:`KEEP_S` seconds (``HIERFL_KEEP_HOSTS_S``; 0: never), after which they are
    killed (another process attached to the same instance waits at most that long for their CPUs); only
    the last run's. A run whose hosts reserve the same resources takes as many kept hosts as it needs (a run of
    fewer hosts leaves the others parked, kept with its own at its end, so that a later run of more need not
    start them again: the run needed no more CPUs than the kept hosts already held; one of more starts the
    rest); a run of other host resources kills them first. A run with plug-ins has the kept hosts load them
    (:meth:`lend`); a host loads a run's plug-ins in an isolated scope and forgets them with the run (their
    registrations and modules), so it is kept after such a run as after any other. A Ray worker (a Tune trial)
    keeps none, and
    :func:`hierfl.sweep` clears them before its trials start. A Ray instance this process started itself
    ends with its run, hosts and all.
    """

    _kept: tuple[tuple[Any, ...], list[Any]] | None = None
    _timer: threading.Timer | None = None
    _lock = threading.Lock()

    @classmethod
    def key(cls, host_cpus: float, gpus: float) -> tuple[Any, ...]:
        """What must match for kept hosts to serve a run: the instance and the resources of each host (any
        number of them: :meth:`take` hands out as many as a run needs)."""
        ctx = ray.get_runtime_context()
        return (getattr(ctx, "gcs_address", None), ctx.get_job_id(), float(host_cpus), float(gpus))

    @staticmethod
    def applies() -> bool:
        """Whether this process keeps hosts: a driver script or notebook (not a Ray worker: a Tune trial runs in
        an actor, next to other trials whose CPUs kept hosts would hold), unless keeping is off."""
        return KEEP_S > 0 and ray.get_runtime_context().get_actor_id() is None

    @classmethod
    def clear(cls) -> None:
        """Kill the kept hosts (their CPUs are free again), and the kept leaders' host (:class:`IdleLeader`):
        before other Ray work of this process, e.g. a sweep."""
        cls.free_cpus()
        IdleLeader.clear()

    @classmethod
    def free_cpus(cls) -> None:
        """Kill the kept hosts only (the CPUs a run's new hosts need); a kept leaders' host, which holds none, stays."""
        kept = cls._pop()
        if kept is not None:
            cls._kill(kept[1])

    @classmethod
    def take(cls, key: tuple[Any, ...], count: int | None = None) -> list[Any]:
        """Up to ``count`` (default: all) of the kept hosts if they match ``key`` and still answer, else none.

        Kept hosts of other resources are killed: their CPUs are free for the hosts the run starts itself (a run
        of more hosts starts the rest; the caller numbers them after these). Matching hosts beyond ``count`` stay
        kept (parked, on their timer) and :meth:`keep` puts them after the run's own at its end."""
        kept = cls._pop()
        if kept is None:
            return []
        hosts = kept[1]
        if kept[0] == key:
            mine, rest = (hosts, []) if count is None else (hosts[:count], hosts[count:])
            try:
                ray.get([h.release.remote() for h in mine], timeout=10.0)
            except Exception:  # noqa: BLE001 - a kept host that died (or hangs) is replaced, with the others
                cls._kill(hosts)
                return []
            if rest:
                cls._park(key, rest)
            return mine
        cls._kill(hosts)
        return []

    @classmethod
    def lend(cls, key: tuple[Any, ...], count: int, plugins: Any) -> list[Any]:
        """Up to ``count`` kept hosts for a run with plug-ins, which loads them there (:meth:`HostActor.install`,
        forgotten again when the host is released). The rest stay parked (:meth:`take`)."""
        hosts = cls.take(key, count)
        try:
            ray.get([h.install.remote(plugins) for h in hosts], timeout=60.0)
        except Exception:  # noqa: BLE001 - a host that cannot load them is replaced by a new one, as are the others
            cls._kill(hosts)
            return []
        return hosts

    @classmethod
    def _park(cls, key: tuple[Any, ...], hosts: list[Any]) -> None:
        """Keep ``hosts`` (already released) for :data:`KEEP_S` seconds, replacing nothing (none are kept now)."""
        timer = threading.Timer(KEEP_S, cls._expire, args=(hosts,))
        timer.daemon = True
        with cls._lock:
            cls._kept, cls._timer = (key, list(hosts)), timer
        timer.start()

    @classmethod
    def keep(cls, key: tuple[Any, ...], hosts: list[Any]) -> None:
        """Keep ``hosts`` (released) for the next run, for :data:`KEEP_S` seconds, followed by the hosts of the same
        resources parked during the run (:meth:`take`); any others kept before are killed."""
        parked = cls._pop()
        extra: list[Any] = []
        if parked is not None:
            if parked[0] == key:
                extra = [h for h in parked[1] if h not in hosts]  # handles compare by actor id
            else:
                cls._kill(parked[1])
        try:
            ray.get([h.release.remote() for h in hosts], timeout=10.0)
        except Exception:  # noqa: BLE001 - a host that cannot forget its run is not kept
            cls._kill(hosts + extra)
            return
        cls._park(key, list(hosts) + extra)

    @classmethod
    def _expire(cls, hosts: list[Any]) -> None:
        """The kept hosts were not taken in time: free their CPUs."""
        with cls._lock:
            if cls._kept is None or cls._kept[1] != hosts:
                return  # taken or replaced meanwhile
            cls._kept, cls._timer = None, None
        cls._kill(hosts)

    @staticmethod
    def _kill(hosts: list[Any]) -> None:
        for actor in hosts:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort (also after the instance is gone)
                pass


class IdleLeader(_KeptSlot):
    """The leaders' host actor (:class:`LeaderActor`) a finished run left running, for this process's next run
    with edge servers on the same Ray instance: the counterpart of :class:`IdleHosts` for the one actor a
    hierarchical run adds. Starting it is a Python process importing hierfl, numpy and Ray (about one CPU
    second, on a small machine most of a short hierarchical run's extra wall time over the local executor).

    The same rules as for hosts: only a process that keeps hosts (:meth:`IdleHosts.applies`), for
    :data:`KEEP_S` seconds (a run with plug-ins has a kept one load them, :meth:`LeaderActor.install`); the actor
    forgets its run, plug-ins included, when kept (:meth:`LeaderActor.release`) and builds itself anew in :meth:`LeaderActor.setup`, so a run on a
    kept leaders' host computes exactly what it would on a new one. It reserves no CPU, so a kept one delays
    no other work; :meth:`IdleHosts.clear` ends it too. A leaders' host that died or hangs is killed, not kept.
    """

    _kept: tuple[tuple[Any, ...], Any] | None = None
    _timer: threading.Timer | None = None
    _lock = threading.Lock()

    @staticmethod
    def key(host_key: tuple[Any, ...]) -> tuple[Any, ...]:
        """What must match for a kept leaders' host to serve a run: the instance (a host key's first two
        fields; the leaders' host reserves no resources)."""
        return tuple(host_key[:2])

    @classmethod
    def take(cls, key: tuple[Any, ...]) -> Any | None:
        """The kept leaders' host if it matches ``key`` and still answers (released), else None (any kept one
        is killed)."""
        kept = cls._pop()
        if kept is None:
            return None
        if kept[0] == key:
            try:
                ray.get(kept[1].release.remote(), timeout=10.0)
                return kept[1]
            except Exception:  # noqa: BLE001 - one that died (or hangs) is replaced
                pass
        IdleHosts._kill([kept[1]])
        return None

    @classmethod
    def lend(cls, key: tuple[Any, ...], plugins: Any) -> Any | None:
        """:meth:`take`, with the run's plug-ins loaded in the kept leaders' host (:meth:`LeaderActor.install`), as a
        new one's constructor would load them; None where none is kept or it cannot load them (it is killed)."""
        kept = cls.take(key)
        if kept is None or not plugins:
            return kept
        try:
            ray.get(kept.install.remote(plugins), timeout=60.0)
        except Exception:  # noqa: BLE001 - one that cannot load them is replaced by a new one
            IdleHosts._kill([kept])
            return None
        return kept

    @classmethod
    def keep(cls, key: tuple[Any, ...], actor: Any) -> None:
        """Keep ``actor`` (released) for the next run, for :data:`KEEP_S` seconds; one kept before is killed."""
        older = cls._pop()
        if older is not None and older[1] != actor:
            IdleHosts._kill([older[1]])
        try:
            ray.get(actor.release.remote(), timeout=10.0)
        except Exception:  # noqa: BLE001 - one that cannot forget its run is not kept
            IdleHosts._kill([actor])
            return
        timer = threading.Timer(KEEP_S, cls._expire, args=(actor,))
        timer.daemon = True
        with cls._lock:
            cls._kept, cls._timer = (key, actor), timer
        timer.start()

    @classmethod
    def clear(cls) -> None:
        """Kill the kept leaders' host, if any."""
        kept = cls._pop()
        if kept is not None:
            IdleHosts._kill([kept[1]])

    @classmethod
    def _expire(cls, actor: Any) -> None:
        """Not taken in time: end its process."""
        with cls._lock:
            if cls._kept is None or cls._kept[1] != actor:
                return  # taken or replaced meanwhile
            cls._kept, cls._timer = None, None
        IdleHosts._kill([actor])


# Actor classes (typed Any: Ray's remote wrappers are dynamic).
RayDeviceHost: Any = ray.remote(HostActor)
RayLeaderHost: Any = ray.remote(LeaderActor)
RayCloud: Any = ray.remote(CloudActor)
