"""Server tasks: work an edge server or the cloud runs itself (fine-tuning, a generator, a matching).

Some methods compute at a server — a generator trained against the devices' models and a fine-tuning of
the global model, a hypernetwork per client, a matching of neurons across the devices' models — and that
computation takes time. A *server task* is that computation; a protocol starts one with
``env.tier(tier, entity).run(name, inputs, done, payload, params)`` and the driver charges it on
the server's clock (``servers:``), first in, first out behind the server's earlier tasks.

A task is a function registered by name::

    @server_task("my_task")
    def my_task(ctx: ServerContext, inputs: list[np.ndarray], params: dict[str, Any],
                rng: np.random.Generator) -> ServerResult: ...

It receives the input models as float32 vectors, the protocol's ``params`` and a generator drawn
from the run's seed (stream ``("server_job", tier, entity, k)`` for the point's ``k``-th task). It
returns its output vectors and the work it charges, ``flops``: neural work counted as device jobs
are (``samples × passes × F(model)``, three passes for a training step), non-neural work (an
assignment problem, a large vector sum) by an operation count. Never a measured time: virtual time
is the only clock, so the same task takes the same time on every machine.

``ctx.state`` is a dictionary of numpy arrays kept for the task's server point across tasks (a
generator's weights, one hypernetwork per client); it is saved in checkpoints with the roles'
state, and its size is reported per tier in ``summary.json`` (``server_state_bytes``).

``ctx.device`` is the torch device the task computes on: the run's ``runtime.device`` resolved in the
process that hosts the server point, as a host resolves it for the jobs it trains one at a time (the
local executor's cloud; under Ray the cloud reserves no GPU, so there it is ``cpu``). A task builds its
modules and tensors there; its random draws stay on CPU generators of the named seed streams (drawn on
the CPU, then moved), so a CPU run's bits do not depend on the device code and a GPU run is
reproducible. ``ctx.upload`` and ``ctx.download`` move model-sized vectors across and count each
crossing in ``ctx.transfers`` (:class:`hierfl.learn.staging.Transfers`, shared by the point's host and
its trainers), on every device, as the copies they are on an accelerator.

A method's tasks live in its package, ``hierfl/methods/<method>/server.py``, which calls
:func:`server_task` at import; tasks no one method owns are modules of :mod:`hierfl.learn.tasks`.
:func:`discover` imports both the first time a task is looked up, in whatever process looks it up
(the driver, or the Ray worker that hosts the server point), so every process has the registrations.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.method import METHOD_PACKAGES
from hierfl.learn.staging import Transfers  # torch-free: imported lazily there

if TYPE_CHECKING:
    import torch

    from hierfl.learn.local import LocalTrainer

__all__ = ["EXAMPLES", "SERVER_TASKS", "ServerContext", "ServerResult", "ServerTask", "server_task", "get_task",
           "state_bytes"]


@dataclass(frozen=True)
class ServerResult:
    """What a task gives back: its output vectors, the FLOPs (or operations) it charges, and
    scalars the protocol may read (a loss, an iteration count)."""

    outputs: list[np.ndarray]
    flops: float
    stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (np.isfinite(self.flops) and self.flops >= 0):
            raise ValueError(f"a server task must charge a finite, non-negative amount of work, got flops={self.flops!r}")


@dataclass
class ServerContext:
    """What a task can use at its server point ``(tier, entity)``.

    ``trainer(k)`` is the :class:`~hierfl.learn.local.LocalTrainer` of the run's architecture ``k``
    (0: ``model``; ``models:`` adds the others), made on first use; ``forward_flops(k)`` the FLOPs
    of one sample's forward pass through it. ``public`` is ``(x, y)`` of the run's public split
    (``data.public``), or None. ``state`` persists across the point's tasks. ``device``: the torch
    device of the task's modules and tensors (``runtime.device`` resolved where the point is hosted:
    ``cpu`` or ``cuda``; the trainers of ``trainer(k)`` are on it too); ``transfers`` counts the
    model-sized vectors :meth:`upload` and :meth:`download` move across.
    """

    tier: str
    entity: int
    input_shape: tuple[int, ...]
    num_classes: int
    public: tuple[np.ndarray, np.ndarray] | None
    state: dict[str, np.ndarray]
    trainer: Callable[[int], LocalTrainer]
    forward_flops: Callable[[int], float]
    device: str = "cpu"
    transfers: Transfers = field(default_factory=Transfers)

    def upload(self, vectors: Sequence[np.ndarray]) -> torch.Tensor:
        """The host vectors (all of one length) as one new float32 ``(len(vectors), n)`` tensor on
        :attr:`device`, in one copy: one crossing of ``len(vectors)`` models. The tensor never shares
        memory with the inputs (a task may train it in place)."""
        import torch

        rows = np.stack([np.asarray(v, dtype=np.float32) for v in vectors])  # a fresh, writable host array
        self.transfers.count("h2d", len(vectors))
        return torch.from_numpy(rows).to(self.device)

    def download(self, tensor: torch.Tensor) -> np.ndarray:
        """A new host array with the values (and dtype) of ``tensor``, one vector or a stack of them: one
        crossing, of as many models as it has rows."""
        from hierfl.learn.local import download  # noqa: PLC0415 (torch: only tasks that compute need it)

        self.transfers.count("d2h", 1 if tensor.dim() < 2 else int(tensor.shape[0]))
        return download(tensor)


ServerTask = Callable[[ServerContext, list[np.ndarray], dict[str, Any], np.random.Generator], ServerResult]

SERVER_TASKS: dict[str, ServerTask] = {}
_DISCOVERED = False


Example = Callable[[ServerContext], tuple[list[np.ndarray], dict[str, Any]]]
# name → a function giving valid inputs and params for a context: what the conformance suite runs
EXAMPLES: dict[str, Example] = {}


def server_task(name: str, example: Example | None = None) -> Callable[[ServerTask], ServerTask]:
    """Register the decorated function as the server task ``name`` (a name is registered once).

    ``example(ctx)`` gives inputs and params the task accepts in a small run's context (logreg on 4
    features and 2 classes, a labelled public split): the conformance suite runs every task on its
    example, so a plug-in task ships one."""

    def register(fn: ServerTask) -> ServerTask:
        if name in SERVER_TASKS and SERVER_TASKS[name] is not fn:
            raise ValueError(f"server task {name!r} is registered twice")
        SERVER_TASKS[name] = fn
        if example is not None:
            EXAMPLES[name] = example
        return fn

    return register


def discover() -> None:
    """Import every module of :mod:`hierfl.learn.tasks`, the transfer channels' task, privacy's task and the
    ``server`` module of every method package (each registers its tasks): the packages of :data:`hierfl.core.method.METHOD_PACKAGES`, in name order."""
    global _DISCOVERED  # noqa: PLW0603 - once per process
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("hierfl.learn.tasks")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"hierfl.learn.tasks.{info.name}")
    importlib.import_module("hierfl.channels.server")  # a transfer channel's encode → decode (channels:)
    importlib.import_module("hierfl.privacy.server")  # a device's local-DP release of one upload (privacy.dp)
    for name in METHOD_PACKAGES:
        methods = importlib.import_module(name)
        for info in sorted(pkgutil.iter_modules(getattr(methods, "__path__", [])), key=lambda m: m.name):
            if info.ispkg and importlib.util.find_spec(f"{name}.{info.name}.server") is not None:
                importlib.import_module(f"{name}.{info.name}.server")


def get_task(name: str) -> ServerTask:
    """The task registered as ``name``; a clear error listing the registered names otherwise."""
    discover()
    try:
        return SERVER_TASKS[name]
    except KeyError:
        raise ValueError(f"no server task {name!r}; registered: {', '.join(sorted(SERVER_TASKS))}") from None


def state_bytes(state: dict[str, np.ndarray]) -> int:
    """Bytes of a point's kept arrays."""
    return int(sum(np.asarray(v).nbytes for v in state.values()))
