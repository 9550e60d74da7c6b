"""What a run needs before its first event: the executor begun while the data is built, the run's
data handed over, the start-up marks, the initial clusters record.

:func:`start_and_build` is the one place a run's executor start-up and build are ordered.
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import time
from typing import Any

import numpy as np

from hierfl import __version__
from hierfl.assemble import Built, build
from hierfl.config.errors import ConfigError
from hierfl.core.dynamics import Dynamics
from hierfl.env.records import ClustersRecord
from hierfl.learn.group_cap import resolve_group_cap
from hierfl.privacy.driver import privacy_edge_rule, privacy_rule
from hierfl.robust.driver import robust_setup
from hierfl.runtime.executor import Executor, RunData
from hierfl.runtime.start import ExecutorStart, process_launch_time, start_executor
from hierfl.scenario.schema import Scenario

__all__ = ["package_versions", "start_and_build", "build_timed", "run_data", "share_dataset", "initial_clusters",
           "startup_part", "world_part", "resolve_group_max"]


def package_versions() -> dict[str, str]:
    """Versions recorded in ``config.yaml`` (a copy: the lookups are made once a process)."""
    return dict(_package_versions())


@functools.cache
def _package_versions() -> dict[str, str]:
    # reading five packages' metadata parses their METADATA files: about 30 ms of CPU, once a process
    import importlib.metadata as md

    out = {"hierfl": __version__, "python": platform.python_version()}
    for pkg in ("numpy", "torch", "ray", "pydantic", "scipy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def start_and_build(scenario: Scenario, source: str | None = None) -> tuple[ExecutorStart, Built]:
    """Begin the executor's start-up, then build the scenario while the executor's processes start.

    ``ray.init`` runs first, on this thread; the actors it then requests start (each imports
    torch) while the data is generated here. (The build does not run on a helper thread during
    ``ray.init``: ``ray.init`` forks Ray's daemons, and a fork while another thread is inside
    OpenBLAS deadlocks in OpenBLAS's fork handler.) Build errors
    (:class:`~hierfl.config.errors.ConfigError`) are raised here, after the start-up has been
    released.
    """
    rt = scenario.runtime
    try:
        start = start_executor(rt.executor, rt.workers, rt.address, rt.gpus_per_host)
    except ConfigError as exc:  # settings the cluster cannot satisfy: reported against the scenario's file
        raise ConfigError(exc.problems, source) from None
    return start, build_timed(scenario, source, start)


def build_timed(scenario: Scenario, source: str | None, start: ExecutorStart) -> Built:
    """Build ``scenario`` (marking ``data_built`` in ``start``); a failed build releases ``start``."""
    try:
        # the model's torch work runs where the executor has torch (Ray: a host actor), not here
        built = build(scenario, source, model_call=start.model_call)
    except BaseException:
        start.close()
        raise
    start.marks["data_built"] = time.time()
    return built


def run_data(scenario: Scenario, built: Built, dyn: Dynamics) -> RunData:
    """What the executor is handed: the data, the model and the roles' settings."""
    rt = scenario.runtime
    return RunData(built.dataset.x_train, built.dataset.y_train, built.parts, built.dataset.x_test,
                   built.dataset.y_test, built.init_params,
                   (scenario.model, tuple(built.dataset.input_shape), built.dataset.num_classes, rt.torch_threads,
                    rt.fast_path, rt.device, rt.precision, rt.cpu_batching,
                    built.models.configs[1:] if built.models is not None else (),
                    rt.group_max if isinstance(rt.group_max, int) else None),
                   built.world.num_edges, built.spec, robust=robust_setup(scenario, dyn, privacy_rule(scenario),
                                                                    privacy_edge_rule(scenario, built.world)),
                   eval_sets=tuple(built.eval_sets), gpus_per_host=rt.gpus_per_host, public=_public(scenario, built))


def resolve_group_max(scenario: Scenario, built: Built, start: ExecutorStart) -> Scenario:
    """``scenario`` with ``runtime.group_max: auto`` resolved to a number (fast path on; otherwise as it is).

    The cap comes from the model, the batch, the optimizer's state and the training device's total memory
    (:mod:`hierfl.learn.group_cap`), computed where torch and the device are (a device host under Ray), once;
    the number is what ``config.yaml`` records and what every executor forms its groups with.
    """
    rt = scenario.runtime
    if not rt.fast_path or rt.group_max != "auto":
        return scenario
    spec = built.spec
    largest = max((int(p.size) for p in built.parts), default=1)
    batch = max(1, min(spec.batch_size or largest, largest))
    got = start.model_call(resolve_group_cap, scenario.model, tuple(built.dataset.input_shape),
                           built.dataset.num_classes, int(np.asarray(built.init_params).size), batch, spec, rt.device)
    return scenario.model_copy(update={"runtime": rt.model_copy(update={"group_max": int(got["group_max"])})})


def _public(scenario: Scenario, built: Built) -> tuple[np.ndarray, np.ndarray] | None:
    """``data.public``'s samples for server tasks: ``(x, y)``, with ``y = -1`` where labels are hidden."""
    rows = getattr(built, "public_rows", None)
    if rows is None or scenario.data.public is None:
        return None
    x, y = built.dataset.x_train[rows], np.asarray(built.dataset.y_train[rows])
    if not scenario.data.public.labelled:
        y = np.full_like(y, -1)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def share_dataset(built: Built, executor: Executor) -> None:
    """Point ``built``'s dataset at the executor's copy (Ray: the object store), freeing the driver's own."""
    views = executor.data_views()
    if views is not None:
        x, y, x_test, y_test = views
        built.dataset = dataclasses.replace(built.dataset, x_train=x, y_train=y, x_test=x_test, y_test=y_test)


def initial_clusters(scenario: Scenario, world: Any, protocol: Any) -> ClustersRecord:
    """The first ``clusters.jsonl`` line: the protocol's own grouping, else the topology's."""
    rec = protocol.clusters_record()
    if rec is not None:
        return rec
    if world.num_edges:
        members = [world.edge_members(e).tolist() for e in range(world.num_edges)]
        return ClustersRecord(0.0, "initial", scenario.topology.grouping, members,
                              [f"edge {e}" for e in range(world.num_edges)])
    return ClustersRecord(0.0, "initial", "flat", [list(range(world.num_devices))], ["cloud"])


def world_part(built: Built) -> dict[str, Any]:
    """``summary.json``'s part: the size of the world and of the model."""
    world = built.world
    return {"devices": world.num_devices, "edge_servers": world.num_edges, "num_params": built.num_params,
            "model_bytes": world.model_bytes}


def startup_part(executor: Executor, start: ExecutorStart, run_start: float, wall_s: float,
                 startup_s: float) -> dict[str, Any]:
    """``summary.json``'s part: the wall seconds, the start-up seconds (everything before the first
    event, or the executor's warm-up end if later) and each start-up step's end since launch."""
    marks = _startup_marks(executor, start, {"run_start": run_start})
    return {"wall_s": wall_s, "startup_s": max(startup_s, _ready(marks) - run_start),
            "startup": _since_launch(marks, run_start)}


def _startup_marks(executor: Executor, start: ExecutorStart, driver: dict[str, float]) -> dict[str, float]:
    """Epoch seconds at which the start-up steps ended (the actors' own, for a Ray executor)."""
    marks = executor.startup_marks()
    return {**driver, **(marks if marks is not None else start.marks)}


def _ready(marks: dict[str, float]) -> float:
    """When the executor could run jobs: the actors' warm-up end (Ray), else the executor's creation."""
    warm = [marks[k] for k in ("hosts_warm", "cloud_warm") if k in marks]
    return max(warm) if warm else marks["run_start"]


def _since_launch(marks: dict[str, float], run_start: float) -> dict[str, float | str]:
    """The marks in seconds since the process was launched (or, where that is unknown, since the run began)."""
    launch = process_launch_time()
    origin = launch if launch is not None and launch <= min(marks.values()) else run_start
    out: dict[str, float | str] = {"since": "launch" if origin != run_start else "run_start"}
    out.update({k: round(v - origin, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])})
    return out
