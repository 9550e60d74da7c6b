"""Errors that end a run: raised by the driver's services, reported in ``summary.json``."""

from __future__ import annotations

__all__ = ["RunError", "DivergedError"]


class RunError(RuntimeError):
    """A failure during a run, with the virtual time, entity and stage where it happened."""

    status = "failed"


class DivergedError(RunError):
    """The run diverged: a non-finite update (``robustness.on_nonfinite: fail``) or global model."""

    status = "diverged"

