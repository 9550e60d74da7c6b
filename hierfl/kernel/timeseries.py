"""Piecewise-constant time series in virtual time: queue lengths and their time-weighted statistics (pure).

A queue's length only changes at events (an arrival, an aggregation, a drop), so between two
changes it is constant. The time-weighted mean over ``[t0, t_end]`` is therefore exact:

    mean = (1 / (t_end − t0)) · Σ_k value_k · (t_{k+1} − t_k),   t_{K+1} = t_end

Several changes at the same instant (a buffer that fills and is flushed by the same arrival)
make zero-length segments: they count for the maximum, not for the mean. Used by the emulator
for the queues of leaders and cloud and the buffers of asynchronous protocols ("queue lengths over
time").
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepSeries", "QueueTracker", "time_weighted_mean"]


def time_weighted_mean(times: list[float], values: list[float], t_end: float) -> float:
    """Time-weighted mean over ``[times[0], t_end]`` of the step function that is ``values[k]`` from ``times[k]``.

    ``times`` must be non-decreasing and end no later than ``t_end``. A zero-length window
    (``t_end == times[0]``) has no duration to average over: its mean is the last value set.
    """
    if not times or len(times) != len(values):
        raise ValueError(f"need one value per change time, got {len(times)} times and {len(values)} values")
    if any(b < a for a, b in zip(times, times[1:])) or t_end < times[-1]:
        raise ValueError(f"change times must be non-decreasing and <= t_end={t_end}, got {times}")
    span = t_end - times[0]
    if span == 0:
        return float(values[-1])
    ends = [*times[1:], t_end]
    return sum(v * (e - t) for t, e, v in zip(times, ends, values)) / span


class StepSeries:
    """A step function built one change at a time, keeping its integral and maximum as it goes (O(1) per change)."""

    def __init__(self, t0: float = 0.0, value: float = 0.0) -> None:
        self.t0 = t0
        self.t = t0            # time of the latest change
        self.value = value     # value since then
        self.max = value
        self._area = 0.0       # ∫ value dt over [t0, t]

    def set(self, t: float, value: float) -> None:
        """The series takes ``value`` from time ``t`` on (``t`` no earlier than the previous change)."""
        if t < self.t:
            raise ValueError(f"time went backwards: change at t={t} after one at t={self.t}")
        self._area += self.value * (t - self.t)
        self.t, self.value = t, value
        if value > self.max:  # max(self.max, value) without the call: it keeps the first of equals too
            self.max = value

    def mean(self, t_end: float) -> float:
        """Time-weighted mean over ``[t0, t_end]`` (the current value when the window is empty)."""
        if t_end < self.t:
            raise ValueError(f"t_end={t_end} is before the latest change at t={self.t}")
        span = t_end - self.t0
        if span == 0:
            return float(self.value)
        return (self._area + self.value * (t_end - self.t)) / span


class QueueTracker:
    """Lengths of the queues of one run: one series per (tier, entity) and one per tier for their sum."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, int], StepSeries] = {}
        self.totals: dict[str, StepSeries] = {}

    def set(self, t: float, tier: str, entity: int, length: int) -> bool:
        """Record that ``tier``'s queue at ``entity`` holds ``length`` updates from ``t`` on.

        Every queue exists, empty, from t = 0 (the start of the run). Returns whether this is
        news — the queue's first mention or a changed length — i.e. whether to trace it.
        """
        # the key is (tier, int(entity)); an int (or numpy int) entity finds it as it is, without int()
        series = self.series.get((tier, entity)) or self.series.get((tier, int(entity)))
        if series is not None and series.value == length:  # no news (stored lengths are >= 0)
            return False
        if length < 0:
            raise ValueError(f"a queue length is >= 0, got {length} for {tier} {entity}")
        if series is None:
            series = self.series[(tier, int(entity))] = StepSeries(0.0, 0.0)
            self.totals.setdefault(tier, StepSeries(0.0, 0.0))
            if length == 0:
                return True
        self.change(t, tier, series, length)
        return True

    def change(self, t: float, tier: str, series: StepSeries, length: int) -> None:
        """``series`` (one of ``tier``'s, from :attr:`series`) holds ``length`` from ``t`` on; the tier's total
        follows. For a caller that keeps the series object: no lookup, no checks that it exists."""
        total = self.totals[tier]
        # StepSeries.set on both, inlined (one call per update arrival in a queue protocol), the same arithmetic
        if t < total.t or t < series.t:
            raise ValueError(f"time went backwards: change at t={t} after one at t={max(total.t, series.t)}")
        value = total.value + length - series.value
        total._area += total.value * (t - total.t)
        total.t, total.value = t, value
        if value > total.max:
            total.max = value
        series._area += series.value * (t - series.t)
        series.t, series.value = t, length
        if length > series.max:
            series.max = length

    def summary(self, t_end: float) -> dict[str, Any]:
        """Per tier: time-weighted ``mean`` and ``max`` of the tier's total queued updates over ``[0, t_end]``,
        and the same per entity (``by_entity``, keyed by id as text)."""
        out: dict[str, Any] = {}
        for tier in sorted(self.totals):
            total = self.totals[tier]
            out[tier] = {
                "mean": total.mean(t_end), "max": int(total.max),
                "by_entity": {str(e): {"mean": s.mean(t_end), "max": int(s.max)}
                              for (tr, e), s in sorted(self.series.items()) if tr == tier},
            }
        return out
