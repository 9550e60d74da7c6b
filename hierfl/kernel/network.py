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

Cost per event, independent of how many flows are in flight (scale):

* Progress is closed-form (:mod:`hierfl.kernel.progress`): advancing the clock touches no flow,
  and a flow's finish time is exact and fixed until its own rate changes.
* Finish times live in a heap with lazy invalidation (an entry is stale once its flow's rate
  changed). :meth:`~FlowNetwork.next_finish` reads the few entries near the top, within the
  1e-12 s tie window, without popping them, and decides among them exactly as a scan over
  every flow would: O(log F + ties) per call.

The rates and the link indexes are :class:`~hierfl.kernel.linkrates.LinkRates` (its base class).
Pure: no RNG, no I/O.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable

from hierfl.kernel.linkrates import LinkRates, NetworkOps
from hierfl.kernel.linkrates import index_add as index_add
from hierfl.kernel.progress import EPS_MBIT, left_after

__all__ = ["Flow", "FlowNetwork", "NetworkOps"]

TIE_S = 1e-12     # finish times this close end in the same wake-up


class Flow:
    """One transfer in progress.

    ``remaining`` is the number of megabits still to send at the network's current time (for a
    flow that ended or was cancelled: at that instant); ``max_sharing`` is the most flows seen on
    one of its finite links at once and ``min_rate`` its lowest rate so far.
    """

    __slots__ = ("id", "links", "megabits", "started", "rate", "max_sharing", "min_rate", "tag",
                 "finite", "_r0", "_t0", "_end", "_net", "_order", "_ver", "detached")

    def __init__(self, id: int, links: tuple[Hashable, ...], megabits: float, remaining: float, started: float,
                 rate: float = 0.0, max_sharing: int = 1, min_rate: float = math.inf, tag: object = None,
                 finite: tuple[Hashable, ...] = ()) -> None:
        self.id = id
        self.links = links
        self.megabits = megabits          # size
        self.started = started            # virtual time it started
        self.rate = rate                  # Mbps now
        self.max_sharing = max_sharing
        self.min_rate = min_rate
        self.tag = tag
        self.finite = finite              # its links of finite capacity (the shared ones), kept current
        self._r0 = remaining              # megabits left at ``_t0`` (its last rate change)
        self._t0 = started
        self._end = math.inf              # when it ends at this rate
        self._net: FlowNetwork | None = None
        self._order = 0                   # insertion rank (ties are decided in this order)
        self._ver = 0                     # heap entries of older versions are stale
        self.detached = False             # its end is the caller's to schedule (FlowNetwork.add(detach=True))

    @property
    def end(self) -> float:
        """When it ends at its current rate (``inf`` at rate 0); fixed while the rate stays."""
        return self._end

    @property
    def remaining(self) -> float:
        """Megabits still to send at the network's current time."""
        if self._net is None:
            return self._r0
        return left_after(self._r0, self.rate, self._net.now - self._t0)

    @remaining.setter
    def remaining(self, value: float) -> None:
        if self._net is not None:
            self._net._rebase(self, value)
        else:
            self._r0 = value

    def __repr__(self) -> str:
        return (f"Flow(id={self.id!r}, links={self.links!r}, megabits={self.megabits!r}, "
                f"remaining={self.remaining!r}, started={self.started!r}, rate={self.rate!r}, "
                f"max_sharing={self.max_sharing!r}, min_rate={self.min_rate!r})")


