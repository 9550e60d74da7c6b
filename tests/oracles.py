"""Reference models the tests compare the core's world models with, bit for bit or within rounding.

* :class:`PlainFlowNetwork`: max-min fair sharing by plain scans over every flow and link, with
  closed-form progress; the flow network (:class:`hierfl.kernel.network.FlowNetwork`) must give its
  rates and finish times bit for bit.
* :class:`LegacyFlowNetwork`: the same model folding every flow's progress over every step of the
  clock, the network's algorithm before its per-event cost was made independent of the
  population; equal to within rounding.
* :class:`LegacyAvailability`: availability answered by scanning each device's timeline; the
  indexed availability must answer the same.

``analysis/bench/core_scale.py`` times the core against them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from hierfl.core.dynamics import IntervalTimeline, MarkovTimeline

EPS_MBIT = 1e-12


# -- the network model before the scale work (main at b12e380), verbatim but for names --------------------
@dataclass
class LegacyFlow:
    """One transfer in progress (before the scale work)."""

    id: int
    links: tuple[Hashable, ...]
    megabits: float
    remaining: float
    started: float
    rate: float = 0.0
    max_sharing: int = 1
    min_rate: float = math.inf
    tag: object = field(default=None, repr=False)
    finite: tuple[Hashable, ...] = ()


class LegacyFlowNetwork:
    """The flow network before the scale work: every advance and next_finish walks every flow."""

    def __init__(self, capacity: dict[Hashable, float] | None = None, contention: bool = True) -> None:
        self.capacity: dict[Hashable, float] = dict(capacity or {})
        self.contention = contention
        self.flows: dict[int, LegacyFlow] = {}
        self.on_link: dict[Hashable, set[int]] = {}
        self.now = 0.0

    def advance(self, now: float) -> None:
        dt = now - self.now
        if dt < 0:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        if dt > 0:
            for f in self.flows.values():
                f.remaining = max(f.remaining - f.rate * dt, 0.0)
        self.now = now

    def add(self, now: float, flow_id: int, links: Iterable[Hashable], megabits: float, tag: object = None
            ) -> LegacyFlow:
        if flow_id in self.flows:
            raise ValueError(f"flow {flow_id} already active")
        links = tuple(links)
        for link in links:
            if self.capacity.get(link) is None:
                raise KeyError(f"unknown link {link!r}")
        self.advance(now)
        flow = LegacyFlow(flow_id, links, megabits, megabits, now, tag=tag, finite=self._finite(links))
        self.flows[flow_id] = flow
        for link in flow.finite:
            self.on_link.setdefault(link, set()).add(flow_id)
        self._recompute([flow_id])
        return flow

    def remove(self, now: float, flow_id: int) -> LegacyFlow:
        self.advance(now)
        flow = self.flows.pop(flow_id)
        neighbours: set[int] = set()
        for link in flow.finite:
            members = self.on_link[link]
            members.discard(flow_id)
            neighbours |= members
            if not members:
                del self.on_link[link]
        self._recompute(sorted(neighbours))
        return flow

    def set_capacity(self, now: float, link: Hashable, mbps: float) -> None:
        self.advance(now)
        old = self.capacity.get(link)
        self.capacity[link] = mbps
        affected = [fid for fid, f in self.flows.items() if link in f.links]
        if old is not None and math.isinf(old) != math.isinf(mbps):
            for fid in affected:
                self.flows[fid].finite = self._finite(self.flows[fid].links)
                if math.isinf(mbps):
                    self.on_link.get(link, set()).discard(fid)
                else:
                    self.on_link.setdefault(link, set()).add(fid)
            if link in self.on_link and not self.on_link[link]:
                del self.on_link[link]
        self._recompute(sorted(affected))

    def finish_time(self, flow_id: int) -> float:
        f = self.flows[flow_id]
        if f.remaining <= EPS_MBIT:
            return self.now
        return self.now + f.remaining / f.rate

    def next_finish(self) -> tuple[float, list[int]] | None:
        best = math.inf
        ids: list[int] = []
        for fid in self.flows:
            t = self.finish_time(fid)
            if t < best - 1e-12:
                best, ids = t, [fid]
            elif abs(t - best) <= 1e-12:
                ids.append(fid)
        if not ids:
            return None
        return best, sorted(ids)

    def _finite(self, links: Iterable[Hashable]) -> tuple[Hashable, ...]:
        return tuple(link for link in links if math.isfinite(self.capacity[link]))

    def _component(self, seeds: list[int]) -> list[int]:
        if not self.contention:
            return [s for s in seeds if s in self.flows]
        seen: set[int] = set()
        stack = [s for s in seeds if s in self.flows]
        while stack:
            fid = stack.pop()
            if fid in seen:
                continue
            seen.add(fid)
            for link in self.flows[fid].finite:
                stack.extend(self.on_link[link] - seen)
        return sorted(seen)

    def _recompute(self, seeds: list[int]) -> None:
        comp = self._component(seeds)
        if not comp:
            return
        if not self.contention:
            for fid in comp:
                f = self.flows[fid]
                caps = [self.capacity[link] for link in f.links]
                f.rate = min(caps) if caps else math.inf
                self._note(f, 1)
            return
        rate = {fid: 0.0 for fid in comp}
        frozen: set[int] = set()
        links = sorted({link for fid in comp for link in self.flows[fid].finite}, key=repr)
        left = {link: self.capacity[link] for link in links}
        users = {link: [fid for fid in sorted(self.on_link[link]) if fid in rate] for link in links}
        for fid in comp:
            if not self.flows[fid].finite:
                rate[fid] = math.inf
                frozen.add(fid)
        while len(frozen) < len(comp):
            share, bottleneck = math.inf, None
            for link in links:
                active = [fid for fid in users[link] if fid not in frozen]
                if active:
                    s = left[link] / len(active)
                    if s < share - 1e-15:
                        share, bottleneck = s, link
            if bottleneck is None:
                break
            newly = [fid for fid in comp if fid not in frozen]
            for fid in newly:
                rate[fid] += share
            for link in links:
                active = [fid for fid in users[link] if fid not in frozen]
                left[link] -= share * len(active)
            for link in links:
                if left[link] <= 1e-9 * max(self.capacity[link], 1.0):
                    frozen.update(fid for fid in users[link])
        for fid in comp:
            f = self.flows[fid]
            f.rate = rate[fid]
            sharing = max((len(self.on_link[link]) for link in f.finite), default=1)
            self._note(f, sharing)

    @staticmethod
    def _note(f: LegacyFlow, sharing: int) -> None:
        f.max_sharing = max(f.max_sharing, sharing)
        f.min_rate = min(f.min_rate, f.rate)


class PlainFlowNetwork(LegacyFlowNetwork):
    """The plain model with closed-form progress: :class:`LegacyFlowNetwork`'s scans and rates, but a
    flow's ``remaining`` is ``max(r0 - rate · (t - t0), 0)`` since its last rate change at ``t0``
    instead of a fold over every step of the network's clock. The bit-for-bit reference of
    :class:`hierfl.kernel.network.FlowNetwork` (which computes the same without scanning)."""

    def __init__(self, capacity: dict[Hashable, float] | None = None, contention: bool = True) -> None:
        super().__init__(capacity, contention)
        self.t0: dict[int, float] = {}     # flow → its last rate change; ``LegacyFlow.remaining`` is r0 there

    def advance(self, now: float) -> None:
        if now < self.now:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        self.now = now

    def left(self, fid: int) -> float:
        """Megabits flow ``fid`` has left now."""
        f = self.flows[fid]
        elapsed = self.now - self.t0.get(fid, self.now)
        if elapsed <= 0.0:
            return f.remaining
        r = f.remaining - f.rate * elapsed
        return r if r > 0.0 else 0.0

    def remove(self, now: float, flow_id: int) -> LegacyFlow:
        self.advance(now)
        left = self.left(flow_id)
        del self.t0[flow_id]
        flow = super().remove(now, flow_id)
        flow.remaining = left
        return flow

    def finish_time(self, flow_id: int) -> float:
        f = self.flows[flow_id]
        t0 = self.t0[flow_id]
        end = t0 if f.remaining <= EPS_MBIT else math.inf if f.rate <= 0.0 else t0 + f.remaining / f.rate
        return end if end > self.now else self.now

    def _recompute(self, seeds: list[int]) -> None:
        before = {fid: (f.rate, self.left(fid)) for fid, f in self.flows.items()}
        super()._recompute(seeds)
        for fid, f in self.flows.items():
            rate, left = before[fid]
            if fid not in self.t0 or f.rate != rate:   # new, or its rate changed: restart the closed form
                f.remaining, self.t0[fid] = left, self.now


# -- availability before the scale work ----------------------------------------------------------------------
@dataclass
class LegacyAvailability:
    """Availability before the scale work: ``trivial`` scans every device, ``away`` windows are scanned."""

    base: list[IntervalTimeline | MarkovTimeline | None]
    away: list[list[tuple[float, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.away:
            self.away = [[] for _ in self.base]

    @property
    def trivial(self) -> bool:
        return all(b is None for b in self.base) and not any(self.away)

    def _away_at(self, d: int, t: float) -> tuple[float, float] | None:
        for s, e in self.away[d]:
            if s <= t < e:
                return s, e
        return None

    def is_up(self, d: int, t: float) -> bool:
        if self._away_at(d, t) is not None:
            return False
        b = self.base[d]
        return True if b is None else b.is_up(t)

    def next_down(self, d: int, t: float) -> float:
        b = self.base[d]
        base_down = math.inf if b is None else b.next_change(t)
        away = min((s for s, _ in self.away[d] if s > t), default=math.inf)
        return min(base_down, away)

    def next_up(self, d: int, t: float, horizon: float = math.inf) -> float:
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
