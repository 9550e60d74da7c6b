"""A method's own device job: what one local job runs, what it costs and what it returns (public plug-in API).

Plain local training (SGD with the scenario's ``training:`` settings) needs nothing here. A method
whose devices do something else in a job — correct every gradient by control variates, keep a
drift, train an input offset beside the model, distil from teacher snapshots, compute class scores
on public data — describes that job as a
**job method**: a frozen, hashable dataclass subclassing :class:`JobMethod`, carried in
:attr:`TrainSpec.method <hierfl.core.work.TrainSpec.method>`. Nothing in the driver, the executors
or the device hosts names a method: they ask the job method.

* :meth:`JobMethod.run` is the job itself, on the device's host, given a :class:`JobContext` (the
  model runner, the host's data arrays and the device's rows, the device's persistent state, the
  vector that came with the job, the seed). It runs in the worker process that hosts the device
  (Ray) or in the driver (local executor); both give the same bits.
* The cost hooks (:meth:`JobMethod.work_samples`, :meth:`JobMethod.uniform_work`,
  :meth:`JobMethod.cost_key`) say how much work the job is in training-sample equivalents, so
  emulated time is computed from the settings alone, never from model values.
* :meth:`JobMethod.result_width` is the length of the vector the job returns.
* ``keeps_device_state``: the job reads and writes the device's named vectors
  (:attr:`JobContext.state`), so it always runs on the device's home host, is never trained in a
  group, and its state is checkpointed, measured and reset on migration by the host. A device's state
  that was never written may start from :attr:`JobContext.base` (the run's initial model, or the global
  model at the end of the method's :meth:`JobMethod.plain_rounds`).
* ``device_evaluation``: devices are tested through :meth:`JobMethod.evaluate`, on their home host, given
  the support rows :meth:`JobMethod.eval_split` chooses to adapt on (:attr:`JobContext.support`).
* :meth:`JobMethod.initial_vector`: the run's vector and a message's length, where some parameters never
  leave the device or values travel behind the model.

The class is pure (numpy only): the runner of a shipped method may live in the method's own
package and import torch there, registered with :func:`runner` so that the dataclass itself can
stay importable without torch. A user's job method simply overrides :meth:`JobMethod.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierfl.core.message import MODEL_ONLY, MessageLayout

if TYPE_CHECKING:
    from hierfl.core.work import TrainSpec

__all__ = ["JobMethod", "JobContext", "StateStore", "runner", "METHOD_PACKAGES"]

# modules whose import registers the runners of the shipped job methods (imported by a host on the first
# job whose method has no runner yet: a Ray worker never imported the driver's modules); the server tasks'
# discovery also imports the ``server`` module of each of their subpackages (hierfl.learn.server_tasks)
METHOD_PACKAGES: list[str] = ["hierfl.methods"]

_RUNNERS: dict[tuple[type, str], Callable[..., Any]] = {}


def runner(cls: type, what: str = "run") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn(method, ctx)`` implements :meth:`JobMethod.run` (``what="run"``) or
    :meth:`JobMethod.evaluate` (``what="evaluate"``) of the job method ``cls``.

    For a job method defined in a pure module (its settings dataclass) whose code needs torch: the
    runner lives in the method's package, which the host imports when it first meets the class.
    """
    if not (isinstance(cls, type) and issubclass(cls, JobMethod)):
        raise TypeError(f"runner: {cls!r} is not a JobMethod subclass")
    if what not in ("run", "evaluate"):
        raise ValueError(f"runner: what must be run or evaluate, got {what!r}")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if _RUNNERS.get((cls, what), fn) is not fn:
            raise ValueError(f"a {what} runner for {cls.__name__} is already registered")
        _RUNNERS[(cls, what)] = fn
        return fn

    return register


