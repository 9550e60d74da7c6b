"""A lean local Ray instance: ``ray.init`` without the daemons an emulation run never uses.

``ray.init()`` on a machine without a cluster starts, besides the GCS and the raylet (and the
raylet's two agents, which it fate-shares with), three Python daemons that a hierfl run does not
need (scale, goal (c)):

* the autoscaler **monitor** (``monitor.py``): it scales a cluster up and down; a local
  instance has nothing to scale;
* the **log monitor** (``log_monitor.py``): it tails the workers' log files and echoes them in
  the driver's console (``log_to_driver``); the files themselves are still written, under
  ``/tmp/ray/session_latest/logs`` (``worker-*.out``/``.err``), and an actor's failure reaches
  the driver as an exception with its traceback, not through the logs;
* the **dashboard head** (``dashboard.py``): with ``include_dashboard=False`` and Ray's minimal
  install it loads only the usage-statistics module; Ray itself treats its failure to start as
  non-fatal in that case.

Each is a Python process that imports Ray: about 45-65 MB of memory (PSS, mostly anonymous:
``import ray`` alone is 37 MB) and 0.4-0.6 CPU s each, measured on W1a
(``analysis/bench/startup.py``). Leaving them out takes about 0.16 GB and 1.5 CPU s out of
every run on its own instance.

``ray.init`` has no public argument for this. ``ray start --head`` has ``--include-log-monitor
false`` (public) and ``--no-monitor`` (hidden), which set the same two fields of Ray's internal
``RayParams``; the dashboard head has no switch at all. So :func:`lean_init` uses Ray internals:
it sets ``RayParams.no_monitor`` and ``include_log_monitor`` and skips
``Node.start_api_server`` for the duration of one ``ray.init`` call. If this Ray version lacks
any of them (checked on Ray 2.60, the pinned environment's), it falls back to a plain ``ray.init``:
the run is then only bigger, never different. Attaching to a cluster (``--address``) is not
affected: the cluster's own daemons are whatever ``ray start`` started.

Nothing an emulation run needs changes: actors, the object store, lost-actor detection and
recovery are the GCS's and the raylet's work (``tests/runtime/test_ray_memory.py`` SIGKILLs an actor of a
lean instance, sees it reported lost, and runs a scenario on one with the local executor's bits).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import ray

__all__ = ["LEAN_LEFT_OUT", "lean_init", "lean_patches"]

LEAN_LEFT_OUT = ("monitor", "log_monitor", "dashboard")
"""The daemons a lean instance does not start (Ray's process-type names)."""


@contextlib.contextmanager
def lean_patches() -> Iterator[bool]:
    """While active, a head node that ``ray.init`` starts leaves out :data:`LEAN_LEFT_OUT`.

    Yields whether the patches could be applied (False: this Ray version lacks the internals,
    and the instance starts as usual). The patches are undone on exit, whatever happens.
    """
    try:
        from ray._private import node as ray_node
        from ray._private import parameter as ray_parameter
    except ImportError:  # another Ray layout: a plain start
        yield False
        return
    params_cls: Any = getattr(ray_parameter, "RayParams", None)
    node_cls: Any = getattr(ray_node, "Node", None)
    if params_cls is None or node_cls is None or not hasattr(node_cls, "start_api_server") or not all(
            name in getattr(params_cls.__init__, "__code__").co_varnames for name in ("no_monitor", "include_log_monitor")):
        yield False
        return
    original_init = params_cls.__init__
    original_api_server = node_cls.start_api_server

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        # only what ray.init leaves at its defaults: an explicit caller's choice is kept
        kwargs.setdefault("no_monitor", True)
        kwargs.setdefault("include_log_monitor", False)
        original_init(self, *args, **kwargs)

    def no_api_server(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        if include_dashboard:  # asked for explicitly: start it as Ray would
            original_api_server(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)
        # else: no dashboard head (Ray tolerates a missing one when it was not asked for)

    params_cls.__init__ = init
    node_cls.start_api_server = no_api_server
    try:
        yield True
    finally:
        params_cls.__init__ = original_init
        node_cls.start_api_server = original_api_server


def lean_init(**kwargs: Any) -> bool:
    """``ray.init(include_dashboard=False, **kwargs)`` starting a lean local instance (see the module
    docstring); returns whether the lean start applied. For a new local instance only: an
    ``address`` argument is refused (attaching has no daemons of its own to leave out)."""
    if kwargs.get("address") not in (None, "local"):
        raise ValueError("lean_init starts a local instance; attach with ray.init(address=...) instead")
    with lean_patches() as lean:
        if not lean:
            logging.getLogger(__name__).debug("lean Ray start unavailable in Ray %s; starting as usual", ray.__version__)
        ray.init(include_dashboard=False, **kwargs)
    return lean
