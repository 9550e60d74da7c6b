"""Errors that end a run: raised by the driver's services, reported in ``summary.json``."""

from __future__ import annotations

__all__ = ["RunError", "DivergedError", "ClusterLostError"]


class RunError(RuntimeError):
    """A failure during a run, with the virtual time, entity and stage where it happened."""

    status = "failed"


class DivergedError(RunError):
    """The run diverged: a non-finite update (``robustness.on_nonfinite: fail``) or global model."""

    status = "diverged"


class ClusterLostError(RunError):
    """The Ray cluster under the run stopped answering (its raylet or GCS is gone): nothing is left to
    recover the roles onto. ``announced``: its one line was printed already, when the loss was seen."""

    status = "failed"
    announced = False
