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

Cost per event, independent of how many flows are in flight (issue 12):

* Progress is folded lazily. The model's arithmetic is a fold: at every network time ``t_k``
  (every :meth:`~FlowNetwork.advance` that moves the clock while flows exist) each flow does
  ``remaining = max(remaining - rate * (t_k - t_{k-1}), 0)``; finish times depend on those exact
  bits. :meth:`~FlowNetwork.advance` only appends ``t_k - t_{k-1}`` to a shared log, and a flow
  replays the steps it missed (the same operations in the same order, so the same bits) only
  when it is looked at: its rate changes or it may be the next to finish (an ended flow folds
  them when its ``remaining`` is read). So a flow pays once for the steps of its life it is
  looked at, in numpy for long stretches — the price of keeping the old bits — and a flow that
  is cancelled unread pays nothing.
* Finish times live in a heap with lazy invalidation. A key is exact when computed; later steps
  move the exact value by a few ulps at most, so :meth:`~FlowNetwork.next_finish` pops the flows
  whose key is within that bound (plus the 1e-12 s tie window) of the best, brings them up to
  date, and decides among them exactly as a scan over every flow would: O(log F) per call.
* Rates are recomputed only for the flows that share a finite link with the change,
  transitively (the component; max-min fairness needs all of it), by progressive filling whose
  float operations are those of the plain algorithm, with per-link counts instead of rescans.
  Flows whose rate comes out unchanged are not touched. Without contention nothing is
  recomputed when a flow ends.

:class:`NetworkOps` counts the inner-loop steps so tests can check that the work per event does
not grow with the number of flows. Pure: no RNG, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Flow", "FlowNetwork", "NetworkOps"]

EPS_MBIT = 1e-12  # a flow with less than this left is finished (floating-point residue)
TIE_S = 1e-12     # finish times this close end in the same wake-up
_ROUND = 4.5e-16  # per-step bound (4× the unit roundoff) on how far a replayed finish time drifts
_NUMPY_FROM = 24  # replays at least this long run in numpy


def _fold(r: float, rate: float, dts: list[float], i: int, k: int) -> float:
    """``r`` after the ``k`` steps ``dts[i:i + k]`` at ``rate``: ``r = max(r - rate * dt, 0)`` for
    each step in order (numpy for long stretches; the same operations, so the same bits)."""
    if k < _NUMPY_FROM:
        for dt in dts[i:i + k]:
            r = max(r - rate * dt, 0.0)
        return r
    # max(·, 0) only matters at the end: the unclamped sequence never increases, so it is negative
    # at the end exactly when the clamped one hit 0 on the way (and stays 0 from there)
    seq = np.empty(k + 1)
    seq[0] = r
    np.multiply(np.asarray(dts[i:i + k], dtype=np.float64), rate, out=seq[1:])
    last = float(np.subtract.accumulate(seq)[-1])
    return last if last >= 0.0 else 0.0


@dataclass
class NetworkOps:
    """Inner-loop steps done so far (cheap counters for operation-count tests, not timings)."""

    flows: int = 0    # flows visited: component search, rate updates, finish candidates
    links: int = 0    # link visits inside progressive filling
    heap: int = 0     # heap pushes and pops
    replay: int = 0   # fold steps replayed to bring flows up to date

    def total(self) -> int:
        """All steps together."""
        return self.flows + self.links + self.heap + self.replay


class Flow:
    """One transfer in progress.

    ``remaining`` is the number of megabits still to send at the network's current time
    (brought up to date on read); ``max_sharing`` is the most flows seen on one of its finite
    links at once and ``min_rate`` its lowest rate so far.
    """

    __slots__ = ("id", "links", "megabits", "_remaining", "started", "rate", "max_sharing", "min_rate", "tag",
                 "finite", "_net", "_sync", "_order", "_ver", "_tail")

    def __init__(self, id: int, links: tuple[Hashable, ...], megabits: float, remaining: float, started: float,
                 rate: float = 0.0, max_sharing: int = 1, min_rate: float = math.inf, tag: object = None,
                 finite: tuple[Hashable, ...] = ()) -> None:
        self.id = id
        self.links = links
        self.megabits = megabits          # size
        self._remaining = remaining       # megabits still to send, as of step ``_sync`` of its network
        self.started = started            # virtual time it started
        self.rate = rate                  # Mbps now
        self.max_sharing = max_sharing
        self.min_rate = min_rate
        self.tag = tag
        self.finite = finite              # its links of finite capacity (the shared ones), kept current
        self._net: FlowNetwork | None = None
        self._sync = 0                    # network step its ``_remaining`` is folded up to
        self._order = 0                   # insertion rank (ties are decided in this order)
        self._ver = 0                     # heap entries of older versions are stale
        self._tail: tuple[list[float], int, int] | None = None  # steps missed before it ended, unfolded

    @property
    def remaining(self) -> float:
        """Megabits still to send at the network's current time."""
        if self._net is not None:
            self._net._refresh(self)
        elif self._tail is not None:
            dts, i, k = self._tail
            self._remaining, self._tail = _fold(self._remaining, self.rate, dts, i, k), None
        return self._remaining

    @remaining.setter
    def remaining(self, value: float) -> None:
        if self._net is not None:
            self._net._sync(self)
            self._remaining = value
            self._ver = self._net._new_ver()
            self._net._push(self, self._net._finish(self))
        else:
            self._remaining, self._tail = value, None

    def __repr__(self) -> str:
        return (f"Flow(id={self.id!r}, links={self.links!r}, megabits={self.megabits!r}, "
                f"remaining={self.remaining!r}, started={self.started!r}, rate={self.rate!r}, "
                f"max_sharing={self.max_sharing!r}, min_rate={self.min_rate!r})")


