"""A :class:`TopologySpec` plus the number of devices and the seed → World arrays.

* **positions** — devices are placed by the spec's placement rule (uniform in a square, from
  the stream ``spec.placement_stream``) or at the fixed positions it lists;
* **device ↔ edge latency** — the scenario's ``topology.edge_latency_ms`` draws, plus
  ``base_ms + ms_per_km · distance`` when devices and edge servers have positions, plus a
  per-pair latency the file sets (GraphML device links);
* **attachment** (``grouping: topology``) — ``explicit`` (the file's lists), ``region`` (shares
  → contiguous blocks of device ids by largest remainder, or explicit lists; each region's
  devices round robin over its edge servers in file order), ``nearest`` (lowest latency, ties to
  the lower edge id), ``round_robin``.

Every problem that depends on the number of devices raises :class:`TopologyError` naming the
file and line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hierfl.core import grouping
from hierfl.core.rng import stream
from hierfl.core.topomath import (
    blocks,
    distance_latency_ms,
    pairwise_km,
    round_robin_within,
    split_counts,
    uniform_square,
)
from hierfl.topology.spec import TopologySpec

__all__ = ["TopologyError", "Layout", "check_devices", "layout", "attach", "world_fields"]


class TopologyError(ValueError):
    """A topology that does not fit the scenario (e.g. more edge servers than devices)."""


@dataclass
class Layout:
    """Positions and device ↔ edge latencies of one realisation."""

    edge_latency_ms: np.ndarray           # (N, E)
    device_xy: np.ndarray | None          # (N, 2)
    edge_xy: np.ndarray | None            # (E, 2)


def _where(spec: TopologySpec, key: str) -> str:
    line = spec.line(key)
    return f"{spec.origin}:{line}" if line is not None else spec.origin


def _missing_text(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:10])) + (f" … ({len(ids)} in all)" if len(ids) > 10 else "")


def check_devices(spec: TopologySpec, n: int) -> list[str]:
    """Problems of ``spec`` with ``n`` devices (empty when it fits)."""
    out: list[str] = []
    if spec.num_edges > n:
        out.append(f"{_where(spec, 'edge_servers')}: the topology has {spec.num_edges} edge servers but there are "
                   f"only {n} devices (devices.count); allowed: at most one edge server per device")
    if spec.attach == "explicit":
        listed = [i for i, _ in spec.explicit]
        big = sorted(i for i in listed if i >= n)
        if big:
            out.append(f"{_where(spec, 'devices.explicit')}: device index {big[0]} does not exist: "
                       f"devices.count is {n}, so indices are 0..{n - 1}")
        missing = sorted(set(range(n)) - set(listed))
        if missing:
            out.append(f"{_where(spec, 'devices.explicit')}: devices {_missing_text(missing)} are not attached to any "
                       f"edge server; attach: explicit must list every device 0..{n - 1}")
    if spec.attach == "region" and spec.regions and spec.regions[0].devices is not None:
        listed = [i for r in spec.regions for i in (r.devices or ())]
        big = sorted(i for i in listed if i >= n)
        if big:
            out.append(f"{_where(spec, 'devices.regions')}: device index {big[0]} does not exist: "
                       f"devices.count is {n}, so indices are 0..{n - 1}")
        twice = sorted({i for i in listed if listed.count(i) > 1})
        if twice:
            out.append(f"{_where(spec, 'devices.regions')}: devices {_missing_text(twice)} are in more than one region")
        missing = sorted(set(range(n)) - set(listed))
        if missing:
            out.append(f"{_where(spec, 'devices.regions')}: devices {_missing_text(missing)} are in no region; "
                       f"list every device 0..{n - 1} or give shares")
    if spec.device_xy:
        placed = {i for i, _, _ in spec.device_xy}
        if placed != set(range(n)):
            out.append(f"{_where(spec, 'devices')}: the topology places devices {_missing_text(sorted(placed))} "
                       f"but devices.count is {n}: place every device 0..{n - 1}")
    return out


def _require(spec: TopologySpec, n: int) -> None:
    problems = check_devices(spec, n)
    if problems:
        raise TopologyError("; ".join(problems))


def layout(spec: TopologySpec, n: int, seed: int, drawn_latency_ms: np.ndarray) -> Layout:
    """Positions and the (N, E) device ↔ edge latency matrix (``drawn_latency_ms`` + distance + pairs)."""
    _require(spec, n)
    latency = np.array(drawn_latency_ms, dtype=np.float64, copy=True).reshape(n, spec.num_edges)
    device_xy: np.ndarray | None = None
    if spec.placement is not None:
        side, ox, oy = spec.placement
        device_xy = uniform_square(stream(seed, spec.placement_stream), n, side, (ox, oy))
    elif spec.device_xy:
        device_xy = np.array([[x, y] for _, x, y in sorted(spec.device_xy)], dtype=np.float64)
    edge_xy = None
    if all(e.xy is not None for e in spec.edges):
        edge_xy = np.array([e.xy for e in spec.edges], dtype=np.float64).reshape(spec.num_edges, 2)
    if device_xy is not None and edge_xy is not None:
        latency += distance_latency_ms(pairwise_km(device_xy, edge_xy), spec.latency_base_ms, spec.latency_ms_per_km)
    for i, e, ms in spec.pair_latency_ms:
        latency[i, e] += ms
    return Layout(latency, device_xy, edge_xy)


def attach(spec: TopologySpec, n: int, edge_latency_ms: np.ndarray) -> np.ndarray:
    """Device → edge ids by the spec's own attachment rule."""
    _require(spec, n)
    if spec.attach == "explicit":
        edge_of = np.full(n, -1, dtype=np.int64)
        for i, e in spec.explicit:
            edge_of[i] = e
        return edge_of
    if spec.attach == "region":
        if spec.regions[0].devices is not None:
            group_of = np.full(n, -1, dtype=np.int64)
            for g, rule in enumerate(spec.regions):
                group_of[list(rule.devices or ())] = g
        else:
            group_of = blocks(split_counts(n, [r.weight or 0.0 for r in spec.regions]).tolist())
        return round_robin_within(group_of, [r.edges for r in spec.regions])
    if spec.attach == "nearest":
        return grouping.nearest(edge_latency_ms)
    return grouping.round_robin(n, spec.num_edges)


def world_fields(spec: TopologySpec, placed: Layout) -> dict[str, object]:
    """The optional :class:`~hierfl.core.world.World` fields this topology fills."""
    return {
        "edge_names": [e.name for e in spec.edges],
        "edge_ingress_mbps": np.array([e.ingress_mbps for e in spec.edges], dtype=np.float64),
        "edge_egress_mbps": np.array([e.egress_mbps for e in spec.edges], dtype=np.float64),
        "cloud_ingress_mbps": float(spec.cloud_ingress_mbps),
        "cloud_egress_mbps": float(spec.cloud_egress_mbps),
        "device_xy": placed.device_xy,
        "edge_xy": placed.edge_xy,
        "d2d_link": spec.d2d,
    }
