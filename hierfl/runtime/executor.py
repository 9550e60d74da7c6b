"""The executor interface and the in-process (sequential) executor.

A *handle* is whatever the executor uses to refer to a parameter vector: a numpy array here,
a Ray ``ObjectRef`` in the Ray executor. Protocols pass handles around and never look inside,
so updates flow host → leader → cloud without passing through the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.core.jobs import Job, Term
from hierfl.executors import EXECUTORS
from hierfl.learn.batched import JobGroups
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost, ModelSpec, fast_path_of

__all__ = ["Job", "Executor", "LocalExecutor", "RunData", "make_executor", "Term"]


@dataclass(frozen=True)
class RunData:
    """What the executor needs to start its roles."""

    x_train: np.ndarray
    y_train: np.ndarray
    parts: list[np.ndarray]
    x_test: np.ndarray
    y_test: np.ndarray
    init_params: np.ndarray
    model: ModelSpec
    num_edges: int
    spec: TrainSpec
    robust: Any = None  # hierfl.learn.robust.RobustSetup: robust rules / attacks on (None: plain averaging)
    # per-device evaluation sets (device, training rows, held-out rows or None): see Built.eval_sets
    eval_sets: tuple[tuple[int, np.ndarray, np.ndarray | None], ...] = ()
    gpus_per_host: float = 0.0  # runtime.gpus_per_host: GPUs reserved by each Ray device host actor


class Executor:
    """Runs role work; results are identical whichever executor is used."""

    name = "abstract"
    workers = 1

    def initial_model(self) -> Any:
        """Handle of the initial global model."""
        raise NotImplementedError

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Submit a job; returns (params handle, stats handle, host index) without waiting.

        ``control``: handle of SCAFFOLD's server control ``c`` (jobs with ``spec.control_variates``);
        such a job's result is the packed ``[y; Δc]``.
        """
        raise NotImplementedError

    def wait(self, job: Job) -> dict[str, float]:
        """Block until ``job`` has finished; return its stats."""
        raise NotImplementedError

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of ``Σ w_k m_k / Σ w_k`` over model handles, computed by a role (does not wait)."""
        raise NotImplementedError

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """Fold an arriving update into ``edge``'s running aggregation (does not wait).

        With ``control_coef`` the update is a packed SCAFFOLD ``[y; Δc]``; ``κ·Δc`` is summed apart.
        ``tag``: a Byzantine update's tag (robust aggregation only; see :class:`~hierfl.runtime.roles.Aggregation`).
        """
        raise NotImplementedError

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """Finish ``edge``'s aggregation; returns the new leader-model handle.

        ``opt`` (with ``base``, the model the edge round started from) steps instead of averaging;
        ``pack_control`` returns ``[model; Σ κ Δc]`` for the upload to the cloud.
        """
        raise NotImplementedError

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """Fold an arriving model into the cloud's running aggregation (does not wait)."""
        raise NotImplementedError

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """The robust-aggregation reports of ``tier``'s commits since the last call (blocking)."""
        raise NotImplementedError

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """Zeno++ at the cloud: whether the step ``candidate − base`` is applied (blocking)."""
        raise NotImplementedError

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """The ``tier`` rule's aggregate of ``models``, computed by the cloud role (as :meth:`average`)."""
        raise NotImplementedError

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """``base`` stepped by the ``tier`` rule's aggregate of the deltas ``terms`` (a new handle)."""
        raise NotImplementedError

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Finish the cloud aggregation; returns the new global-model handle (``opt``: see :meth:`commit_edge`)."""
        raise NotImplementedError

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """``opt`` steps ``base`` with ``Δ = Σ c·(a − b)``, at ``tier`` (leader ``entity`` or the cloud): a new handle."""
        raise NotImplementedError

    def control(self) -> Any:
        """Handle of the cloud's SCAFFOLD control ``c`` as of the last commit."""
        raise NotImplementedError

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` computed at ``tier`` (``edge``: the leader host, ``cloud``): a new model handle."""
        raise NotImplementedError

    def evaluate(self, params: Any) -> tuple[float, float]:
        """(accuracy, loss) of a model handle on the test set (blocking)."""
        raise NotImplementedError

    def fetch(self, params: Any) -> np.ndarray:
        """The parameter vector behind a handle."""
        raise NotImplementedError

    # -- device-held state (personalised trainers) -----------------------------------------------
    # The one place a device's state lives: the executor keeps, per device, the handle of the state
    # its last personalised job returned; the next job of the device takes it, on whichever host it
    # runs. A device without state starts from the initial global vector's local layers.
    def device_state(self, device: int) -> np.ndarray | None:
        """The device's state as it is after its last submitted job (None: it has none yet)."""
        raise NotImplementedError

    def set_device_state(self, device: int, state: np.ndarray) -> None:
        """Put a device's state back (e.g. after a host was lost and restarted)."""
        raise NotImplementedError

    def set_personal_base(self, params: Any) -> None:
        """From now on, a device without state takes its local layers from ``params`` (LG-FedAvg's warm-up
        model) instead of the initial model."""
        raise NotImplementedError

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """Per-device evaluation of ``params`` (blocking): ``(K, 3)`` rows (correct, tested, loss sum)
        for the run's evaluation sets, in their order; each device personalised per ``spec.personal``.
        ``per_device``: a device's own model handle (WSCC: its cluster's) instead of ``params``."""
        raise NotImplementedError

    def similarity(self, models: list[Any], base: Any = None) -> np.ndarray:
        """Cosine similarity matrix of ``models − base`` (or of the models), computed by the cloud role (blocking)."""
        raise NotImplementedError

    def _eval_groups(self, num_evals: int, eval_devices: list[int], params: Any,
                     per_device: dict[int, Any] | None) -> list[tuple[Any, list[int]]]:
        """Evaluation slots grouped by the model they are tested with, in order of first slot."""
        groups: list[tuple[Any, list[int]]] = []
        for k in range(num_evals):
            model = params if per_device is None else per_device.get(eval_devices[k], params)
            for handle, slots in groups:
                if handle is model:
                    slots.append(k)
                    break
            else:
                groups.append((model, [k]))
        return groups

    def close(self) -> None:
        """Release resources."""

    # -- checkpoints and recovery (hierfl.driver.checkpoint) ------------------------------------
    def driver_state(self) -> Any:
        """The executor's own driver-side state that results depend on (the open fast-path group),
        pickled with the driver's state so its jobs keep their identity."""
        return None

    def set_driver_state(self, state: Any) -> None:
        """Take over :meth:`driver_state` after the driver's state was unpickled."""

    def export_roles(self) -> dict[str, Any]:
        """The roles' state after every call made so far (blocks): device-held state, leaders, cloud.

        Raises if an earlier call failed, so a checkpoint is only ever taken of a sound state.
        """
        raise NotImplementedError

    def import_roles(self, state: dict[str, Any]) -> None:
        """Give fresh roles the state of :meth:`export_roles` (before any other call)."""
        raise NotImplementedError

    def is_handle(self, obj: Any) -> bool:
        """Whether ``obj`` is a handle that cannot be pickled as it is (a checkpoint stores its value)."""
        return False

    def export_handle(self, handle: Any) -> Any:
        """The picklable value behind a handle of :meth:`is_handle` (blocks until it is computed)."""
        raise NotImplementedError

    def import_handle(self, value: Any) -> Any:
        """A handle, of this executor, of a value :meth:`export_handle` gave."""
        raise NotImplementedError

    def is_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` (or its cause) means a role's process or node was lost, not a bug or bad input:
        the run can then go on from its last checkpoint on fresh roles, with identical results."""
        return False

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part: the executor's name and how many workers it ran."""
        return {"executor": self.name, "workers": self.workers}

    def cluster_probe(self) -> Callable[[], str | None] | None:
        """A cheap check, safe to call from another thread, of the cluster the roles run on: it
        returns None while the cluster answers, else one line saying what stopped answering. None
        (no probe): the roles run in this process, nothing can be lost under them."""
        return None

    def cluster_lost(self) -> str | None:
        """What of the cluster stopped answering (one line), or None: it answers, or there is none."""
        probe = self.cluster_probe()
        return None if probe is None else probe()

    def silence(self) -> None:
        """Stop relaying the cluster's own messages to this process's output (its loss was reported)."""

    def hand_over_cluster(self) -> bool:
        """Stop owning the cluster this executor's start began (closing leaves it up): a run rolled
        back to a checkpoint keeps it for the next executor (:meth:`take_over_cluster`). Whether it
        owned one."""
        return False

    def take_over_cluster(self, owned: bool) -> None:
        """Own the cluster (close shuts it down) if ``owned``: what :meth:`hand_over_cluster` gave up."""


