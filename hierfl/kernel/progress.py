"""Closed-form progress of a flow between two rate changes.

A flow keeps ``(r0, t0)``: the megabits it had left when its rate last changed (or it started)
and that instant; from then on ``remaining(t) = max(r0 - rate · (t - t0), 0)`` and it ends at
``t0 + r0 / rate``. Advancing the clock touches no flow, and a
flow's finish time is exact and fixed until its own rate changes. (Before, every flow folded
``remaining -= rate · dt`` over every step of the whole network's clock, so its last bits
depended on how many other flows were in flight, and keeping those bits cost O(concurrent
flows) per flow: replaying the steps is the only way to reproduce per-step roundings that
differ with every rate. The closed form is also the more accurate of the two: one rounding
per rate change instead of one per network event.)

The network inlines these on its per-event paths; they are the reference forms its comments name.
Pure: no RNG, no I/O.
"""

from __future__ import annotations

import math

__all__ = ["EPS_MBIT", "end_at", "left_after"]

EPS_MBIT = 1e-12  # a flow with less than this left when its rate changes is finished (floating-point residue)


def left_after(r0: float, rate: float, elapsed: float) -> float:
    """Megabits left ``elapsed`` s after the flow had ``r0`` left, at ``rate`` (never negative)."""
    if elapsed <= 0.0:
        return r0
    r = r0 - rate * elapsed
    return r if r > 0.0 else 0.0


def end_at(r0: float, rate: float, t0: float) -> float:
    """When a flow with ``r0`` left at ``t0`` ends at ``rate`` (``t0`` for a finished one)."""
    if r0 <= EPS_MBIT:
        return t0
    if rate <= 0.0:
        return math.inf
    return t0 + r0 / rate
