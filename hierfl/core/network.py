"""Flow-level network model: transfers share link capacities fairly (max-min), in virtual time.

A transfer is a *flow* of ``megabits`` over a set of links (for example a device's uplink and
its edge server's ingress). Every link has a capacity in Mbps; ``inf`` means the link never
constrains anyone and is not shared. At any instant each flow gets its **max-min fair** rate,
computed by progressive filling (Bertsekas & Gallager, *Data Networks*, §6.5.2): raise all
rates together until a link saturates, freeze the flows crossing it, repeat with the rest.
Rates only change when a flow starts, ends or is cancelled, or a capacity changes, so between
those instants every flow's progress is linear and its finish time is exact. The event engine
asks :meth:`FlowNetwork.next_finish` after each change and schedules one wake-up there.

With ``contention=False`` every flow runs at the bottleneck capacity of its own path, as if
alone (the plain ``latency + bytes / bandwidth`` model), still following capacity changes.

Pure: no RNG, no I/O. Only the *connected component* of flows that share a finite link with
the changed flow is recomputed, so populations whose links are all private cost O(1) per event.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["Flow", "FlowNetwork"]

EPS_MBIT = 1e-12  # a flow with less than this left is finished (floating-point residue)


@dataclass
class Flow:
    """One transfer in progress."""

    id: int
    links: tuple[Hashable, ...]
    megabits: float          # size
    remaining: float         # megabits still to send
    started: float           # virtual time it started
    rate: float = 0.0        # Mbps now
    max_sharing: int = 1     # most flows seen on one of its finite links at once
    min_rate: float = math.inf
    tag: object = field(default=None, repr=False)
    finite: tuple[Hashable, ...] = ()   # its links of finite capacity (the shared ones), kept current


class FlowNetwork:
    """Flows over capacitated links with exact max-min fair sharing."""

    def __init__(self, capacity: dict[Hashable, float] | None = None, contention: bool = True) -> None:
        self.capacity: dict[Hashable, float] = dict(capacity or {})
        self.contention = contention
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[Hashable, set[int]] = {}
        self.now = 0.0

    # -- state changes ----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Move every flow's progress forward to virtual time ``now`` at its current rate."""
        dt = now - self.now
        if dt < 0:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        if dt > 0:
            for f in self.flows.values():
                f.remaining = max(f.remaining - f.rate * dt, 0.0)
        self.now = now

    def add(self, now: float, flow_id: int, links: Iterable[Hashable], megabits: float, tag: object = None) -> Flow:
        """Start a flow of ``megabits`` over ``links`` at ``now``."""
        if flow_id in self.flows:
            raise ValueError(f"flow {flow_id} already active")
        if megabits < 0 or not math.isfinite(megabits):
            raise ValueError(f"flow size must be a finite number >= 0, got {megabits}")
        links = tuple(links)
        for link in links:
            cap = self.capacity.get(link)
            if cap is None:
                raise KeyError(f"unknown link {link!r}")
        self.advance(now)
        flow = Flow(flow_id, links, megabits, megabits, now, tag=tag, finite=self._finite(links))
        self.flows[flow_id] = flow
        for link in flow.finite:
            self.on_link.setdefault(link, set()).add(flow_id)
        self._recompute([flow_id])
        return flow

    def remove(self, now: float, flow_id: int) -> Flow:
        """End (or cancel) a flow at ``now``; the flows it shared links with speed up."""
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
        """Change a link's capacity at ``now`` (a link event); affected rates are recomputed."""
        if not mbps > 0:
            raise ValueError(f"capacity of {link!r} must be > 0, got {mbps}")
        self.advance(now)
        old = self.capacity.get(link)
        self.capacity[link] = mbps
        affected = [fid for fid, f in self.flows.items() if link in f.links]
        if old is not None and math.isinf(old) != math.isinf(mbps):
            # the link joins or leaves the shared set: re-index its flows
            for fid in affected:
                self.flows[fid].finite = self._finite(self.flows[fid].links)
                if math.isinf(mbps):
                    self.on_link.get(link, set()).discard(fid)
                else:
                    self.on_link.setdefault(link, set()).add(fid)
            if link in self.on_link and not self.on_link[link]:
                del self.on_link[link]
        self._recompute(sorted(affected))

    # -- queries ----------------------------------------------------------------------------
    def finish_time(self, flow_id: int) -> float:
        """When the flow ends if nothing changes (``now`` for a finished one)."""
        f = self.flows[flow_id]
        if f.remaining <= EPS_MBIT:
            return self.now
        return self.now + f.remaining / f.rate

    def next_finish(self) -> tuple[float, list[int]] | None:
        """The earliest finish time and every flow ending then (ties in id order)."""
        best = math.inf
        ids: list[int] = []
        for fid, f in self.flows.items():
            t = self.finish_time(fid)
            if t < best - 1e-12:
                best, ids = t, [fid]
            elif abs(t - best) <= 1e-12:
                ids.append(fid)
        if not ids:
            return None
        return best, sorted(ids)

    # -- rates ------------------------------------------------------------------------------
    def _finite(self, links: Iterable[Hashable]) -> tuple[Hashable, ...]:
        return tuple(link for link in links if math.isfinite(self.capacity[link]))

    def _component(self, seeds: list[int]) -> list[int]:
        """Flows connected to ``seeds`` through shared finite links (their rates may change)."""
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
        # progressive filling over the component (deterministic: sorted flows and links)
        rate = {fid: 0.0 for fid in comp}
        frozen: set[int] = set()
        links = sorted({link for fid in comp for link in self.flows[fid].finite}, key=repr)
        left = {link: self.capacity[link] for link in links}
        users = {link: [fid for fid in sorted(self.on_link[link]) if fid in rate] for link in links}
        for fid in comp:  # a flow over infinite links only is limited by nothing
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
            # freeze every flow on every saturated link (ties freeze together)
            for link in links:
                if left[link] <= 1e-9 * max(self.capacity[link], 1.0):
                    frozen.update(fid for fid in users[link])
        for fid in comp:
            f = self.flows[fid]
            f.rate = rate[fid]
            sharing = max((len(self.on_link[link]) for link in f.finite), default=1)
            self._note(f, sharing)

    @staticmethod
    def _note(f: Flow, sharing: int) -> None:
        f.max_sharing = max(f.max_sharing, sharing)
        f.min_rate = min(f.min_rate, f.rate)
