"""Devices that change in time: slowdown windows, availability timelines, selectors (pure).

* :func:`finish_time` integrates a device's speed over its slowdown windows exactly: a job that
  needs ``work`` seconds at nominal speed and starts at ``t0`` ends at the first ``T`` with
  ``∫_{t0}^{T} 1/f(t) dt = work``, where ``f(t)`` is the product of the factors of the windows
  active at ``t`` (a window ``f = 10`` makes the device ten times slower while it lasts).
* :class:`Availability` answers "is device *i* up at *t*, when does it next go down / up" for
  the models of ``devices.availability`` (always on, a two-state Markov on/off process, a trace
  of up intervals) intersected with ``leave`` / ``join`` events. Markov timelines are drawn
  lazily, chunk by chunk, from one stream per device, so the answer never depends on the order
  of the questions.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Window", "finish_time", "factor_at", "Availability", "MarkovTimeline", "IntervalTimeline",
           "merge_intervals"]


@dataclass(frozen=True)
class Window:
    """``[start, end)`` during which a device is ``factor``× slower."""

    start: float
    end: float
    factor: float


def factor_at(windows: list[Window], t: float) -> float:
    """Product of the factors of the windows active at ``t``."""
    f = 1.0
    for w in windows:
        if w.start <= t < w.end:
            f *= w.factor
    return f


def finish_time(t0: float, work: float, windows: list[Window]) -> float:
    """End of a job of ``work`` nominal seconds started at ``t0`` under the slowdown ``windows``."""
    if work <= 0:
        return t0
    if not windows:
        return t0 + work
    cuts = sorted({w.start for w in windows} | {w.end for w in windows})
    t, left = t0, work
    for cut in cuts:
        if cut <= t:
            continue
        f = factor_at(windows, t)
        span = cut - t
        if span / f >= left:
            return t + left * f
        left -= span / f
        t = cut
    return t + left * factor_at(windows, t)


def merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted union of ``[start, end)`` intervals."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


class IntervalTimeline:
    """Up during a list of ``[start, end)`` intervals (a trace), optionally repeating every ``period``
    seconds (FedScale's traces wrap around their ``finish_time``). Periods are unrolled lazily."""

    def __init__(self, up: list[tuple[float, float]], period: float | None = None) -> None:
        self.period = period if period and period > 0 else None
        pattern = merge_intervals(up)
        if self.period is not None:
            pattern = [(max(s, 0.0), min(e, self.period)) for s, e in pattern if s < self.period and e > 0]
        self.pattern = pattern
        self.up: list[tuple[float, float]] = [] if self.period is not None else list(pattern)
        self.unrolled = 0  # periods unrolled so far

    def _extend_to(self, t: float) -> None:
        if self.period is None or not self.pattern:
            return
        # unroll until a whole period lies beyond t, so a merged interval containing t is complete
        while self.unrolled * self.period <= t + self.period:
            base = self.unrolled * self.period
            for s, e in self.pattern:
                if self.up and base + s <= self.up[-1][1]:
                    self.up[-1] = (self.up[-1][0], max(self.up[-1][1], base + e))
                else:
                    self.up.append((base + s, base + e))
            self.unrolled += 1
            if self.unrolled > 10_000_000:
                break

    def _index(self, t: float) -> int:
        self._extend_to(t)
        return bisect.bisect_right(self.up, (t, math.inf)) - 1

    def is_up(self, t: float) -> bool:
        """Whether the device is available at ``t``."""
        i = self._index(t)
        return i >= 0 and t < self.up[i][1]

    def next_change(self, t: float) -> float:
        """The first time after ``t`` at which the state flips (``inf`` if never)."""
        i = self._index(t)
        if i >= 0 and t < self.up[i][1]:
            end = self.up[i][1]
            if self.period is not None and self.pattern and self.pattern[0] == (0.0, self.period):
                return math.inf  # always up
            self._extend_to(end)
            return self.up[i][1]
        if i + 1 < len(self.up):
            return self.up[i + 1][0]
        return math.inf


class MarkovTimeline:
    """Two-state on/off process: exponential up and down durations with the given means.

    The first state is drawn from the stationary distribution ``P(up) = up / (up + down)`` (or
    fixed up with ``start_up=True``). Switch times are drawn lazily from ``rng`` in order.
    """

    def __init__(self, mean_up_s: float, mean_down_s: float, rng: np.random.Generator, start_up: bool | None = None):
        self.mean_up, self.mean_down, self.rng = mean_up_s, mean_down_s, rng
        p_up = mean_up_s / (mean_up_s + mean_down_s)
        self.first_up = bool(rng.random() < p_up) if start_up is None else start_up
        self.switches: list[float] = []  # times at which the state flips, increasing

    def _extend_to(self, t: float) -> None:
        while not self.switches or self.switches[-1] <= t:
            last = self.switches[-1] if self.switches else 0.0
            up_now = self.first_up if len(self.switches) % 2 == 0 else not self.first_up
            mean = self.mean_up if up_now else self.mean_down
            self.switches.append(last + float(self.rng.exponential(mean)))

    def is_up(self, t: float) -> bool:
        """Whether the device is available at ``t``."""
        self._extend_to(t)
        k = bisect.bisect_right(self.switches, t)
        return self.first_up if k % 2 == 0 else not self.first_up

    def next_change(self, t: float) -> float:
        """The first switch strictly after ``t``."""
        self._extend_to(t)
        return self.switches[bisect.bisect_right(self.switches, t)]


Timeline = "IntervalTimeline | MarkovTimeline | None"


@dataclass
class Availability:
    """Per-device availability: a base timeline (None = always up) minus ``away`` windows (leave/join)."""

    base: list[IntervalTimeline | MarkovTimeline | None]
    away: list[list[tuple[float, float]]] = field(default_factory=list)  # per device, merged [start, end)

    def __post_init__(self) -> None:
        if not self.away:
            self.away = [[] for _ in self.base]

    @property
    def trivial(self) -> bool:
        """True when every device is always available."""
        return all(b is None for b in self.base) and not any(self.away)

    def _away_at(self, d: int, t: float) -> tuple[float, float] | None:
        for s, e in self.away[d]:
            if s <= t < e:
                return s, e
        return None

    def is_up(self, d: int, t: float) -> bool:
        """Whether device ``d`` is available at ``t``."""
        if self._away_at(d, t) is not None:
            return False
        b = self.base[d]
        return True if b is None else b.is_up(t)

    def next_down(self, d: int, t: float) -> float:
        """For a device up at ``t``: when it next becomes unavailable (``inf`` if never)."""
        b = self.base[d]
        base_down = math.inf if b is None else b.next_change(t)
        away = min((s for s, _ in self.away[d] if s > t), default=math.inf)
        return min(base_down, away)

    def next_up(self, d: int, t: float, horizon: float = math.inf) -> float:
        """The first time ``≥ t`` at which device ``d`` is available (``inf`` if none before ``horizon``)."""
        cand = t
        for _ in range(100000):
            if cand > horizon:
                return math.inf
            w = self._away_at(d, cand)
            if w is not None:
                cand = w[1]
                if math.isinf(cand):
                    return math.inf
                continue
            b = self.base[d]
            if b is not None and not b.is_up(cand):
                cand = b.next_change(cand)
                if math.isinf(cand):
                    return math.inf
                continue
            return cand
        return math.inf


def select(n: int, ids: list[int] | None, groups: list[np.ndarray] | None, fraction: float | None,
           count: int | None, rng_factory: Callable[[], np.random.Generator]) -> list[int]:
    """Device ids matching a selector: the intersection of ``ids`` and each group mask, then a seeded
    sample of ``fraction`` (rounded, at least one when the pool is not empty) or ``count`` of them."""
    pool = np.arange(n)
    mask = np.ones(n, dtype=bool)
    if ids is not None:
        m = np.zeros(n, dtype=bool)
        m[[i for i in ids if 0 <= i < n]] = True
        mask &= m
    for g in groups or []:
        mask &= g
    pool = pool[mask]
    k = None
    if fraction is not None:
        k = max(int(round(fraction * pool.size)), 1) if pool.size else 0
    if count is not None:
        k = min(count, pool.size)
    if k is None or k >= pool.size:
        return [int(i) for i in pool]
    chosen = rng_factory().choice(pool, size=k, replace=False)
    return sorted(int(i) for i in chosen)


@dataclass(frozen=True)
class LinkWindow:
    """A link change in ``[start, end)``: ``set`` replaces the base value, ``factor`` multiplies it.

    ``target`` is ``("device", i)`` or ``("edge", e)``; ``field`` is ``uplink_mbps``,
    ``downlink_mbps`` or ``latency_ms``.
    """

    start: float
    end: float
    target: tuple[str, int]
    field: str
    set: float | None = None
    factor: float | None = None


def link_value(base: float, windows: list[LinkWindow], t: float) -> float:
    """Effective value at ``t``: the latest-started active ``set`` (else ``base``) × active factors."""
    value, latest = base, -math.inf
    f = 1.0
    for w in windows:
        if w.start <= t < w.end:
            if w.set is not None and w.start >= latest:
                value, latest = w.set, w.start
            if w.factor is not None:
                f *= w.factor
    return value * f


@dataclass
class Dynamics:
    """Everything about a run's world that changes in time, resolved from the scenario at build time."""

    windows: list[list[Window]]                 # per device: compute slowdowns
    availability: Availability
    dropout: float = 0.0                        # probability a task fails part-way
    jitter_sigma: float = 0.0                   # per-task lognormal σ on compute time (mean 1)
    links: list[LinkWindow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def static(cls, n: int) -> Dynamics:
        """Nothing changes: no slowdowns, always available, no link events."""
        return cls([[] for _ in range(n)], Availability([None] * n))

    @property
    def is_static(self) -> bool:
        """True when nothing in the world changes during the run."""
        return (not any(self.windows) and self.availability.trivial and self.dropout == 0.0
                and self.jitter_sigma == 0.0 and not self.links)

    def link_boundaries(self) -> list[float]:
        """Sorted distinct finite times at which some link value changes."""
        return sorted({t for w in self.links for t in (w.start, w.end) if math.isfinite(t)})


__all__ += ["LinkWindow", "link_value", "Dynamics", "select"]
