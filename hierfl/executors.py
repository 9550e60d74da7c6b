"""Executor plug-ins (``runtime.executor``): where training and aggregation run, registered by name.

* ``local`` — the role classes in-process, sequentially (the debugging backend; no Ray);
* ``ray`` — the same role classes as Ray actors on a local or remote cluster.

Both give identical results. A config here names its implementation by import path, so choosing
an executor imports it (and Ray) only when one is made: the scenario schema stays free of torch
and Ray. :func:`hierfl.runtime.executor.make_executor` looks the name up here.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Literal

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

__all__ = ["EXECUTORS", "ExecutorConfig", "LocalExecutorConfig", "RayExecutorConfig"]

EXECUTORS: Registry = Registry("executor")


class ExecutorConfig(ConfigModel):
    """Base of the executor plug-ins."""

    implementation: ClassVar[str]
    """``module:Class`` of the executor, imported when one is made."""
    start_implementation: ClassVar[str] = "hierfl.runtime.start:ExecutorStart"
    """``module:Class`` of its start-up (begun before the data exists), called as ``(name, workers, address)``."""
    in_process: ClassVar[bool] = False
    """Runs without a cluster (conformance tests start it)."""

    def _implementation(self, path: str | None = None) -> Any:
        module, _, cls = (path or self.implementation).partition(":")
        return getattr(importlib.import_module(module), cls)

    def create(self, data: Any, workers: int | str = "auto", address: str | None = None) -> Any:
        """Start the executor for one run (``data``: its :class:`~hierfl.runtime.executor.RunData`)."""
        raise NotImplementedError

    def start(self, workers: int | str = "auto", address: str | None = None, **options: Any) -> Any:
        """Begin this executor's start-up before the run's data exists (an
        :class:`~hierfl.runtime.start.ExecutorStart`). The default begins nothing early: the
        executor is made when the data is handed over. ``options``: executor-specific start
        options (the Ray executor's ``gpus_per_host``); an executor without them ignores them."""
        cls = self._implementation(self.start_implementation)
        if options and self.start_implementation == ExecutorConfig.start_implementation:
            options = {}
        return cls(self.name, workers, address, **options)  # type: ignore[attr-defined]


@EXECUTORS.register
class LocalExecutorConfig(ExecutorConfig):
    """``executor: local``: in-process and sequential; ``workers`` and ``address`` do not apply."""

    implementation: ClassVar[str] = "hierfl.runtime.executor:LocalExecutor"
    in_process: ClassVar[bool] = True

    name: Literal["local"] = "local"

    def create(self, data: Any, workers: int | str = "auto", address: str | None = None) -> Any:
        """A :class:`~hierfl.runtime.executor.LocalExecutor`."""
        return self._implementation()(data)  # type: ignore[no-any-return]


@EXECUTORS.register
class RayExecutorConfig(ExecutorConfig):
    """``executor: ray``: device hosts, leaders and the cloud as Ray actors (``workers`` hosts)."""

    implementation: ClassVar[str] = "hierfl.runtime.ray_executor:RayExecutor"
    # Ray up and the actors' processes starting (importing torch) while the driver generates the data
    start_implementation: ClassVar[str] = "hierfl.runtime.ray_cluster:RayStart"

    name: Literal["ray"] = "ray"

    def create(self, data: Any, workers: int | str = "auto", address: str | None = None) -> Any:
        """A :class:`~hierfl.runtime.ray_executor.RayExecutor` (imports Ray)."""
        return self._implementation()(data, workers=workers, address=address)  # type: ignore[no-any-return]

