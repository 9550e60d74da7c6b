"""Link state of the flow network: capacities, the flows on each finite link, and max-min fair rates.

:class:`LinkRates` is the part of :class:`~hierfl.kernel.network.FlowNetwork` that knows links:
capacity changes (:meth:`~LinkRates.set_capacity`), the by-link indexes, and the rates. Rates are
recomputed only for the flows that share a finite link with the change, transitively (the
component; max-min fairness needs all of it), by progressive filling (Bertsekas & Gallager, *Data
Networks*, §6.5.2) with per-link counts of unfrozen flows instead of rescans. Its result does not
depend on the order in which links are visited, so no canonical link order is kept. Flows whose
rate comes out unchanged are not touched. Without contention nothing is recomputed when a flow ends.

:class:`NetworkOps` counts the inner-loop steps so tests can check that the work per event does
not grow with the number of flows. Pure: no RNG, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hierfl.kernel.network import Flow

__all__ = ["LinkRates", "NetworkOps", "index_add"]


@dataclass
class NetworkOps:
    """Inner-loop steps done so far (cheap counters for operation-count tests, not timings)."""

    flows: int = 0    # flows visited: component search, rate updates, finish candidates
    links: int = 0    # link visits inside progressive filling
    heap: int = 0     # heap pushes, pops and entries read

    def total(self) -> int:
        """All steps together."""
        return self.flows + self.links + self.heap


def index_add(index: dict[Any, set[Any]], keys: Iterable[Any], value: Any) -> bool:
    """Add ``value`` to the set ``index[key]`` of every key, creating missing sets; True when every
    key was new (``value`` is alone in each of its sets).

    The per-transfer bookkeeping of flows by link and of transfers by device; a ``get`` and one set
    literal is cheaper than ``setdefault(key, set())`` on this per-event path (no empty set built
    for a key that exists).
    """
    alone = True
    for key in keys:
        users = index.get(key)
        if users is None:
            index[key] = {value}
        else:
            users.add(value)
            alone = False
    return alone


class LinkRates:
    """Capacities, by-link indexes and max-min fair rates of :class:`~hierfl.kernel.network.FlowNetwork`
    (its base class: the network's state is set by its ``__init__``; these methods read and update it)."""

    capacity: dict[Hashable, float]
    contention: bool
    flows: dict[int, Flow]
    on_link: dict[Hashable, set[int]]
    capacity_changes: int
    _watched: set[Hashable] | None
    _by_link: dict[Hashable, set[int]]
    _ops: NetworkOps
    _solo_adds: int
    _detached: int

    if TYPE_CHECKING:  # the flow side, in FlowNetwork
        def advance(self, now: float) -> None: ...
        def _settle(self, f: Flow) -> None: ...
        def _set_rate(self, f: Flow, rate: float, new: bool = False) -> None: ...

    @property
    def ops(self) -> NetworkOps:
        """Inner-loop steps so far (the counters tests read)."""
        if self._solo_adds:
            self._ops.flows += self._solo_adds
            self._ops.links += self._solo_adds
            self._solo_adds = 0
        return self._ops

    # -- links -----------------------------------------------------------------------------
    def _unindex(self, flow: Flow) -> None:
        """Take ``flow`` out of the by-link index of the watched links."""
        by_link = self._by_link
        if by_link:
            for link in flow.links:
                users = by_link.get(link)
                if users is not None:
                    users.discard(flow.id)
                    if not users:
                        del by_link[link]

    def set_capacity(self, now: float, link: Hashable, mbps: float) -> None:
        """Change a link's capacity at ``now`` (a link event); affected rates are recomputed."""
        if not mbps > 0:
            raise ValueError(f"capacity of {link!r} must be > 0, got {mbps}")
        self.advance(now)
        old = self.capacity.get(link)
        self.capacity[link] = mbps
        self.capacity_changes += 1
        watched = self._watched
        if watched is not None and link not in watched:  # from now on its flows are indexed too
            watched.add(link)
            mine = {fid for fid, f in self.flows.items() if link in f.links}
            self.ops.flows += len(self.flows)
            if mine:
                self._by_link[link] = mine
        if self._detached:
            for fid in sorted(self._by_link.get(link, ())):
                if self.flows[fid].detached:
                    self._settle(self.flows[fid])
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

        Each round, the share is the smallest headroom per unfrozen flow over the links that still
        carry unfrozen flows (an exact ``min``); every unfrozen flow's rate (the running sum of the
        shares, ``level``) grows by it and every such link's headroom shrinks by share × its unfrozen
        flows. Then every link whose headroom is at most ``1e-9 × max(capacity, 1 Mbps)`` is
        saturated and freezes its flows. That tolerance is a design choice, not a rounding fix for
        one link only: the subtraction leaves a residue of a few ulps, and links that reach zero in
        the same round up to rounding (equal bottlenecks reached by different sums) must freeze
        together rather than leave a further round with a share of a few ulps. Nothing here depends on the order in which links are visited (the share is a ``min``,
        the freezing is per link, the counts are integers), so the links are kept in the order the
        flows of ``comp`` name them.
        """
        flows, cap, ops = self.flows, self.capacity, self.ops
        if len(comp) == 1:
            # alone: one round, the share is its bottleneck's capacity
            f = flows[comp[0]]
            ops.links += len(f.finite)
            return {f.id: min([cap[link] for link in f.finite], default=math.inf)}
        in_comp = set(comp)
        links = list(dict.fromkeys([link for fid in comp for link in flows[fid].finite]))
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
        while len(rate) < len(comp) and live:
            share = min([left[link] / active[link] for link in live])
            ops.links += len(live)
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

    @staticmethod
    def _note(f: Flow, sharing: int) -> None:
        f.max_sharing = max(f.max_sharing, sharing)
        f.min_rate = min(f.min_rate, f.rate)

    def stats(self) -> dict[str, Any]:
        """Sizes of the internal indexes (flows, heap entries) and the op counters."""
        return {"flows": len(self.flows), "heap": len(self._heap), "ops": self.ops.total()}