class StateStore:
    """``device → {name → float32 vector}``: the persistent per-device state of the devices one host trains.

    A vector is zeros until the device's first job writes it. The host checkpoints it (:meth:`export`),
    reports its memory (:meth:`nbytes`) and forgets a device's state on request (:meth:`reset`: a device
    that moved to another aggregator with ``migration.device_state: reset``).
    """

    def __init__(self) -> None:
        self.vectors: dict[int, dict[str, np.ndarray]] = {}

    def __getitem__(self, device: int) -> dict[str, np.ndarray]:
        return self.vectors[device]

    def get(self, device: int, name: str, like: np.ndarray) -> np.ndarray:
        """``device``'s vector ``name`` (zeros shaped like ``like`` before it was first written)."""
        vecs = self.vectors.setdefault(device, {})
        vec = vecs.get(name)
        if vec is None:
            vec = vecs[name] = np.zeros(np.asarray(like).shape, dtype=np.float32)
        return vec

    def peek(self, device: int, name: str) -> np.ndarray | None:
        """``device``'s vector ``name``, or None if it was never written (nothing is created)."""
        return self.vectors.get(int(device), {}).get(name)

    def put(self, device: int, **vectors: np.ndarray) -> None:
        """Replace some of ``device``'s vectors."""
        self.vectors.setdefault(device, {}).update(vectors)

    def nbytes(self) -> tuple[int, int]:
        """``(devices holding state, bytes of their vectors)``."""
        return len(self.vectors), int(sum(v.nbytes for vecs in self.vectors.values() for v in vecs.values()))

    def reset(self, devices: list[int]) -> None:
        """Forget the state of ``devices``."""
        for device in devices:
            self.vectors.pop(int(device), None)

    def export(self) -> dict[int, dict[str, np.ndarray]]:
        """A copy, for a checkpoint."""
        return {d: {name: np.array(v) for name, v in vecs.items()} for d, vecs in self.vectors.items()}

    def merge(self, states: dict[int, Any]) -> None:
        """Take over :meth:`export`'s value (merged: several hosts' states may be given). A bare vector
        (a checkpoint written before states were named) is the control ``c``."""
        for d, vecs in states.items():
            named = vecs if isinstance(vecs, dict) else {"c": vecs}
            self.vectors[int(d)] = {name: np.array(v) for name, v in named.items()}


@dataclass
class JobContext:
    """Everything one job of a :class:`JobMethod` may read on its device's host.

    ``trainer`` is the model runner of the job's architecture (:class:`~hierfl.learn.local.LocalTrainer`:
    ``train``, ``evaluate``, ``num_params``, ``model_cfg``, ``input_shape``, ``num_classes``); ``x``, ``y``
    the host's training arrays and ``rows`` the rows this job sees (``parts``: every device's rows, by
    device); ``received`` the extra vector that came down with the job (a server control, summed logits;
    None if none); ``out`` an optional preallocated result array of :meth:`JobMethod.result_width`;
    ``state`` the host's per-device state; ``cache`` a dict the host keeps for the method's class across
    jobs (tables made once per host, a second model runner); ``model`` the job's
    ``(model config, input shape, number of classes, torch threads)``; ``base`` the model a device's state
    starts from before its first job writes it (the run's initial vector, or the global model when the
    method's plain rounds ended: :meth:`JobMethod.plain_rounds`); ``support`` (evaluation only) the
    samples ``(x, y)`` the device may adapt on before it is tested (:meth:`JobMethod.eval_split`);
    ``device_vectors`` the host's training device for a job that computes there
    (:class:`~hierfl.learn.kept.DeviceVectors`: ``device``, ``on_host``, ``transfers``, ``shared`` for a vector
    many jobs read, ``state`` and ``keep`` for a device's kept vectors, ``download`` of the result; None where
    the host gives none). A runner that uses it off the CPU keeps its state there between the device's jobs
    and must give the bits of its numpy code; ``keep_result``: the host takes a result left on the training device
    (``device_vectors.result``), which an aggregation folds there.
    """

    device: int
    seed: int
    spec: TrainSpec
    params: np.ndarray
    received: np.ndarray | None
    trainer: Any
    x: np.ndarray
    y: np.ndarray
    rows: np.ndarray
    parts: list[np.ndarray]
    state: StateStore
    model: tuple[Any, int | tuple[int, ...], int, int]
    out: np.ndarray | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    base: np.ndarray | None = None
    support: tuple[np.ndarray, np.ndarray] | None = None
    device_vectors: Any = None
    keep_result: bool = False

    def finish(self, result: np.ndarray, stats: dict[str, float]) -> tuple[np.ndarray, dict[str, float]]:
        """Return ``result`` through ``out`` when the host gave one (a row of a batch of results)."""
        if self.out is None or result is self.out:
            return result, stats
        self.out[...] = result
        return self.out, stats


