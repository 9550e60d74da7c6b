"""Devices that change in time: slowdown windows, availability timelines, selectors (pure).

* :func:`finish_time` integrates a device's speed over its slowdown windows exactly: a job that
  needs ``work`` seconds at nominal speed and starts at ``t0`` ends at the first ``T`` with
  ``∫_{t0}^{T} 1/f(t) dt = work``, where ``f(t)`` is the product of the factors of the windows
  active at ``t`` (a window ``f = 10`` makes the device ten times slower while it lasts).
* :class:`Availability` answers "is device *i* up at *t*, when does it next go down / up" for
  the models of ``devices.availability`` (always on, a two-state Markov on/off process, a trace
  of up intervals) intersected with ``leave`` / ``join`` events. Markov timelines are drawn
  lazily, chunk by chunk, from one stream per device, so the answer never depends on the order
  of the questions. Each question costs O(log k) in the device's own timeline, nothing in N.
* :class:`OnlineIndex` keeps the online members of a set of devices current as time moves,
  from a heap of their next state changes, so a driver never scans the population.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierfl.faults.math import FaultWindow

__all__ = ["Window", "finish_time", "factor_at", "Availability", "OnlineIndex", "MarkovTimeline",
           "IntervalTimeline", "merge_intervals"]


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


class _AwayWindows:
    """One device's ``away`` windows, indexed: O(log k) per question instead of a scan."""

    __slots__ = ("starts", "ends", "all_starts")

    def __init__(self, windows: list[tuple[float, float]]) -> None:
        merged = merge_intervals(list(windows))
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]
        self.all_starts = sorted(s for s, _ in windows)  # every start, empty windows included (next_down)

    def covering(self, t: float) -> float | None:
        """End of the (merged) window containing ``t``, or None."""
        i = bisect.bisect_right(self.starts, t) - 1
        return self.ends[i] if i >= 0 and t < self.ends[i] else None

    def next_start(self, t: float) -> float:
        """The first window start strictly after ``t`` (``inf`` if none)."""
        i = bisect.bisect_right(self.all_starts, t)
        return self.all_starts[i] if i < len(self.all_starts) else math.inf


@dataclass
class Availability:
    """Per-device availability: a base timeline (None = always up) minus ``away`` windows (leave/join).

    Fixed once built: ``trivial`` and the per-device window indexes are computed at construction,
    so every question costs O(1) in the population and O(log k) in a device's own timeline.
    Build a new object rather than editing ``base`` or ``away`` in place.
    """

    base: list[IntervalTimeline | MarkovTimeline | None]
    away: list[list[tuple[float, float]]] = field(default_factory=list)  # per device, merged [start, end)

    def __post_init__(self) -> None:
        if not self.away:
            self.away = [[] for _ in self.base]
        self._away = {d: _AwayWindows(a) for d, a in enumerate(self.away) if a}
        self._trivial = all(b is None for b in self.base) and not self._away

    @property
    def trivial(self) -> bool:
        """True when every device is always available (computed once, O(1))."""
        return self._trivial

    def is_up(self, d: int, t: float) -> bool:
        """Whether device ``d`` is available at ``t``."""
        away = self._away.get(d)
        if away is not None and away.covering(t) is not None:
            return False
        b = self.base[d]
        return True if b is None else b.is_up(t)

    def next_down(self, d: int, t: float) -> float:
        """For a device up at ``t``: when it next becomes unavailable (``inf`` if never)."""
        b = self.base[d]
        base_down = math.inf if b is None else b.next_change(t)
        away = self._away.get(d)
        return base_down if away is None else min(base_down, away.next_start(t))

    def next_up(self, d: int, t: float, horizon: float = math.inf) -> float:
        """The first time ``≥ t`` at which device ``d`` is available (``inf`` if none before ``horizon``)."""
        away, b = self._away.get(d), self.base[d]
        cand = t
        for _ in range(100000):
            if cand > horizon:
                return math.inf
            end = None if away is None else away.covering(cand)
            if end is not None:
                cand = end
                if math.isinf(cand):
                    return math.inf
                continue
            if b is not None and not b.is_up(cand):
                cand = b.next_change(cand)
                if math.isinf(cand):
                    return math.inf
                continue
            return cand
        return math.inf

    def next_change(self, d: int, t: float) -> float:
        """The first time after ``t`` at which device ``d`` changes state (goes down if up at ``t``,
        comes back if down); ``inf`` if never."""
        return self.next_down(d, t) if self.is_up(d, t) else self.next_up(d, t)


