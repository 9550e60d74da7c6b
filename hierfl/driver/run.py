"""``run_scenario`` and ``resume_run``: a run from its scenario (or its checkpoint) to its output files.

A run is a pure function of (scenario, seed): the real clock is read only to report ``wall_s``.
Its phases (open, start fresh or from a checkpoint, drive and recover, finish or fail) are
:class:`~hierfl.driver.session.RunSession`'s; ``summary.json`` is assembled from the services'
parts (:mod:`hierfl.driver.summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.assemble import Built
from hierfl.driver.context import ClusterLostError, RunError
from hierfl.driver.loop import ProgressFn
from hierfl.driver.opening import package_versions, start_and_build
from hierfl.runtime.start import ExecutorStart
from hierfl.scenario.schema import Scenario

__all__ = ["run_scenario", "resume_run", "start_and_build", "RunResult", "RunError", "ClusterLostError",
           "package_versions"]


@dataclass
class RunResult:
    """What :func:`run_scenario` returns."""

    out_dir: Path
    summary: dict[str, Any]
    final_params: np.ndarray
    evals: list[dict[str, Any]] = field(default_factory=list)


def run_scenario(scenario: Scenario, out_dir: str | Path, progress: ProgressFn | None = None,
                 source: str | None = None, built: Built | None = None,
                 start: ExecutorStart | None = None) -> RunResult:
    """Run ``scenario`` and write its output files to ``out_dir``.

    Raises :class:`~hierfl.config.errors.ConfigError` before anything is written if the
    scenario cannot be built, and :class:`RunError` (after writing the metrics so far and a
    ``summary.json`` with ``status: failed``) if the run fails part-way; the run's last
    checkpoint (``checkpoint.pkl``) is left for ``hierfl resume``. A lost Ray cluster raises
    :class:`ClusterLostError` (``stop_reason: cluster_lost``); Ctrl-C raises ``KeyboardInterrupt``
    (``status: interrupted``).

    ``start``: the executor's start-up, begun by the caller before it built the data (see
    :func:`start_and_build`); the run finishes it and closes it. Without one, it is begun here,
    before the data is built. Once the data is in Ray's object store,
    the dataset arrays of ``built`` are replaced by read-only views of that copy, so the driver
    does not hold the data twice.
    """
    from hierfl.driver.session import RunSession

    launched = start.marks.get("runtime_start") if start is not None else None  # wall_s counts the build made before
    return RunSession(scenario, Path(out_dir), progress, source, None, launched).execute(built, start)  # type: ignore[no-any-return]


def resume_run(run_dir: str | Path, progress: ProgressFn | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (``hierfl resume``).

    The files are cut back to the checkpoint's sizes and the run goes on: they end as the
    uninterrupted run's would (wall-clock fields aside). :class:`RunError` if there is nothing to
    resume.
    """
    from hierfl.driver.checkpoint import load_checkpoint
    from hierfl.driver.session import RunSession

    ckpt = load_checkpoint(Path(run_dir))
    return RunSession(ckpt.scenario, Path(run_dir), progress, ckpt.source, ckpt).execute(None, None)  # type: ignore[no-any-return]
