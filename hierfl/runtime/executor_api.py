"""The executor interface: what an executor needs to start (:class:`RunData`) and what it offers.

A *handle* is whatever the executor uses to refer to a parameter vector: a numpy array in the local
executor, a Ray ``ObjectRef`` in the Ray executor. Protocols pass handles around and never look inside,
so updates flow host → leader → cloud without passing through the driver.

The interface is split by concern, so that each caller sees only its part:

* :class:`Executor` itself: jobs (``train``, ``wait``), evaluation and the run's life cycle;
* ``executor.servers`` (:class:`Servers`): what the leader and cloud roles aggregate, as the
  driver's aggregation service calls it;
* ``executor.state`` (:class:`ExecutorState`): what a checkpoint takes from the executor and gives
  back to a fresh one;
* ``executor.cluster`` (:class:`ClusterLink`): the cluster the roles run on (none in-process).

:func:`eval_groups` is the evaluation helper both executors share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.core.jobs import Job, Term
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.roles import ModelSpec

__all__ = ["Job", "Executor", "Servers", "ExecutorState", "ClusterLink", "RunData", "eval_groups", "Term"]


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
    robust: Any = None  # hierfl.robust.config.RobustSetup: robust rules / attacks on (None: plain averaging)
    # per-device evaluation sets (device, training rows, held-out rows or None): see Built.eval_sets
    eval_sets: tuple[tuple[int, np.ndarray, np.ndarray | None], ...] = ()
    gpus_per_host: float = 0.0  # runtime.gpus_per_host: GPUs reserved by each Ray device host actor
    # data.public's samples for server tasks at the cloud role: (x, y), y = -1 where labels are hidden
    public: tuple[np.ndarray, np.ndarray] | None = None


class Servers:
    """The leader and cloud roles' aggregation (``executor.servers``); every result is a new handle."""

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """Fold an arriving update into ``edge``'s running aggregation (does not wait).

        With ``control_coef`` the update is a packed ``[y; Δc]`` (control variates); ``κ·Δc`` is summed apart.
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

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Finish the cloud aggregation; returns the new global-model handle (``opt``: see :meth:`commit_edge`)."""
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

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of ``Σ w_k m_k / Σ w_k`` over model handles, computed by a role (does not wait)."""
        raise NotImplementedError

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` computed at ``tier`` (``edge``: the leader host, ``cloud``): a new model handle."""
        raise NotImplementedError

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """``opt`` steps ``base`` with ``Δ = Σ c·(a − b)``, at ``tier`` (leader ``entity`` or the cloud): a new handle."""
        raise NotImplementedError

    def control(self, edge: int | None = None) -> Any:
        """Handle of the cloud's control ``c`` (or of ``edge``'s own control ``c_e``, with edge-scoped controls) as of
        the last commit."""
        raise NotImplementedError

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
                 inputs: list[Any]) -> tuple[list[Any], float, dict[str, float], int]:
        """Run the server task ``name`` of the point ``(tier, entity)`` on the models ``inputs`` (in the cloud
        role, whichever the tier: a server task's result does not depend on where it runs):
        ``(output handles, flops, stats, bytes the point keeps)`` (:mod:`hierfl.learn.server_tasks`)."""
        raise NotImplementedError


class ExecutorState:
    """What a checkpoint takes from the executor and gives back to a fresh one (``executor.state``;
    :mod:`hierfl.driver.checkpoint`)."""

    def driver_state(self) -> Any:
        """The executor's own driver-side state that results depend on (the open fast-path group, the model
        devices' state starts from), pickled with the driver's state so its jobs keep their identity."""
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

    def device_state_bytes(self) -> tuple[int, int]:
        """``(devices holding state, bytes)`` of the persistent per-device state in the device hosts now."""
        return 0, 0

    def reset_devices(self, devices: list[int]) -> None:
        """Forget the per-device state (the vectors a job method keeps) of
        ``devices``, after every job submitted before: they start again from zeros (a device that moved to
        another group under ``migration.device_state: reset``)."""
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


