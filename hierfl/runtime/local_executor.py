"""The in-process (sequential) executor: every role in the driver's process, in event order.

Its handles are the parameter arrays themselves, or — with the opt-in fast path — a job of a fast-path
group (:class:`_Pending`) until that group has been trained (:class:`_Handles`). The leader and cloud
aggregation (:class:`_LocalServers`) and the checkpoint state (:class:`_LocalState`) call the same
role classes the Ray executor runs as actors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.core.jobs import Job, Term
from hierfl.learn.batched import JobGroups
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.learn.staging import DeviceModel, DeviceStack, host_of
from hierfl.runtime.executor_api import ClusterLink, Executor, ExecutorState, RunData, Servers, eval_groups
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost, fast_path_of, group_max_of

__all__ = ["LocalExecutor"]


@dataclass(eq=False)
class _Pending:
    """A fast-path job of the local executor until its group has been trained (handle and stats)."""

    device: int
    seed: int
    spec: TrainSpec
    params: Any
    value: np.ndarray | None = None
    stats: dict[str, float] | None = None


def _value(handle: Any) -> Any:
    """The array behind a local handle (a trained fast-path job's row, or the array itself); a result kept on
    the training device is copied to the host on first use (:class:`~hierfl.learn.staging.DeviceRow`)."""
    return host_of(_resident(handle))


def _resident(handle: Any) -> Any:
    """What a local handle holds, a result on the training device left there (what an aggregation folds)."""
    if isinstance(handle, _Pending):
        if handle.value is None:
            raise RuntimeError("a job's result was used before its group was trained")
        return handle.value
    return handle


def _start(handle: Any) -> Any:
    """A group job's start model: a model kept on the training device as it is, else the host array."""
    value = _resident(handle)
    return value if isinstance(value, DeviceModel) else host_of(value)


class _Handles:
    """The arrays behind the local executor's handles, and its fast-path groups
    (:class:`~hierfl.learn.batched.JobGroups`, None: off): a group is trained when it closes, i.e.
    when a call needs one of its results (or it is full)."""

    def __init__(self, host: DeviceHost, groups: JobGroups | None) -> None:
        self.host = host
        self.groups = groups

    def need(self, *handles: Any) -> None:
        """Close and train the open group if one of ``handles`` is one of its jobs."""
        if self.groups is not None and any(isinstance(h, _Pending) and h.value is None for h in handles):
            self.run(self.groups.seal())

    def run(self, jobs: list[_Pending]) -> None:
        """Train a closed group on the host, in one call; its results stay on the training device
        (:mod:`hierfl.learn.staging`) until a call other than an aggregation needs one."""
        # (a start model kept on the device, an edge's aggregate, is trained from there: DeviceModel)
        out, stats = self.host.train_group_resident([j.device for j in jobs], [j.seed for j in jobs], jobs[0].spec,
                                                    [_start(j.params) for j in jobs])
        for k, job in enumerate(jobs):
            job.value, job.stats = (out.row(k) if isinstance(out, DeviceStack) else out[k]), stats[k]

    def resident(self, handle: Any) -> Any:
        """What an aggregation folds: a result on the training device as it is, else the array (group trained
        first if need be)."""
        self.need(handle)
        return _resident(handle)

    def values(self, handles: list[Any]) -> list[Any]:
        """The arrays behind ``handles``, their groups trained first if need be."""
        self.need(*handles)
        return [_value(h) for h in handles]

    def pack(self, terms: list[Term]) -> tuple[list[int], list[int], list[Any]]:
        """(positions of the ``a``, of the ``b`` or -1, arrays) of ``Σ c·(a − b)`` for a role's call."""
        arrays = self.values([a for _, p, m in terms for a in (p, m) if a is not None])
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


class _LocalServers(Servers):
    """In-process, on the same role classes the Ray executor uses."""

    def __init__(self, leaders: LeaderHost, cloud: Cloud, handles: _Handles) -> None:
        self.leaders, self.cloud, self._handles = leaders, cloud, handles

    def _one(self, handle: Any) -> Any:
        return self._handles.values([handle])[0]

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """In-process (a result on the training device is folded there)."""
        self.leaders.add(edge, weight, self._handles.resident(update), control_coef, tag)

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """In-process; on the fast path a plain average summed on the training device stays there (the next edge
        round trains from it, the cloud averages it there: hierfl.learn.staging.DeviceModel)."""
        resident = self._handles.groups is not None
        start = self._handles.resident(base) if resident else self._one(base)  # (read on the host only if used)
        return self.leaders.commit(edge, opt, start, pack_control, resident=resident)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """In-process (a result on the training device is folded there)."""
        self.cloud.add(weight, self._handles.resident(update), control_coef, tag)

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """In-process."""
        return self.cloud.commit(opt, self._one(base))

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """In-process."""
        return (self.leaders if tier == "edge" else self.cloud).take_reports()

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """In-process."""
        base, candidate = self._handles.values([base, candidate])
        return self.cloud.screen(base, candidate, tag)

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """In-process, by the cloud role."""
        arrays = self._handles.values(list(models) + ([] if base is None else [base]))
        n = len(models)
        return self.cloud.robust_average(tier, entity, list(weights), list(range(n)), [None] * n, tags,
                                         -1 if base is None else n, *arrays)

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """In-process; the base model is ``arrays[0]`` for the role."""
        coefs, plus, minus, none, arrays = self._step_args(terms)
        if tier == "edge":
            return self.leaders.robust_combine(entity, opt, coefs, plus, none, minus, none, tags, _value(base),
                                               *arrays)
        return self.cloud.robust_combine(opt, coefs, plus, none, minus, none, tags, _value(base), *arrays)

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """In-process, by the cloud role (as the Ray executor does it)."""
        models = self._handles.values(models)
        return self.cloud.average(list(weights), list(range(len(models))), [None] * len(models), *models)

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """In-process, on the same role classes the Ray executor uses."""
        role = self.leaders if tier == "edge" else self.cloud
        plus, minus, arrays = self._handles.pack(terms)
        none: list[int | None] = [None] * len(terms)
        return role.combine([c for c, _, _ in terms], plus, none, minus, none, *arrays)

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """In-process; the base model is ``arrays[0]`` for the role."""
        coefs, plus, minus, none, arrays = self._step_args(terms)
        base = _value(base)
        if tier == "edge":
            return self.leaders.server_step(entity, opt, coefs, plus, none, minus, none, base, *arrays)
        return self.cloud.server_step(opt, coefs, plus, none, minus, none, base, *arrays)

    def _step_args(self, terms: list[Term]) -> tuple[list[float], list[int], list[int], list[int | None], list[Any]]:
        """A step's arguments: the terms' positions shifted by one (the base is ``arrays[0]`` for the role)."""
        plus, minus, arrays = self._handles.pack(terms)
        plus = [p + 1 for p in plus]
        minus = [m + 1 if m >= 0 else -1 for m in minus]
        none: list[int | None] = [None] * len(terms)
        return [c for c, _, _ in terms], plus, minus, none, arrays

    def control(self, edge: int | None = None) -> Any:
        """The cloud's (or ``edge``'s) current control vector (replaced, never changed in place, by a commit)."""
        return self.cloud.get_control() if edge is None else self.leaders.get_control(edge)

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
                 inputs: list[Any]) -> tuple[list[Any], float, dict[str, float], int]:
        """In-process, by the cloud role."""
        arrays = self._handles.values(list(inputs))
        n = len(arrays)
        return self.cloud.run_task(name, params, seed, tier, entity, list(range(n)), [None] * n, *arrays)


