"""The few value types the runtime and the protocol interface share: a job, an endpoint, a term.

They live here, below both, so that the runtime (which runs jobs and combines terms) does not
import the protocol interface (:mod:`hierfl.env`), which re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Endpoint", "Term", "Job"]

Endpoint = tuple[str, int]
"""``("device", i)``, ``("edge", e)`` or ``("cloud", 0)``."""

Term = tuple[float, Any, Any]
"""``(coefficient, handle, handle or None)``: ``c · (a − b)``, or ``c · a`` when the third is None."""


@dataclass
class Job:
    """A submitted local training job."""

    device: int
    job: int
    params: Any          # handle of the trained parameter vector
    stats: Any           # handle of the small stats dict
    compute_s: float     # its virtual duration
    start: float         # virtual start time
    host: int = 0
    lost_at: float | None = None   # the device drops out (offline / dropout) at this time: no result
    lost_reason: str | None = None
    ran: bool = True               # False: timing only, nothing was submitted (params = the start model)
