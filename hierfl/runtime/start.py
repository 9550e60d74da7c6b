"""Starting an executor before its data exists, so that its processes start while the data is generated.

A run's start-up is mostly waiting for other processes: Ray's daemons (``ray.init``) and the
actors, each of which imports torch. None of that needs the data, so :func:`start_executor` begins
it first and returns at once; the driver then generates the data, and
:meth:`ExecutorStart.executor` hands the data over and returns the executor. The local executor
has nothing to start early.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from hierfl.executors import EXECUTORS
from hierfl.runtime.executor import Executor, RunData, make_executor

__all__ = ["ExecutorStart", "start_executor", "process_launch_time"]


class ExecutorStart:
    """An executor's start-up, begun before the run's data exists (the local executor: nothing to begin).

    :meth:`executor` finishes it; :meth:`close` releases what an unfinished start holds (after
    :meth:`executor`, the executor owns it and closes it). ``marks`` are the epoch seconds
    (``time.time()``) at which start-up steps ended, by name.
    """

    kind = "local"

    def __init__(self, kind: str | None = None, workers: int | str = "auto", address: str | None = None) -> None:
        self.marks: dict[str, float] = {"runtime_start": time.time()}
        if kind is not None:
            self.kind = kind
        self._workers, self._address = workers, address

    def executor(self, data: RunData) -> Executor:
        """The executor, with the run's data (made now: nothing was begun early)."""
        return make_executor(self.kind, data, workers=self._workers, address=self._address)

    def model_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` where the executor's processes have torch: the build's model work (initial
        parameters, layout, FLOPs; :data:`hierfl.assemble.assemble.ModelCall`). Here: in this process,
        which trains with torch anyway."""
        return fn(*args)

    def refused(self) -> Exception | None:
        """A configuration error the start found (e.g. GPUs that cannot be placed), raised by
        :func:`start_executor` at once; None here."""
        return None

    def close(self) -> None:
        """Release an unfinished start (nothing here)."""

    def hand_over(self) -> bool:
        """Stop owning the cluster this start began (``close`` leaves it up); whether it owned one."""
        return False

    def take_over(self, owned: bool) -> None:
        """Own the cluster (``close`` shuts it down) if ``owned``: what another start's :meth:`hand_over` gave up."""


def start_executor(kind: str, workers: int | str = "auto", address: str | None = None,
                   gpus_per_host: float = 0.0) -> ExecutorStart:
    """Begin starting the executor named by ``runtime.executor`` (a plug-in of
    :data:`hierfl.executors.EXECUTORS`); returns without waiting. An unknown name raises
    ``ValueError`` listing the allowed ones; a start that refuses its settings
    (:meth:`ExecutorStart.refused`, e.g. ``runtime.gpus_per_host`` the cluster cannot place) is
    closed and its :class:`~hierfl.config.errors.ConfigError` raised."""
    try:
        config = EXECUTORS.get(kind)(name=kind)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if gpus_per_host:  # only the Ray executor places hosts on GPUs
        start = config.start(workers=workers, address=address, gpus_per_host=gpus_per_host)
    else:
        start = config.start(workers=workers, address=address)
    refused = getattr(start, "refused", lambda: None)()
    if refused is not None:  # a setting the cluster cannot satisfy: nothing is left running, nothing built
        start.close()
        raise refused
    return start  # type: ignore[no-any-return]


def process_launch_time() -> float | None:
    """Epoch seconds at which this process started (Linux ``/proc``; None elsewhere), to 10 ms."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read()
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime_s = float(fh.read().split()[0])
        start_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
        return time.time() - (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
