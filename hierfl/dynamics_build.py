"""Resolve ``events:`` and ``devices.availability`` / ``dropout`` / ``jitter_sigma`` into :class:`Dynamics`.

Selectors are resolved once, at build time, from the ``(seed, "events", i)`` stream of event
``i``, so which devices an event touches is part of the scenario's deterministic world (and is
recorded in ``metrics.jsonl`` at the event's time). Markov availability timelines draw from one
stream per device, ``(seed, "availability", i)``.
"""

from __future__ import annotations

import math

import numpy as np

from hierfl.config.dynamics import EventConfig, MarkovAvailability, Selector
from hierfl.config.schema import Scenario
from hierfl.core.dynamics import (
    Availability,
    Dynamics,
    IntervalTimeline,
    LinkWindow,
    MarkovTimeline,
    Window,
    merge_intervals,
    select,
)
from hierfl.core.rng import stream
from hierfl.core.world import World
from hierfl.traces.config import AvailabilityTraceConfig

__all__ = ["build_dynamics", "resolve_selector"]


def resolve_selector(sel: Selector, world: World, seed: int, index: int) -> list[int]:
    """Device ids an event's selector matches (seeded sample for ``fraction`` / ``count``)."""
    n = world.num_devices
    groups = []
    if sel.tier is not None:
        tiers = [sel.tier] if isinstance(sel.tier, str) else list(sel.tier)
        assert world.tier is not None
        groups.append(np.isin(world.tier.astype(str), tiers))
    if sel.edge is not None:
        edges = [sel.edge] if isinstance(sel.edge, int) else list(sel.edge)
        groups.append(np.isin(world.edge_of, edges))
    return select(n, sel.ids, groups, sel.fraction, sel.count, lambda: stream(seed, "events", index))


def _end(ev: EventConfig, for_s: float | None) -> float:
    return ev.at_s + for_s if for_s is not None else math.inf


def build_dynamics(scenario: Scenario, world: World, source: str | None = None,
                   availability_trace: dict[int, tuple[list[tuple[float, float]], float | None]] | None = None
                   ) -> Dynamics:
    """Everything that changes in time, from the scenario."""
    n, seed = world.num_devices, scenario.seed
    dyn = Dynamics.static(n)
    dev = scenario.devices
    dyn.dropout = dev.dropout
    dyn.jitter_sigma = dev.jitter_sigma
    # -- availability model --
    avail = dev.availability
    base: list[IntervalTimeline | MarkovTimeline | None] = [None] * n
    if isinstance(avail, MarkovAvailability):
        assert world.tier is not None
        for d in range(n):
            if avail.tiers is None or str(world.tier[d]) in avail.tiers:
                base[d] = MarkovTimeline(avail.mean_up_s, avail.mean_down_s, stream(seed, "availability", d),
                                         start_up=True if avail.start == "up" else None)
    if isinstance(avail, AvailabilityTraceConfig):
        availability_trace = {d: (list(a.intervals), a.period_s) for d, a in avail.device_intervals(n, seed).items()}
    if availability_trace is not None:
        for d, (intervals, period) in availability_trace.items():
            base[d] = IntervalTimeline(intervals, period)
    away: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    open_leave: dict[int, float] = {}
    order = sorted(range(len(scenario.events)), key=lambda i: (scenario.events[i].at_s, i))
    for i in order:
        ev = scenario.events[i]
        kind = ev.kind
        spec = getattr(ev, kind)
        if kind == "edge_link":
            edges = spec.edges if spec.edges is not None else list(range(world.num_edges))
            for e in edges:
                _link_windows(dyn, ev, spec, ("edge", int(e)))
            continue
        devices = resolve_selector(spec.select, world, seed, i)
        if not devices:
            dyn.warnings.append(f"events.{i}.{kind}.select matches no device; the event does nothing")
        if kind == "slowdown":
            for d in devices:
                dyn.windows[d].append(Window(ev.at_s, _end(ev, spec.for_s), spec.factor))
        elif kind == "link":
            for d in devices:
                _link_windows(dyn, ev, spec, ("device", d))
        elif kind == "leave":
            for d in devices:
                if spec.for_s is not None:
                    away[d].append((ev.at_s, ev.at_s + spec.for_s))
                elif d not in open_leave:
                    open_leave[d] = ev.at_s
        elif kind == "join":
            for d in devices:
                if d in open_leave:
                    away[d].append((open_leave.pop(d), ev.at_s))
                # a join also ends a timed leave early
                away[d] = [(s, min(e, ev.at_s) if s < ev.at_s else e) for s, e in away[d]]
    for d, start in open_leave.items():
        away[d].append((start, math.inf))
    dyn.availability = Availability(base, [merge_intervals(a) for a in away])
    return dyn


def _link_windows(dyn: Dynamics, ev: EventConfig, spec: object, target: tuple[str, int]) -> None:
    end = _end(ev, getattr(spec, "for_s"))
    for field in ("uplink_mbps", "downlink_mbps", "latency_ms"):
        value = getattr(spec, field)
        if value is not None:
            dyn.links.append(LinkWindow(ev.at_s, end, target, field, set=float(value)))
    factor = getattr(spec, "bandwidth_factor")
    if factor is not None:
        for field in ("uplink_mbps", "downlink_mbps"):
            dyn.links.append(LinkWindow(ev.at_s, end, target, field, factor=float(factor)))