@dataclass(eq=False)
class _Pending:
    """A fast-path job of the local executor until its group has been trained (handle and stats)."""

    device: int
    seed: int
    spec: TrainSpec
    params: Any
    value: np.ndarray | None = None
    stats: dict[str, float] | None = None


class LocalExecutor(Executor):
    """Everything in this process, in event order: the debugging backend and the unit-test path.

    With the opt-in fast path (:func:`~hierfl.runtime.roles.fast_path_of`) jobs are grouped by
    :class:`~hierfl.learn.batched.JobGroups` exactly as the Ray executor groups them; a group is
    trained when it closes, i.e. when a call needs one of its results (or it is full), so every
    handle a method receives is resolved by then.
    """

    name = "local"

    def __init__(self, data: RunData) -> None:
        self.host = DeviceHost(data.x_train, data.y_train, data.parts, data.model, list(data.eval_sets))
        self._states: dict[int, np.ndarray] = {}
        self._base: Any = None  # where stateless devices take their local layers (None: the initial model)
        self.leaders = LeaderHost(data.robust)
        self.cloud = Cloud(data.init_params, data.x_test, data.y_test, data.model, data.robust)
        self._init = np.asarray(data.init_params, dtype=np.float32)
        self._groups: JobGroups | None = JobGroups() if fast_path_of(data.model) else None
        self.host.warmup(data.spec, self._init)

    # -- fast path: groups --------------------------------------------------------------------
    def _need(self, *handles: Any) -> None:
        """Close and train the open group if one of ``handles`` is one of its jobs."""
        if self._groups is not None and any(isinstance(h, _Pending) and h.value is None for h in handles):
            self._run_group(self._groups.seal())

    def _run_group(self, jobs: list[_Pending]) -> None:
        out, stats = self.host.train_group([j.device for j in jobs], [j.seed for j in jobs], jobs[0].spec,
                                           [self._val(j.params) for j in jobs])
        for k, job in enumerate(jobs):
            job.value, job.stats = out[k], stats[k]

    @staticmethod
    def _val(handle: Any) -> Any:
        """The array behind a handle (a trained fast-path job's row, or the array itself)."""
        if isinstance(handle, _Pending):
            if handle.value is None:
                raise RuntimeError("a job's result was used before its group was trained")
            return handle.value
        return handle

    def _vals(self, handles: list[Any]) -> list[Any]:
        self._need(*handles)
        return [self._val(h) for h in handles]

    # -- executor interface -------------------------------------------------------------------
    def initial_model(self) -> Any:
        """The initial vector itself."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Runs the job immediately (its virtual time is accounted by the emulator); fast path: joins a group."""
        if spec.personal is not None:  # device state in, new device state out (kept here)
            new, stats, self._states[device] = self.host.train_personal(
                device, seed, spec, self._vals([params])[0], self._states.get(device, self._base_model()))
            return new, stats, 0
        if self._groups is not None and not spec.control_variates and control is None:
            job = _Pending(device, seed, spec, params)
            _, closed = self._groups.add(job, spec, params)
            if closed:
                self._run_group(closed)
            return job, job, 0
        params, control = self._vals([params, control])
        new, stats = self.host.train(device, seed, spec, params, control)
        return new, stats, 0

    def wait(self, job: Job) -> dict[str, float]:
        """Already done (fast path: its group is trained now if it was still open)."""
        self._need(job.stats)
        stats = job.stats
        if isinstance(stats, _Pending):
            assert stats.stats is not None
            stats = stats.stats
        return dict(stats)

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """In-process, by the cloud role (as the Ray executor does it)."""
        models = self._vals(models)
        return self.cloud.average(list(weights), list(range(len(models))), [None] * len(models), *models)

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """In-process."""
        self.leaders.add(edge, weight, self._vals([update])[0], control_coef, tag)

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """In-process."""
        return self.leaders.commit(edge, opt, self._vals([base])[0], pack_control)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """In-process."""
        self.cloud.add(weight, self._vals([update])[0], control_coef, tag)

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """In-process."""
        return (self.leaders if tier == "edge" else self.cloud).take_reports()

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """In-process; the base model is ``arrays[0]`` for the role."""
        plus, minus, arrays = self._pack(terms)
        plus = [p + 1 for p in plus]
        minus = [m + 1 if m >= 0 else -1 for m in minus]
        coefs = [c for c, _, _ in terms]
        none: list[int | None] = [None] * len(terms)
        if tier == "edge":
            return self.leaders.robust_combine(entity, opt, coefs, plus, none, minus, none, tags, self._val(base),
                                               *arrays)
        return self.cloud.robust_combine(opt, coefs, plus, none, minus, none, tags, self._val(base), *arrays)

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """In-process, by the cloud role."""
        arrays = self._vals(list(models) + ([] if base is None else [base]))
        n = len(models)
        return self.cloud.robust_average(tier, entity, list(weights), list(range(n)), [None] * n, tags,
                                         -1 if base is None else n, *arrays)

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """In-process."""
        base, candidate = self._vals([base, candidate])
        return self.cloud.screen(base, candidate, tag)

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """In-process."""
        return self.cloud.commit(opt, self._vals([base])[0])

    def _pack(self, terms: list[Term]) -> tuple[list[int], list[int], list[Any]]:
        arrays = self._vals([a for _, p, m in terms for a in (p, m) if a is not None])
        plus, minus, k = [], [], 0
        for _, p, m in terms:
            plus.append(k)
            k += 1
            if m is None:
                minus.append(-1)
            else:
                minus.append(k)
                k += 1
        return plus, minus, arrays

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """In-process, on the same role classes the Ray executor uses."""
        role = self.leaders if tier == "edge" else self.cloud
        plus, minus, arrays = self._pack(terms)
        none: list[int | None] = [None] * len(terms)
        return role.combine([c for c, _, _ in terms], plus, none, minus, none, *arrays)

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """In-process; the base model is ``arrays[0]`` for the role."""
        plus, minus, arrays = self._pack(terms)
        base = self._val(base)
        plus = [p + 1 for p in plus]
        minus = [m + 1 if m >= 0 else -1 for m in minus]
        none: list[int | None] = [None] * len(terms)
        coefs = [c for c, _, _ in terms]
        if tier == "edge":
            return self.leaders.server_step(entity, opt, coefs, plus, none, minus, none, base, *arrays)
        return self.cloud.server_step(opt, coefs, plus, none, minus, none, base, *arrays)

    def control(self) -> Any:
        """The cloud's current control vector (replaced, never changed in place, by a commit)."""
        return self.cloud.get_control()

    def evaluate(self, params: Any) -> tuple[float, float]:
        """In-process evaluation."""
        return self.cloud.evaluate(self._vals([params])[0])

    def fetch(self, params: Any) -> np.ndarray:
        """The handle is the vector."""
        return np.asarray(self._vals([params])[0])

    def _base_model(self) -> np.ndarray:
        return self._init if self._base is None else self._base

    def set_personal_base(self, params: Any) -> None:
        """In-process: the vector itself."""
        self._base = np.asarray(self._vals([params])[0])

    def device_state(self, device: int) -> np.ndarray | None:
        """The state kept for ``device`` (a copy)."""
        state = self._states.get(device)
        return None if state is None else np.array(state)

    def set_device_state(self, device: int, state: np.ndarray) -> None:
        """Replace ``device``'s state."""
        self._states[device] = np.array(state, dtype=np.float32)

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """In-process, on the host role (one call per model the devices are tested with)."""
        sets = self.host.eval_sets
        out = np.zeros((len(sets), 3))
        arrays = [self._base_model()] + list(self._states.values())
        pos = {d: k + 1 for k, d in enumerate(self._states)}
        for model, slots in self._eval_groups(len(sets), [int(d) for d, _, _ in sets], params, per_device):
            index = [pos.get(sets[k][0], 0) for k in slots]
            out[slots] = self.host.evaluate_devices(spec.personal, slots, index, [None] * len(slots),
                                                    self._vals([model])[0], *arrays)
        return out

    def similarity(self, models: list[Any], base: Any = None) -> np.ndarray:
        """In-process, by the cloud role."""
        arrays = self._vals(list(models) + ([] if base is None else [base]))
        k = len(models)
        return self.cloud.similarity(-1 if base is None else k, list(range(k)), [None] * k, *arrays)

    def close(self) -> None:
        """Nothing to release (an open group is dropped)."""
        if self._groups is not None:
            self._groups.seal()

    def driver_state(self) -> Any:
        """The fast-path groups, open one included (its jobs are untrained: they stay so, and are
        trained on resume in the same group, so sealing never happens early), and the device states
        of personalised trainers with their base model."""
        return {"groups": self._groups, "states": self._states, "base": self._base}

    def set_driver_state(self, state: Any) -> None:
        """The groups, with the very job objects the driver's state refers to; the device states."""
        self._groups, self._states, self._base = state["groups"], state["states"], state["base"]

    def export_roles(self) -> dict[str, Any]:
        """The role objects' state (in-process: nothing can have failed unseen)."""
        return {"hosts": self.host.export_state(), "leaders": self.leaders.export_state(),
                "cloud": self.cloud.export_state()}

    def import_roles(self, state: dict[str, Any]) -> None:
        """Into the role objects."""
        self.host.import_state(state["hosts"])
        if state["leaders"] is not None:
            self.leaders.import_state(state["leaders"])
        self.cloud.import_state(state["cloud"])


def make_executor(kind: str, data: RunData, workers: int | str = "auto", address: str | None = None) -> Executor:
    """The executor named by ``runtime.executor``: a plug-in of :data:`hierfl.executors.EXECUTORS`.

    Ray is imported only when the ``ray`` executor is made. An unknown name raises ``ValueError``
    listing the allowed ones.
    """
    try:
        config = EXECUTORS.get(kind)(name=kind)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    return config.create(data, workers=workers, address=address)  # type: ignore[no-any-return]