class _LocalState(ExecutorState):
    """The local executor's state: its role objects, and what the driver's state refers to."""

    def __init__(self, ex: LocalExecutor) -> None:
        self._ex = ex

    def driver_state(self) -> Any:
        """The fast-path groups, open one included (its jobs are untrained: they stay so, and are
        trained on resume in the same group, so sealing never happens early), and the model devices'
        state starts from if it was replaced (None: the initial model)."""
        return {"groups": self._ex.handles.groups, "base": self._ex.state_base}

    def set_driver_state(self, state: Any) -> None:
        """The groups, with the very job objects the driver's state refers to; the state base, given to the host."""
        self._ex.handles.groups = state["groups"]
        if state.get("base") is not None:
            self._ex.set_state_base(state["base"])

    def export_roles(self) -> dict[str, Any]:
        """The role objects' state (in-process: nothing can have failed unseen)."""
        ex = self._ex
        return {"hosts": ex.host.export_state(), "leaders": ex.leaders.export_state(),
                "cloud": ex.cloud.export_state()}

    def device_state_bytes(self) -> tuple[int, int]:
        """The host's per-device state."""
        return self._ex.host.state_bytes()

    def reset_devices(self, devices: list[int]) -> None:
        """In-process: stateful jobs are never grouped, so every job submitted before has run."""
        self._ex.host.reset_devices(list(devices))

    def import_roles(self, state: dict[str, Any]) -> None:
        """Into the role objects."""
        ex = self._ex
        ex.host.import_state(state["hosts"])
        if state["leaders"] is not None:
            ex.leaders.import_state(state["leaders"])
        ex.cloud.import_state(state["cloud"])


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
        self.leaders = LeaderHost(data.robust)
        self.cloud = Cloud(data.init_params, data.x_test, data.y_test, data.model, data.robust, data.public)
        self._init = np.asarray(data.init_params, dtype=np.float32)
        self.state_base: Any = None  # the model devices' state starts from, once replaced (None: the initial model)
        self.host.set_state_base(self._init)
        self.handles = _Handles(self.host, JobGroups(group_max_of(data.model)) if fast_path_of(data.model) else None)
        self.servers = _LocalServers(self.leaders, self.cloud, self.handles)
        self.state = _LocalState(self)
        self.cluster = ClusterLink()
        self.host.warmup(data.spec, self._init)

    def initial_model(self) -> Any:
        """The initial vector itself."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Runs the job immediately (its virtual time is accounted by the emulator); fast path: joins a group."""
        handles = self.handles
        if handles.groups is not None and not spec.keeps_device_state and control is None:
            job = _Pending(device, seed, spec, params)
            _, closed = handles.groups.add(job, spec, params)
            if closed:
                handles.run(closed)
            return job, job, 0
        params, control = handles.values([params, control])
        # (a job method's result may stay on the training device: an aggregation folds it there)
        new, stats = self.host.train(device, seed, spec, params, control, resident=True)
        return new, stats, 0

    def wait(self, job: Job) -> dict[str, float]:
        """Already done (fast path: its group is trained now if it was still open)."""
        self.handles.need(job.stats)
        stats = job.stats
        if isinstance(stats, _Pending):
            assert stats.stats is not None
            stats = stats.stats
        return dict(stats)

    def set_state_base(self, params: Any) -> None:
        """In-process: the vector itself, given to the host (every job submitted before has run or holds its
        own group's turn: stateful jobs are never grouped)."""
        self.state_base = np.asarray(self.handles.values([params])[0])
        self.host.set_state_base(self.state_base)

    def evaluate(self, params: Any, model: int = 0, test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """In-process evaluation."""
        return self.cloud.evaluate(self.handles.values([params])[0], model, test_rows)

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """In-process, on the host role (one call per model the devices are tested with)."""
        sets = self.host.eval_sets
        out = np.zeros((len(sets), 3))
        method = spec.method if spec.method is not None and spec.method.device_evaluation else None
        for model, slots in eval_groups(len(sets), [int(d) for d, _, _ in sets], params, per_device):
            out[slots] = self.host.evaluate_devices(slots, self.handles.values([model])[0], method=method)
        return out

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> np.ndarray:
        """In-process, by the cloud role."""
        arrays = self.handles.values(list(models) + ([] if base is None else [base]))
        k = len(models)
        return self.cloud.similarity(-1 if base is None else k, list(range(k)), [None] * k, *arrays, measure=measure)

    def fetch(self, params: Any) -> np.ndarray:
        """The handle is the vector."""
        return np.asarray(self.handles.values([params])[0])

    def close(self) -> None:
        """Nothing to release (an open group is dropped)."""
        if self.handles.groups is not None:
            self.handles.groups.seal()