class OnlineIndex:
    """Which devices of a set are online now, kept current by a heap of their next state changes.

    A driver keeps one instead of asking :class:`Availability` about every device on every
    event. Members join and leave the set (an idle pool, a cluster, everyone) in O(log N);
    :meth:`advance` moves the clock and applies the state changes due by then, O(log N) each;
    "is it online", "how many are online" and "when is one of them next online" are O(1). The
    state it reports for a member at ``now`` is exactly ``availability.is_up(d, now)``.

    Parameters
    ----------
    availability:
        The run's availability (fixed after build).
    devices:
        The initial members.
    now:
        Virtual time the index starts at (seconds).
    """

    def __init__(self, availability: Availability, devices: Iterable[int] = (), now: float = 0.0) -> None:
        self.availability = availability
        self.now = now
        self.steps = 0                                  # inner-loop steps (heap operations), for tests
        self._online: set[int] = set()
        self._ver: dict[int, int] = {}                  # member → version of its live heap entry
        self._heap: list[tuple[float, int, int]] = []   # (next change time, device, version)
        self._next_ver = 0
        for d in devices:
            self.add(d)

    def __len__(self) -> int:
        return len(self._ver)

    def __contains__(self, d: object) -> bool:
        return d in self._ver

    @property
    def count_online(self) -> int:
        """How many members are online now."""
        return len(self._online)

    def is_online(self, d: int) -> bool:
        """Whether member ``d`` is online now (False for a non-member)."""
        return d in self._online

    def online(self) -> list[int]:
        """The members online now, sorted (O(k log k) for k online)."""
        return sorted(self._online)

    def online_among(self, devices: Iterable[int]) -> list[int]:
        """Those of ``devices`` (members) that are online now, in the order given."""
        return [d for d in devices if d in self._online]

    def add(self, d: int) -> None:
        """Make ``d`` a member (no-op if it is one)."""
        if d in self._ver:
            return
        self._next_ver += 1
        self._ver[d] = self._next_ver
        self._schedule(d, self.availability.is_up(d, self.now), self.now)

    def discard(self, d: int) -> None:
        """Remove ``d`` from the set (no-op if absent); its heap entry goes stale."""
        if self._ver.pop(d, None) is not None:
            self._online.discard(d)
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._ver):
                self._heap = [e for e in self._heap if self._ver.get(e[1]) == e[2]]
                heapq.heapify(self._heap)
                self.steps += len(self._heap)

    def advance(self, now: float) -> list[tuple[int, bool]]:
        """Move to virtual time ``now`` and apply every state change due by then.

        Returns the changes as ``(device, online)`` in time order (ties by device id); a device
        that flips twice appears twice.
        """
        if now < self.now:
            raise ValueError(f"time cannot go back: {self.now} → {now}")
        self.now = now
        changes: list[tuple[int, bool]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, d, ver = heapq.heappop(heap)
            self.steps += 1
            if self._ver.get(d) != ver:
                continue
            up = self.availability.is_up(d, t)
            self._schedule(d, up, t)
            changes.append((d, up))
        return changes

    def next_change(self) -> float:
        """The earliest time after ``now`` at which some member changes state (``inf`` if none)."""
        self._clean()
        return self._heap[0][0] if self._heap else math.inf

    def next_online(self) -> float:
        """The earliest time ``≥ now`` at which some member is online (``now`` if one is; ``inf`` if
        none ever comes back) — the minimum of ``availability.next_up`` over the members."""
        if self._online:
            return self.now
        return self.next_change()

    def _clean(self) -> None:
        heap = self._heap
        while heap and self._ver.get(heap[0][1]) != heap[0][2]:
            heapq.heappop(heap)
            self.steps += 1

    def _schedule(self, d: int, up: bool, t: float) -> None:
        if up:
            self._online.add(d)
            nxt = self.availability.next_down(d, t)
        else:
            self._online.discard(d)
            nxt = self.availability.next_up(d, t)
        if math.isfinite(nxt):
            heapq.heappush(self._heap, (nxt, d, self._ver[d]))
            self.steps += 1


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
    faults: list[FaultWindow] = field(default_factory=list)   # edge server / cloud outages (edge_fail, cloud_fail)
    # device → [(start, end, behaviour config)] from ``attack`` events (what a device sends, never
    # when: timing ignores it); empty: every device is honest
    attacks: dict[int, list[tuple[float, float, Any]]] = field(default_factory=dict)

    def behavior_at(self, device: int, t: float) -> Any:
        """The behaviour ``device`` has at time ``t`` (the latest attack event covering ``t``), or None."""
        found = None
        for start, end, cfg in self.attacks.get(device, ()):
            if start <= t < end:
                found = cfg
        return found

    @classmethod
    def static(cls, n: int) -> Dynamics:
        """Nothing changes: no slowdowns, always available, no link events."""
        return cls([[] for _ in range(n)], Availability([None] * n))

    @property
    def is_static(self) -> bool:
        """True when nothing in the world changes during the run."""
        return (not any(self.windows) and self.availability.trivial and self.dropout == 0.0
                and self.jitter_sigma == 0.0 and not self.links and not self.faults)

    def link_boundaries(self) -> list[float]:
        """Sorted distinct finite times at which some link value changes."""
        return sorted({t for w in self.links for t in (w.start, w.end) if math.isfinite(t)})


__all__ += ["LinkWindow", "link_value", "Dynamics", "select"]
