"""Emulated infrastructure faults (``edge_fail`` / ``cloud_fail`` events), as pure data.

A :class:`FaultWindow` says that a server — an edge server ``("edge", e)`` or the cloud
``("cloud", 0)`` — is down during ``[start, end)``. :func:`outages` merges the windows of each
server into disjoint outages (two overlapping failures of one edge are one longer outage, whose
device policy is that of the failure that opened it), sorted by start time, then server.
:func:`nearest_edge` is the re-attachment rule: the live edge server with the lowest
device → edge latency (ties: the lowest id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FaultWindow", "Outage", "outages", "nearest_edge"]


@dataclass(frozen=True)
class FaultWindow:
    """``target`` is down in ``[start, end)``; ``on_edge_fail`` (edges only): ``reattach`` or ``wait``."""

    start: float
    end: float
    target: tuple[str, int]
    on_edge_fail: str = "reattach"


@dataclass(frozen=True)
class Outage:
    """One merged outage of one server."""

    target: tuple[str, int]
    start: float
    end: float
    on_edge_fail: str


def outages(windows: list[FaultWindow]) -> list[Outage]:
    """Disjoint outages per server, sorted by ``(start, target)``; overlapping or touching windows merge."""
    by_target: dict[tuple[str, int], list[FaultWindow]] = {}
    for w in windows:
        if w.end > w.start:
            by_target.setdefault(w.target, []).append(w)
    out: list[Outage] = []
    for target, ws in by_target.items():
        ws = sorted(ws, key=lambda w: (w.start, w.end))
        cur = Outage(target, ws[0].start, ws[0].end, ws[0].on_edge_fail)
        for w in ws[1:]:
            if w.start <= cur.end:
                cur = Outage(target, cur.start, max(cur.end, w.end), cur.on_edge_fail)
            else:
                out.append(cur)
                cur = Outage(target, w.start, w.end, w.on_edge_fail)
        out.append(cur)
    return sorted(out, key=lambda o: (o.start, o.target))


def nearest_edge(latency_ms: Any, device: int, live: list[int]) -> int | None:
    """The live edge server nearest to ``device`` by the (N, E) device → edge ``latency_ms`` (ties: lowest
    id); without per-pair latencies (an (N, 0) array) the lowest live id. None when no edge is live."""
    if not live:
        return None
    lat = np.asarray(latency_ms)
    if lat.ndim != 2 or lat.shape[1] == 0:
        return min(live)
    return min(live, key=lambda e: (float(lat[device, e]), e))
