"""Bookkeeping shared by the protocols that survive edge-server and cloud faults (the hierarchical ones).

What each protocol does when a server fails is its own (the edge_fail and cloud_fail event kinds in docs/reference);
the accounting is the same everywhere and lives here: the lost work of a failure (a
``fault_loss`` line, the ``fault_updates_lost`` counter, a ``fault_loss`` trace instant) and the
devices that move between edge servers (``reattach`` lines, ``devices_reattached``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hierfl.env import Env, FaultLoss, Reattach
from hierfl.faults.math import nearest_edge

__all__ = ["CLOUD", "record_loss", "reattach_plan", "record_moves", "count_lost"]

CLOUD = ("cloud", 0)


def count_lost(lost: Iterable[tuple[str, Any]], kinds: Iterable[str]) -> int:
    """How many of the lost transfers ``(event, payload)`` were updates (their event is one of ``kinds``)."""
    wanted = set(kinds)
    return sum(1 for event, _ in lost if event in wanted)


def record_loss(env: Env, server: tuple[str, int], updates: int, wasted_s: float, **extra: Any) -> None:
    """Account the work lost to ``server``'s failure: counter, metric line and trace instant."""
    env.telemetry.count("fault_updates_lost", updates)
    env.telemetry.instant(server, "fault_loss", env.now, updates_lost=updates, wasted_compute_s=wasted_s, **extra)
    env.telemetry.record(FaultLoss(server[0], server[1], updates, wasted_s, dict(extra)))


def reattach_plan(env: Env, devices: Iterable[int], live: list[int]) -> dict[int, list[int]]:
    """Where each of ``devices`` goes: the nearest live edge server (by device → edge latency; ties: lowest
    id), as ``{edge: sorted devices}``; empty when no edge server is live."""
    plan: dict[int, list[int]] = {}
    latency = env.world.edge_latency_ms
    for d in devices:
        e = nearest_edge(latency, int(d), live)
        if e is not None:
            plan.setdefault(e, []).append(int(d))
    return {e: sorted(ds) for e, ds in sorted(plan.items())}


def record_moves(env: Env, src: int, plan: dict[int, list[int]], reason: str) -> None:
    """Write one ``reattach`` line (and trace instant) per destination of ``plan``; count the devices."""
    for dst, ds in plan.items():
        if not ds:
            continue
        env.telemetry.count("devices_reattached", len(ds))
        env.telemetry.instant(("edge", dst), "reattach", env.now, devices=ds, from_edge=src, reason=reason)
        env.telemetry.record(Reattach(list(ds), src, dst, reason))