class FlowNetwork(LinkRates):
    """Flows over capacitated links with exact max-min fair sharing; O(log F) work per event
    outside the component of flows that share a finite link with the change."""

    def __init__(self, capacity: dict[Hashable, float] | None = None, contention: bool = True,
                 watched: Iterable[Hashable] | None = None) -> None:
        """``watched``: the links whose capacity may change (:meth:`set_capacity`); only their flows are
        indexed by link (None: every link). A change of another link indexes it then, by one scan."""
        self.capacity: dict[Hashable, float] = dict(capacity or {})
        self._watched: set[Hashable] | None = None if watched is None else set(watched)
        self.contention = contention
        self.flows: dict[int, Flow] = {}
        self.on_link: dict[Hashable, set[int]] = {}     # finite link → flows crossing it
        self.now = 0.0
        self._ops = NetworkOps()
        self._solo_adds = 0   # detached adds not yet folded into ``ops`` (one flow and one link step each)
        self.capacity_changes = 0  # set_capacity calls so far (a caller's known ``finite`` holds while it stays)
        self._by_link: dict[Hashable, set[int]] = {}    # every (watched) link → flows crossing it
        self._heap: list[tuple[float, int, int]] = []   # (finish time, flow id, version)
        self._order = 0
        self._versions = 0                              # heap entry versions, unique network-wide
        self._detached = 0                              # detached flows in ``flows``
        # called with a detached flow's id when it joins the shared schedule again (see ``add``)
        self.on_attach: Callable[[int], None] | None = None

    # -- state changes ----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Move the network's clock to virtual time ``now`` (O(1): progress is closed-form)."""
        if now < self.now:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        self.now = now

    def add(self, now: float, flow_id: int, links: Iterable[Hashable], megabits: float, tag: object = None,
            detach: bool = False, finite: tuple[Hashable, ...] | None = None) -> Flow:
        """Start a flow of ``megabits`` over ``links`` at ``now``.

        ``detach``: if the flow shares no finite link with another flow (its rate is its path's
        bottleneck), it is kept out of :meth:`next_finish`: its end, ``flow.end``, is fixed and the
        caller schedules what follows it directly (one event per transfer instead of two). It
        stays so until another flow joins one of its finite links or a capacity on its path
        changes while it is in flight; then it is *attached* (filed for :meth:`next_finish` with the
        end it had) and ``on_attach(flow_id)`` tells the caller to withdraw what it scheduled. A
        detached flow whose end has passed is removed when that happens (its bits are all sent).
        The caller removes a detached flow itself once its end is past (:meth:`remove`).

        ``finite``: the finite-capacity links of ``links`` when the caller knows them: ``flow.finite``
        of an earlier flow over the same ``links``, while :attr:`capacity_changes` is what it was then
        (no capacity lookups).
        """
        if flow_id in self.flows:
            raise ValueError(f"flow {flow_id} already active")
        inf = math.inf
        if not 0.0 <= megabits < inf:  # (also NaN)
            raise ValueError(f"flow size must be a finite number >= 0, got {megabits}")
        if type(links) is not tuple:
            links = tuple(links)
        capacity = self.capacity
        if now < self.now:
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        if finite is None:
            try:
                if len(links) == 2:  # the common path (an access link and a server's side), unrolled
                    l0, l1 = links
                    f0, f1 = capacity[l0] < inf, capacity[l1] < inf
                    finite = links if f0 and f1 else (l0,) if f0 else (l1,) if f1 else ()
                else:
                    finite = tuple([link for link in links if capacity[link] < inf])
            except KeyError:
                raise KeyError(f"unknown link {next(link for link in links if link not in capacity)!r}") from None
        self.now = now
        if self.contention and len(finite) == 1:
            return self._add_on_one_link(now, flow_id, links, megabits, tag, detach, finite)
        on_link = self.on_link
        if self._detached and self.contention:
            # a detached flow is alone on its finite links: joining one of them settles it first
            for link in finite:
                users = on_link.get(link)
                if users is not None and len(users) == 1:
                    g = self.flows[next(iter(users))]
                    if g.detached:
                        self._settle(g)
        flow = self._new_flow(flow_id, links, megabits, now, tag, finite)
        alone = index_add(on_link, finite, flow_id)  # on every finite link of its path
        if not self.contention or alone and (detach or len(finite) <= 1):
            # alone on its shared links (or no sharing at all): its rate is its bottleneck's capacity,
            # nobody else's changes, and the component search would find only itself
            self._solo(flow, detach)
        else:
            self._recompute([flow_id], new=flow)
        return flow

    def _add_on_one_link(self, now: float, flow_id: int, links: tuple[Hashable, ...], megabits: float, tag: object,
                         detach: bool, finite: tuple[Hashable, ...]) -> Flow:
        """:meth:`add` of a flow with exactly one finite link (a device's access link), with contention:
        the common case, looked up once."""
        link = finite[0]
        on_link = self.on_link
        users = on_link.get(link)
        if users is not None and self._detached and len(users) == 1:
            g = self.flows[next(iter(users))]
            if g.detached:  # a detached flow is alone on its link: joining it settles it first
                self._settle(g)
                users = on_link.get(link)
        if users is not None or not detach or self._watched is None or self._watched:
            flow = self._new_flow(flow_id, links, megabits, now, tag, finite)
            if users is not None:
                users.add(flow_id)
                self._recompute([flow_id], new=flow)
                return flow
            on_link[link] = {flow_id}
            if not detach:
                self._solo(flow)  # alone on its shared link: its rate is that link's capacity
                return flow
        else:  # _new_flow inline (no by-link index to keep): one flow per transfer
            flow = Flow(flow_id, links, megabits, megabits, now, 0.0, 1, math.inf, tag, finite)
            flow._net = self
            flow._order = order = self._order
            self._order = order + 1
            self.flows[flow_id] = flow
            on_link[link] = {flow_id}
        # _solo(flow, detach=True) inline: alone on its one shared link, its rate is the link's
        # capacity (what progressive filling gives it) and its end is fixed
        rate = flow.rate = flow.min_rate = self.capacity[link]
        self._solo_adds += 1
        flow._end = now if megabits <= EPS_MBIT else now + megabits / rate
        flow.detached = True
        self._detached += 1
        return flow

    def _new_flow(self, flow_id: int, links: tuple[Hashable, ...], megabits: float, now: float, tag: object,
                  finite: tuple[Hashable, ...]) -> Flow:
        """A new flow, filed in ``flows`` and the by-link index (not yet on its shared links)."""
        flow = Flow(flow_id, links, megabits, megabits, now, 0.0, 1, math.inf, tag, finite)
        flow._net = self
        flow._order = self._order
        self._order += 1
        self.flows[flow_id] = flow
        watched = self._watched
        if watched is None:
            index_add(self._by_link, links, flow_id)
        elif watched:
            index_add(self._by_link, [link for link in links if link in watched], flow_id)
        return flow

    def _settle(self, f: Flow) -> None:
        """A detached flow meets the shared schedule: removed if its end has passed, else attached."""
        if f._end <= self.now:
            self.remove(self.now, f.id)
            return
        f.detached = False
        self._detached -= 1
        heapq.heappush(self._heap, (f._end, f.id, f._ver))
        self.ops.heap += 1
        if self.on_attach is not None:
            self.on_attach(f.id)

    def remove(self, now: float, flow_id: int) -> Flow:
        """End (or cancel) a flow at ``now``; the flows it shared links with speed up."""
        if now < self.now:  # (advance(now), inline: once per transfer)
            raise ValueError(f"network time cannot go back: {self.now} → {now}")
        self.now = now
        flow = self.flows.pop(flow_id)
        elapsed = now - flow._t0
        if elapsed > 0.0:  # left_after(r0, rate, elapsed), inline: frozen at what it had left now
            r = flow._r0 - flow.rate * elapsed
            flow._r0 = r if r > 0.0 else 0.0
        flow._t0 = now
        flow._net = None
        on_link = self.on_link
        if flow.detached:  # alone on its finite links (or no contention): nobody's rate changes
            flow.detached = False
            self._detached -= 1
            for link in flow.finite:
                members = on_link[link]
                if len(members) == 1:
                    del on_link[link]
                else:
                    members.discard(flow_id)
            if self._by_link:
                self._unindex(flow)
            return flow
        self._unindex(flow)
        neighbours: set[int] = set()
        for link in flow.finite:
            members = on_link[link]
            members.discard(flow_id)
            if members:
                neighbours |= members
            else:
                del on_link[link]
        if self.contention and neighbours:  # without contention nobody else's rate depends on this flow
            self._recompute(sorted(neighbours))
        return flow

    # -- queries ----------------------------------------------------------------------------
    def finish_time(self, flow_id: int) -> float:
        """When the flow ends if nothing changes (``now`` for a finished one)."""
        f = self.flows[flow_id]
        return f._end if f._end > self.now else self.now

    def next_finish(self) -> tuple[float, list[int]] | None:
        """The earliest finish time and every flow ending then (ties in id order).

        The same answer as scanning every flow in insertion order — a flow within 1e-12 s of the
        earliest time found so far joins it, an earlier one replaces it — computed from the few
        heap entries within the tie window of the top (read in place, nothing popped).
        """
        heap, flows, ops = self._heap, self.flows, self.ops
        while heap:  # drop stale entries at the top
            _, fid, ver = heap[0]
            f = flows.get(fid)
            if f is not None and f._ver == ver:
                break
            heapq.heappop(heap)
            ops.heap += 1
        if not heap:
            return None
        now = self.now
        top = heap[0][0]
        best = top if top > now else now
        if best == math.inf:
            return None
        # the scan's answer lies within [best, best + 2·TIE_S]: every candidate ends by best + 2·TIE_S
        # (a margin of a few ulps keeps the window inclusive)
        limit = best + 2 * TIE_S + 4 * math.ulp(best)
        if len(heap) == 1 or (heap[1][0] > limit and (len(heap) < 3 or heap[2][0] > limit)):
            ops.heap += 1
            return best, [heap[0][1]]
        near: list[Flow] = []
        stack = [0]
        n = len(heap)
        while stack:  # the heap's entries up to ``limit`` form a subtree at its root
            i = stack.pop()
            t, fid, ver = heap[i]
            ops.heap += 1
            if t > limit:
                continue
            f = flows.get(fid)
            if f is not None and f._ver == ver:
                near.append(f)
            j = 2 * i + 1
            if j < n:
                stack.append(j)
                if j + 1 < n:
                    stack.append(j + 1)
        ops.flows += len(near)
        near.sort(key=lambda g: g._order)
        chosen = math.inf
        ids: list[int] = []
        for f in near:
            t = f._end if f._end > now else now
            if t < chosen - TIE_S:
                chosen, ids = t, [f.id]
            elif abs(t - chosen) <= TIE_S:
                ids.append(f.id)
        if not ids:
            return None
        ids.sort()
        return chosen, ids

    # -- progress -----------------------------------------------------------------------------
    def _rebase(self, f: Flow, remaining: float) -> None:
        """``f`` has ``remaining`` left now: restart its closed form here and re-file it."""
        now = self.now
        f._r0, f._t0 = remaining, now
        rate = f.rate
        # end_at(remaining, rate, now), inline (once per flow at least)
        end = f._end = now if remaining <= EPS_MBIT else math.inf if rate <= 0.0 else now + remaining / rate
        self._versions += 1
        ver = f._ver = self._versions
        heap = self._heap
        heapq.heappush(heap, (end, f.id, ver))
        self.ops.heap += 1
        if len(heap) > 64 and len(heap) > 2 * len(self.flows):
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (amortised O(1): done when at least half are stale)."""
        flows = self.flows
        self._heap = [e for e in self._heap if (f := flows.get(e[1])) is not None and f._ver == e[2]]
        heapq.heapify(self._heap)
        self.ops.heap += len(self._heap)

    def _set_rate(self, f: Flow, rate: float, new: bool = False) -> None:
        """Give ``f`` a new rate from now on (its progress so far at the old rate is kept)."""
        if rate == f.rate and not new:
            return
        left = left_after(f._r0, f.rate, self.now - f._t0)
        f.rate = rate
        self._rebase(f, left)

    def _solo(self, f: Flow, detach: bool = False) -> None:
        """A new flow that shares no finite link: its rate is its path's bottleneck (what
        :meth:`_recompute` gives it, without the component search)."""
        cap, ops = self.capacity, self.ops
        if self.contention and len(f.finite) > 1:
            # alone on several finite links (detach only): what progressive filling gives it
            rate = self._fill([f.id])[f.id]
        elif self.contention:
            # alone on its one finite link (or on none): that link's capacity
            rate = cap[f.finite[0]] if f.finite else math.inf
            ops.links += len(f.finite)
        else:
            rate = min([cap[link] for link in f.links]) if f.links else math.inf
        ops.flows += 1
        # _set_rate(new=True) and _note(sharing=1) for a flow that has sent nothing yet
        f.rate = rate
        if rate < f.min_rate:
            f.min_rate = rate
        if detach:
            # _rebase without filing it: its end is the caller's (not in the heap, never stale)
            r0 = f._r0
            f._end = f._t0 if r0 <= EPS_MBIT else math.inf if rate <= 0.0 else f._t0 + r0 / rate
            f.detached = True
            self._detached += 1
            return
        self._rebase(f, f._r0)
