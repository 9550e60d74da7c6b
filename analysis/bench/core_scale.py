"""Per-event cost of the two core world models against the population (the scale goals).

Prints, side by side in one run, microseconds per event of

* the **network** model (:class:`hierfl.core.network.FlowNetwork`): N flows in flight on private
  device links (long downloads), while a stream of 2,000 short transfers on other devices starts
  and finishes — each event is what the emulator does for a transfer (``add`` + ``next_finish``,
  then at its finish ``advance`` + ``next_finish`` + ``remove`` + ``next_finish``);
* the **availability** model: for each of 2,000 events, the questions a driver asks — "is the
  population trivially available" (every event, in ``send`` and job start), "is this device up,
  when does it go down" — on N always-on devices of which the last 1 % leave for a while;
* the **online index** (:class:`hierfl.core.dynamics.OnlineIndex`) answering "how many are online
  now / when is one back" over the whole population as time moves, against the plain scan over
  every device a driver does without it,

at N = 1k, 10k, 100k, **before** (the algorithms of main before the scale work, kept below as
:class:`LegacyFlowNetwork` and :class:`LegacyAvailability`) and **after**. ``LegacyAvailability``
and :class:`PlainFlowNetwork` (the legacy network's scans with closed-form progress) are the
bit-for-bit references of ``tests/test_scale_core.py``; ``LegacyFlowNetwork`` (which folds every
flow's progress over every step of the clock) is its reference to within rounding.

Usage: ``python analysis/bench/core_scale.py [--sizes 1000 10000 100000] [--events 2000]``
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from hierfl.core.dynamics import Availability, IntervalTimeline, MarkovTimeline, OnlineIndex
from hierfl.core.network import FlowNetwork
from hierfl.core.rng import stream

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
    :class:`hierfl.core.network.FlowNetwork` (which computes the same without scanning)."""

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


# -- workloads -----------------------------------------------------------------------------------------
def network_workload(cls: type, n: int, events: int) -> float:
    """µs per event: ``n`` long flows in flight on private links, then ``events`` short transfers."""
    cap: dict[Hashable, float] = {("up", d): 1.0 + (d % 7) for d in range(n + events)}
    cap[("cloud_in",)] = math.inf
    net = cls(cap, contention=True)
    for d in range(n):                       # long-running background flows (never finish here)
        net.add(0.0, d, [("up", d), ("cloud_in",)], 1e9)
    net.next_finish()
    t, fid, pending = 0.0, n, []             # short transfers: one starts every 0.01 s, each lasts ~0.05 s
    t0 = time.perf_counter()
    count = 0
    for k in range(events):
        t += 0.01
        while pending and net.next_finish()[0] <= t:
            when, ids = net.next_finish()
            net.advance(when)
            for i in ids:
                net.remove(when, i)
            pending = [p for p in pending if p not in ids]
            count += 1
        net.add(t, fid, [("up", n + k), ("cloud_in",)], 0.05 * cap[("up", n + k)])
        net.next_finish()
        pending.append(fid)
        fid += 1
        count += 1
    return (time.perf_counter() - t0) / count * 1e6


def availability_workload(cls: type, n: int, events: int) -> float:
    """µs per event: the driver's per-event questions (``trivial``, ``is_up``/``next_down`` of one device)
    on an always-on population where the last 1 % of devices leave for a while (``leave`` events)."""
    base: list[IntervalTimeline | MarkovTimeline | None] = [None] * n
    away = [[(100.0 + d % 50, 150.0 + d % 50)] if d >= n - n // 100 else [] for d in range(n)]
    avail = cls(base, away)
    t0 = time.perf_counter()
    for k in range(events):
        t, d = 0.5 * k, (k * 7919) % n
        if not avail.trivial and avail.is_up(d, t):
            avail.next_down(d, t)
        elif not avail.trivial:
            avail.next_up(d, t)
    return (time.perf_counter() - t0) / events * 1e6


def online_workload(indexed: bool, n: int, events: int) -> tuple[float, float]:
    """(µs per event, state changes per event): "how many are online, when is one back" over all
    ``n`` Markov devices (mean up 600 s, down 200 s) as time moves 50 ms per event. The index's
    work follows the state changes, about n / 8,000 per event here."""
    base = [MarkovTimeline(600.0, 200.0, stream(1, "availability", d)) for d in range(n)]
    avail = Availability(base)
    index = OnlineIndex(avail, range(n)) if indexed else None
    changes = 0
    t0 = time.perf_counter()
    for k in range(events):
        t = 0.05 * k
        if index is not None:
            changes += len(index.advance(t))
            _ = index.count_online, index.next_online()
        else:
            up = [d for d in range(n) if avail.is_up(d, t)]
            _ = len(up), (t if up else min(avail.next_up(d, t) for d in range(n)))
    return (time.perf_counter() - t0) / events * 1e6, changes / events


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--events", type=int, default=2000)
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        # the scans cost O(N) per event: fewer events keep "before" at 100k within a minute
        ev_slow = max(50, min(args.events, args.events * 1000 // n))
        scan, _ = online_workload(False, n, max(5, ev_slow // 20))
        idx, changes = online_workload(True, n, args.events)
        rows.append((n,
                     network_workload(LegacyFlowNetwork, n, ev_slow), network_workload(FlowNetwork, n, args.events),
                     availability_workload(LegacyAvailability, n, ev_slow),
                     availability_workload(Availability, n, args.events),
                     scan, idx, idx / changes if changes else math.nan))
        print(f"N = {n} done", flush=True)
    print("µs per event (before = main before the scale work, after = this tree)")
    print(f"{'N':>8} | {'network before':>14} {'after':>7} | {'availability before':>19} {'after':>7} | "
          f"{'online: scan':>12} {'index':>7} {'index per change':>16}")
    for n, nb, na, ab, aa, ob, oa, oc in rows:
        print(f"{n:>8} | {nb:>14.1f} {na:>7.1f} | {ab:>19.1f} {aa:>7.2f} | {ob:>12.1f} {oa:>7.1f} {oc:>16.1f}")


if __name__ == "__main__":
    main()