class JobMethod:
    """Base of a method's own job settings (subclass it as a frozen, hashable dataclass).

    The defaults describe plain local training: subclasses override what differs. Equal settings must
    compare and hash equal (the executors group and cache jobs by their spec).
    """

    #: the job reads or writes its device's state (:attr:`JobContext.state`): it runs on the device's home
    #: host and never in a group of jobs trained together
    keeps_device_state: ClassVar[bool] = False
    #: the names of the per-device vectors it keeps (documentation, memory accounting, checks)
    state_names: ClassVar[tuple[str, ...]] = ()
    #: the work of a job is not the plain formula of its samples: :meth:`work_samples` is asked device by device
    custom_work: ClassVar[bool] = False

    def run(self, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
        """The job: ``(result vector of result_width float32 values, stats)``. The stats must hold ``steps``
        and may hold ``loss`` and the method's own numbers."""
        return _runner_of(type(self), "run")(self, ctx)  # type: ignore[no-any-return]

    # what the job's result carries (hierfl.core.message): the model alone, or the model with named parts after
    # it (``CONTROLLED``: a control delta the aggregator sums apart); it sets the default result width
    layout: ClassVar[MessageLayout] = MODEL_ONLY

    def result_width(self, num_params: int, num_classes: int, input_size: int) -> int:
        """Length of the job's result: by default the width of its :attr:`layout` (the model's parameters)."""
        return self.layout.width(num_params)

    def uniform_work(self, spec: TrainSpec) -> float | None:
        """The job's work when it is the same on every device whatever its data (a pass over public data),
        in training-sample equivalents; None (the default) when it depends on the device's samples."""
        return None

    def work_samples(self, n: int, spec: TrainSpec) -> float:
        """The job's work on a device holding ``n`` samples, in training-sample equivalents (what a
        device's ``speed_sps`` counts: one forward and backward pass of one sample). Asked device by device
        only with ``custom_work``; otherwise the plain formula (samples processed × work factor) holds."""
        from hierfl.core.work import plain_work_samples

        return plain_work_samples(n, spec)

    def cost_key(self) -> Hashable:
        """What of the settings the job's cost depends on (jobs with equal keys cost the same): by default
        the settings themselves."""
        return self

    def with_run_seed(self, seed_of: Callable[[str], int]) -> JobMethod:
        """The settings with anything drawn from the scenario seed filled in (``seed_of(stream name)``);
        called once when the run is built. By default unchanged."""
        return self

    def initial_extra(self, input_size: int, num_devices: int) -> np.ndarray | None:
        """Values the run's initial vector carries behind the model (a method whose servers average more
        than the model: every message is then that much longer); None (the default) for none."""
        return None

    def initial_vector(self, params: np.ndarray,
                       layout: Callable[[], Sequence[tuple[str, tuple[int, ...]]]]) -> tuple[np.ndarray, int] | None:
        """The run's initial vector made from the model's initial ``params``, and how many of its values a
        message carries (parameters that never leave the device are not sent); ``layout()`` gives the
        model's ``(parameter name, shape)`` list. None (the default): the parameters, all sent. Raises
        ``ValueError`` when the settings do not fit the model (reported at the trainer's key)."""
        return None

    def plain_rounds(self) -> int:
        """Cloud rounds at the start of the run whose jobs and evaluations are plain local training (a warm-up
        of the whole model); when they end, the global model becomes the model devices' state starts from
        (:attr:`JobContext.base`). By default none."""
        return 0

    #: devices are evaluated through :meth:`evaluate` (with state their home host keeps) instead of the
    #: plain forward pass of the model they are given
    device_evaluation: ClassVar[bool] = False

    def evaluate(self, ctx: JobContext) -> tuple[float, float]:
        """``(accuracy, mean loss)`` of ``ctx.params`` on ``ctx.x``, ``ctx.y`` for device ``ctx.device``
        (only with ``device_evaluation``)."""
        return _runner_of(type(self), "evaluate")(self, ctx)  # type: ignore[no-any-return]

    def eval_split(self, device: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions, among a device's ``n`` own rows, of its support set (what :meth:`evaluate` may adapt on:
        :attr:`JobContext.support`) and of its query set (the test rows of a held-out device, one that never
        trains); only with ``device_evaluation``. By default a seeded fifth of the rows is support."""
        from hierfl.core.device_eval import DEFAULT_SUPPORT_FRACTION, support_split

        return support_split(n, DEFAULT_SUPPORT_FRACTION, 0, device)


def _runner_of(cls: type, what: str) -> Callable[..., Any]:
    for attempt in range(2):
        for base in cls.__mro__:
            fn = _RUNNERS.get((base, what))
            if fn is not None:
                return fn
        if attempt == 0:  # a worker process that never imported the method packages: import them once
            import importlib

            for module in METHOD_PACKAGES:
                importlib.import_module(module)
    raise NotImplementedError(f"{cls.__name__}: a JobMethod must override {what}() or register a runner for it")