class ClusterLink:
    """The cluster the roles run on (``executor.cluster``). This base: none, the roles run in this
    process and nothing can be lost under them."""

    def is_lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` (or its cause) means a role's process or node was lost, not a bug or bad input:
        the run can then go on from its last checkpoint on fresh roles, with identical results."""
        return False

    def probe(self) -> Callable[[], str | None] | None:
        """A cheap check, safe to call from another thread, of the cluster: it returns None while the
        cluster answers, else one line saying what stopped answering. None: there is nothing to probe."""
        return None

    def lost(self) -> str | None:
        """What of the cluster stopped answering (one line), or None: it answers, or there is none."""
        probe = self.probe()
        return None if probe is None else probe()

    def silence(self) -> None:
        """Stop relaying the cluster's own messages to this process's output (its loss was reported)."""

    def hand_over(self) -> bool:
        """Stop owning the cluster this executor's start began (closing leaves it up): a run rolled
        back to a checkpoint keeps it for the next executor (:meth:`take_over`). Whether it owned one."""
        return False

    def take_over(self, owned: bool) -> None:
        """Own the cluster (close shuts it down) if ``owned``: what :meth:`hand_over` gave up."""


class Executor:
    """Runs role work; results are identical whichever executor is used.

    ``servers``, ``state`` and ``cluster`` are its parts for aggregation, checkpoints and the
    cluster (see the module docstring); every implementation sets them.
    """

    name = "abstract"
    workers = 1
    servers: Servers
    state: ExecutorState
    cluster: ClusterLink

    def initial_model(self) -> Any:
        """Handle of the initial global model."""
        raise NotImplementedError

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any, control: Any = None) -> tuple[Any, Any, int]:
        """Submit a job; returns (params handle, stats handle, host index) without waiting.

        ``control``: handle of the server control ``c`` (jobs with ``spec.control_variates``);
        such a job's result is the packed ``[y; Δc]``.
        """
        raise NotImplementedError

    def wait(self, job: Job) -> dict[str, float]:
        """Block until ``job`` has finished; return its stats."""
        raise NotImplementedError

    def set_state_base(self, params: Any) -> None:
        """From now on, a device whose per-device state was never written starts from the model handle ``params``
        instead of the initial model (:attr:`JobContext.base <hierfl.core.method.JobContext.base>`: a job
        method's plain rounds ended, :meth:`JobMethod.plain_rounds <hierfl.core.method.JobMethod.plain_rounds>`);
        jobs submitted before still see the earlier one."""
        raise NotImplementedError

    def evaluate(self, params: Any, model: int = 0, test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """(accuracy, loss) of a model handle on the test set (blocking); ``model``: its architecture
        (``models:``; 0 = ``model``); ``test_rows``: only the test set's ``[start, stop)`` rows (one domain's
        test set, ``data.dataset: digits_domains``)."""
        raise NotImplementedError

    def evaluate_devices(self, params: Any, spec: TrainSpec, per_device: dict[int, Any] | None = None) -> np.ndarray:
        """Per-device evaluation of ``params`` (blocking): ``(K, 3)`` rows (correct, tested, loss sum)
        for the run's evaluation sets, in their order; each device tested through ``spec``'s job method when it
        declares ``device_evaluation``. ``per_device``: a device's own model handle (e.g. its cluster's) instead of ``params``."""
        raise NotImplementedError

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> np.ndarray:
        """Cosine similarity matrix of ``models − base`` (or of the models), computed by the cloud role (blocking);
        ``measure="sq_norm"``: the squared norm of each instead."""
        raise NotImplementedError

    def fetch(self, params: Any) -> np.ndarray:
        """The parameter vector behind a handle."""
        raise NotImplementedError

    def data_views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(x_train, y_train, x_test, y_test) as the executor holds them, for the driver to use instead
        of its own copy; None: the executor holds no copy of its own."""
        return None

    def startup_marks(self) -> dict[str, float] | None:
        """Epoch seconds at which the executor's start-up steps ended; None: its start's marks are all."""
        return None

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part: the executor's name and how many workers it ran; with persistent
        per-device state (job methods that keep some), what it holds (``device_state``)."""
        part: dict[str, Any] = {"executor": self.name, "workers": self.workers}
        held, nbytes = self.state.device_state_bytes()
        if held:
            part["device_state"] = {"devices": held, "bytes": nbytes, "bytes_per_device": nbytes // held}
        return part

    def close(self) -> None:
        """Release resources."""


def eval_groups(num_evals: int, eval_devices: list[int], params: Any,
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