class FlowNetwork:
    """Flows over capacitated links with exact max-min fair sharing; O(log F) work per event
    outside the component of flows that share a finite link with the change."""

    def __init__(self, capacity: dict[Hashable, float] | None = None, contention: bool = True) -> None:
        self.capacity: dict[Hashable, float] = dict(capacity or {})
        self.contention = contention
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[Hashable, set[int]] = {}     # finite link → flows crossing it
        self.now = 0.0
        self.ops = NetworkOps()
        self._by_link: dict[Hashable, set[int]] = {}    # every link → flows crossing it
        self._dts: list[float] = []                     # dt of steps _log0, _log0 + 1, … (the fold's log)
        self._log0 = 0
        self._steps = 0                                 # steps so far
        self._synced: dict[int, int] = {}               # step → flows folded up to it
        self._sync_steps: deque[int] = deque()          # those steps, increasing (oldest first)
        self._heap: list[tuple[float, int, int]] = []   # (lower bound of finish time, flow id, version)
        self._order = 0
        self._versions = 0                              # heap entry versions, unique network-wide
        self._repr: dict[Hashable, str] = {}

    # -- state changes ----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Move every flow's progress forward to virtual time ``now`` at its current rate (O(1):
        the step is logged and folded into each flow when that flow is next looked at)."""
        dt = now - self.now
        if dt < 0:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        if dt > 0 and self.flows:
            self._dts.append(dt)
            self._steps += 1
            self._trim()
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
        flow._net, flow._sync, flow._order = self, self._steps, self._order
        self._order += 1
        self._hold(self._steps)
        self.flows[flow_id] = flow
        for link in links:
            self._by_link.setdefault(link, set()).add(flow_id)
        for link in flow.finite:
            self.on_link.setdefault(link, set()).add(flow_id)
        self._recompute([flow_id], new=flow)
        return flow

    def remove(self, now: float, flow_id: int) -> Flow:
        """End (or cancel) a flow at ``now``; the flows it shared links with speed up."""
        self.advance(now)
        flow = self.flows.pop(flow_id)
        k = self._steps - flow._sync
        if k:  # folded only if someone reads it: a cancelled flow costs nothing here
            flow._tail = (self._dts, flow._sync - self._log0, k)
        self._release(flow._sync)
        flow._net = None
        for link in flow.links:
            users = self._by_link[link]
            users.discard(flow_id)
            if not users:
                del self._by_link[link]
        neighbours: set[int] = set()
        for link in flow.finite:
            members = self.on_link[link]
            members.discard(flow_id)
            neighbours |= members
            if not members:
                del self.on_link[link]
        if self.contention:  # without contention nobody else's rate depends on this flow
            self._recompute(sorted(neighbours))
        return flow

    def set_capacity(self, now: float, link: Hashable, mbps: float) -> None:
        """Change a link's capacity at ``now`` (a link event); affected rates are recomputed."""
        if not mbps > 0:
            raise ValueError(f"capacity of {link!r} must be > 0, got {mbps}")
        self.advance(now)
        old = self.capacity.get(link)
        self.capacity[link] = mbps
        affected = sorted(self._by_link.get(link, ()))
        self.ops.flows += len(affected)
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
        self._recompute(affected)

    # -- queries ----------------------------------------------------------------------------
    def finish_time(self, flow_id: int) -> float:
        """When the flow ends if nothing changes (``now`` for a finished one)."""
        f = self.flows[flow_id]
        self._refresh(f)
        return self._finish(f)

    def next_finish(self) -> tuple[float, list[int]] | None:
        """The earliest finish time and every flow ending then (ties in id order).

        The same answer as scanning every flow in insertion order — a flow within 1e-12 s of the
        earliest time found so far joins it, an earlier one replaces it — computed from the few
        flows near the top of the finish-time heap.
        """
        heap, flows, ops = self._heap, self.flows, self.ops
        slack = _ROUND * (self._steps - self._oldest_sync() + 8)
        near: list[tuple[int, float, Flow]] = []
        best = math.inf
        while heap:
            lb, fid, ver = heap[0]
            f = flows.get(fid)
            if f is None or f._ver != ver:
                heapq.heappop(heap)
                ops.heap += 1
                continue
            # every flow left in the heap ends at lb - slack·|lb| or later: stop once that is past the window
            if near and (lb == math.inf or lb - slack * max(abs(lb), 1.0) > best + 1e-11 + 16 * math.ulp(best)):
                break
            heapq.heappop(heap)
            ops.heap += 1
            ops.flows += 1
            self._sync(f)
            t = self._finish(f)
            near.append((f._order, t, f))
            best = min(best, t)
        for _, t, f in near:
            self._push(f, t)
        chosen = math.inf
        ids: list[int] = []
        for _, t, f in sorted(near, key=lambda x: x[0]):
            if t < chosen - TIE_S:
                chosen, ids = t, [f.id]
            elif abs(t - chosen) <= TIE_S:
                ids.append(f.id)
        if not ids:
            return None
        return chosen, sorted(ids)

    # -- the lazy fold ------------------------------------------------------------------------
    def _sync(self, f: Flow) -> bool:
        """Fold the steps ``f`` has missed into its ``remaining`` (the same operations, in order,
        that advancing every flow at every step would have done); whether there were any."""
        k = self._steps - f._sync
        if k == 0:
            return False
        f._remaining = _fold(f._remaining, f.rate, self._dts, f._sync - self._log0, k)
        self.ops.replay += k
        self._release(f._sync)
        f._sync = self._steps
        self._hold(self._steps)
        return True

    def _refresh(self, f: Flow) -> None:
        """Bring ``f`` up to date and re-file it: a flow's heap entry is always as old as its fold,
        so the oldest fold bounds how stale any entry is."""
        if self._sync(f):
            f._ver = self._new_ver()
            self._push(f, self._finish(f))

    def _finish(self, f: Flow) -> float:
        """Finish time of ``f``, folded up to now (the plain model's ``finish_time``)."""
        if f._remaining <= EPS_MBIT:
            return self.now
        return self.now + f._remaining / f.rate

    def _new_ver(self) -> int:
        self._versions += 1
        return self._versions

    def _hold(self, step: int) -> None:
        n = self._synced.get(step, 0)
        if n == 0 and (not self._sync_steps or self._sync_steps[-1] != step):
            self._sync_steps.append(step)
        self._synced[step] = n + 1

    def _release(self, step: int) -> None:
        n = self._synced[step] - 1
        if n:
            self._synced[step] = n
        else:
            del self._synced[step]
        while self._sync_steps and self._synced.get(self._sync_steps[0], 0) == 0:
            self._sync_steps.popleft()

    def _oldest_sync(self) -> int:
        return self._sync_steps[0] if self._sync_steps else self._steps

    def _trim(self) -> None:
        """Drop log entries no flow still needs (amortised O(1))."""
        drop = self._oldest_sync() - self._log0
        if drop >= 4096 and 2 * drop >= len(self._dts):
            self._dts = self._dts[drop:]   # a new list: ended flows keep the old one for their tail
            self._log0 += drop

    def _push(self, f: Flow, t: float) -> None:
        """File ``f`` (folded up to now) in the heap under its finish time ``t``, less what the
        early-finish threshold (``EPS_MBIT`` left counts as done) can take off it later."""
        if f._remaining > EPS_MBIT and 0 < f.rate < math.inf:
            t = t - EPS_MBIT / f.rate
        elif f._remaining > EPS_MBIT and f.rate <= 0:
            t = math.inf
        heapq.heappush(self._heap, (t, f.id, f._ver))
        self.ops.heap += 1
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self.flows):
            self._heap = [e for e in self._heap if e[1] in self.flows and self.flows[e[1]]._ver == e[2]]
            heapq.heapify(self._heap)
            self.ops.heap += len(self._heap)

    def _set_rate(self, f: Flow, rate: float, new: bool = False) -> None:
        """Give ``f`` a new rate from now on (its progress so far at the old rate is folded first)."""
        if rate == f.rate and not new:
            return
        self._sync(f)
        f.rate = rate
        f._ver = self._new_ver()
        self._push(f, self.now if f._remaining <= EPS_MBIT or rate <= 0 else self.now + f._remaining / rate)

    # -- rates ------------------------------------------------------------------------------
    def _finite(self, links: Iterable[Hashable]) -> tuple[Hashable, ...]:
        return tuple(link for link in links if math.isfinite(self.capacity[link]))

    def _component(self, seeds: list[int]) -> list[int]:
        """Flows connected to ``seeds`` through shared finite links (their rates may change)."""
        if not self.contention:
            return [s for s in seeds if s in self.flows]
        seen: set[int] = set()
        seen_links: set[Hashable] = set()
        stack = [s for s in seeds if s in self.flows]
        while stack:
            fid = stack.pop()
            if fid in seen:
                continue
            seen.add(fid)
            self.ops.flows += 1
            for link in self.flows[fid].finite:
                if link not in seen_links:
                    seen_links.add(link)
                    stack.extend(self.on_link[link])
        return sorted(seen)

    def _recompute(self, seeds: list[int], new: Flow | None = None) -> None:
        comp = self._component(seeds)
        if not comp:
            return
        if not self.contention:
            for fid in comp:
                f = self.flows[fid]
                caps = [self.capacity[link] for link in f.links]
                self._set_rate(f, min(caps) if caps else math.inf, f is new)
                self._note(f, 1)
            self.ops.flows += len(comp)
            return
        rate = self._fill(comp)
        for fid in comp:
            f = self.flows[fid]
            self._set_rate(f, rate[fid], f is new)
            sharing = max((len(self.on_link[link]) for link in f.finite), default=1)
            self._note(f, sharing)
        self.ops.flows += len(comp)

    def _fill(self, comp: list[int]) -> dict[int, float]:
        """Max-min fair rates of the component ``comp`` by progressive filling.

        The float operations are those of the textbook loop (every unfrozen flow's rate grows by
        each round's share, every link's headroom shrinks by share × its unfrozen flows, links in
        ``repr`` order): an unfrozen rate is the running sum of the shares, and links without
        unfrozen flows, whose headroom would shrink by 0, are skipped.
        """
        flows, cap, ops = self.flows, self.capacity, self.ops
        if len(comp) == 1:
            # alone: one round; the share is its first link (repr order) clearly below the others,
            # that link saturates exactly, and the rate is 0.0 + share
            f = flows[comp[0]]
            share = math.inf
            for link in sorted(f.finite, key=self._link_repr) if len(f.finite) > 1 else f.finite:
                s = cap[link] / 1
                if s < share - 1e-15:
                    share = s
            ops.links += len(f.finite)
            return {f.id: 0.0 + share}
        in_comp = set(comp)
        links = sorted({link for fid in comp for link in flows[fid].finite}, key=self._link_repr)
        left = {link: cap[link] for link in links}
        users = {link: [fid for fid in self.on_link[link] if fid in in_comp] for link in links}
        active = {link: len(users[link]) for link in links}
        ops.links += len(links)
        rate: dict[int, float] = {}
        for fid in comp:  # a flow over infinite links only is limited by nothing
            if not flows[fid].finite:
                rate[fid] = math.inf
        level = 0.0
        live = [link for link in links if active[link]]
        while len(rate) < len(comp):
            share, bottleneck = math.inf, None
            for link in live:
                s = left[link] / active[link]
                if s < share - 1e-15:
                    share, bottleneck = s, link
            ops.links += len(live)
            if bottleneck is None:
                break
            level += share
            for link in live:
                left[link] -= share * active[link]
            # freeze every flow on every saturated link (ties freeze together)
            for link in live:
                if left[link] <= 1e-9 * max(cap[link], 1.0):
                    for fid in users[link]:
                        if fid not in rate:
                            rate[fid] = level
                            for other in flows[fid].finite:
                                active[other] -= 1
                    ops.flows += len(users[link])
            live = [link for link in live if active[link]]
        for fid in comp:
            if fid not in rate:
                rate[fid] = level
        return rate

    def _link_repr(self, link: Hashable) -> str:
        r = self._repr.get(link)
        if r is None:
            r = self._repr[link] = repr(link)
        return r

    @staticmethod
    def _note(f: Flow, sharing: int) -> None:
        f.max_sharing = max(f.max_sharing, sharing)
        f.min_rate = min(f.min_rate, f.rate)

    def stats(self) -> dict[str, Any]:
        """Sizes of the internal indexes (flows, heap entries, logged steps) and the op counters."""
        return {"flows": len(self.flows), "heap": len(self._heap), "log": len(self._dts),
                "ops": self.ops.total()}
