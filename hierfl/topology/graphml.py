"""GraphML topology files (read with networkx) → the same mapping as the YAML format.

Nodes carry ``kind`` = cloud | edge | router | device; device nodes attach devices explicitly.
Lines in messages come from finding each node's and edge's tag in the text by id (networkx does
not keep positions). docs/howto/traces-topologies.md documents the attribute names.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


from hierfl.topology.fileformat import (
    Position,
    _fail,
    _read_text,
    _validate,
    _with_lines,
    spec_from_mapping,
)
from hierfl.topology.spec import SpecIssue, TopologySpec

__all__ = ["read_graphml"]


_NODE_KEYS = {"cloud": {"kind", "x_km", "y_km", "ingress_mbps", "egress_mbps"},
              "edge": {"kind", "x_km", "y_km", "region", "ingress_mbps", "egress_mbps"},
              "router": {"kind", "x_km", "y_km"},
              "device": {"kind", "index", "x_km", "y_km"}}
_LINK_KEYS = {"bandwidth_mbps", "up_mbps", "down_mbps", "latency_ms", "id"}
_GRAPH_KEYS = {"name", "description", "attach", "regions", "area_km", "origin_x_km", "origin_y_km",
               "latency_base_ms", "latency_ms_per_km", "d2d_latency_ms", "d2d_ms_per_km", "d2d_bandwidth_mbps"}


def _graphml_lines(text: str) -> tuple[dict[str, int], list[tuple[str, str, int]]]:
    nodes: dict[str, int] = {}
    edges: list[tuple[str, str, int]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        for m in re.finditer(r"<node\b[^>]*\bid=\"([^\"]*)\"", line):
            nodes.setdefault(m.group(1), n)
        for m in re.finditer(r"<edge\b[^>]*>", line):
            src = re.search(r"\bsource=\"([^\"]*)\"", m.group(0))
            dst = re.search(r"\btarget=\"([^\"]*)\"", m.group(0))
            if src and dst:
                edges.append((src.group(1), dst.group(1), n))
    return nodes, edges


def _position(attrs: dict[str, Any], where: str, line: int | None, node: str) -> Position | None:
    has = [k in attrs for k in ("x_km", "y_km")]
    if any(has) and not all(has):
        raise _fail(where, line, ("node", node), "give both x_km and y_km, or neither")
    if not all(has):
        return None
    try:
        x, y = float(attrs["x_km"]), float(attrs["y_km"])
    except (TypeError, ValueError):
        raise _fail(where, line, ("node", node), f"x_km and y_km must be numbers, got {attrs['x_km']!r}, "
                                                 f"{attrs['y_km']!r}") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise _fail(where, line, ("node", node), "x_km and y_km must be finite")
    return (x, y)


def _parse_regions(text: str, where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,;]", text))):
        name, sep, share = part.partition("=")
        try:
            out[name.strip()] = float(share)
        except ValueError:
            raise _fail(where, None, ("graph", "regions"),
                        f"expected 'region=share, …', got {text!r}") from None
        if not sep:
            raise _fail(where, None, ("graph", "regions"), f"expected 'region=share, …', got {text!r}")
    return out


def read_graphml(path: Path, where: str) -> TopologySpec:
    """Read and check a GraphML topology file (``where`` names it in messages)."""
    # imported here: only a GraphML topology needs networkx (0.2 CPU s and 16 MB in every run's driver otherwise)
    import networkx as nx  # noqa: PLC0415

    text = _read_text(path, where)
    try:
        graph = nx.read_graphml(path, force_multigraph=True)
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else None
        raise _fail(where, line, (), f"invalid GraphML (XML): {exc}") from None
    except (nx.NetworkXError, ValueError, KeyError) as exc:
        raise _fail(where, None, (), f"invalid GraphML: {exc}") from None
    node_line, edge_lines = _graphml_lines(text)

    def eline(u: str, v: str) -> int | None:
        return next((ln for a, b, ln in edge_lines if {a, b} == {u, v}), None)

    gattrs = {k: v for k, v in graph.graph.items() if k not in ("node_default", "edge_default")}
    unknown = sorted(set(gattrs) - _GRAPH_KEYS)
    if unknown:
        raise _fail(where, None, ("graph",), f"unknown graph attribute(s) {unknown}; allowed: {sorted(_GRAPH_KEYS)}")
    raw: dict[str, Any] = {"edge_servers": [], "routers": [], "links": []}
    device_of: dict[str, int] = {}
    clouds: list[str] = []
    locs: dict[tuple[str | int, ...], int | None] = {}
    for node, attrs in graph.nodes(data=True):
        line = node_line.get(node)
        kind = attrs.get("kind")
        if kind not in _NODE_KEYS:
            raise _fail(where, line, ("node", node), f"node attribute kind must be one of {sorted(_NODE_KEYS)}, "
                                                     f"got {kind!r}")
        extra = sorted(set(attrs) - _NODE_KEYS[kind])
        if extra:
            raise _fail(where, line, ("node", node), f"unknown attribute(s) {extra} for kind={kind}; "
                                                     f"allowed: {sorted(_NODE_KEYS[kind])}")
        pos = _position(attrs, where, line, node)
        entry: dict[str, Any] = {"name": node}
        if pos is not None:
            entry["position_km"] = list(pos)
        for key in ("region", "ingress_mbps", "egress_mbps"):
            if key in attrs:
                entry[key] = attrs[key]
        if kind == "cloud":
            clouds.append(node)
            raw["cloud"] = entry
            locs[("cloud",)] = line
        elif kind == "edge":
            locs.setdefault(("edge_servers",), line)
            locs[("edge_servers", len(raw["edge_servers"]))] = line
            raw["edge_servers"].append(entry)
        elif kind == "router":
            locs[("routers", len(raw["routers"]))] = line
            raw["routers"].append(entry)
        else:
            if not isinstance(attrs.get("index"), int) or attrs["index"] < 0:
                raise _fail(where, line, ("node", node), "a device node needs an integer attribute index >= 0 "
                                                         "(its device number)")
            device_of[node] = attrs["index"]
            locs.setdefault(("devices", "explicit"), line)
            locs.setdefault(("devices",), line)
    if len(clouds) != 1:
        raise _fail(where, None, (), f"a topology needs exactly one node with kind=cloud, found {len(clouds)}")
    kinds = {n: a.get("kind") for n, a in graph.nodes(data=True)}
    device_nodes: list[tuple[int, str, float | None, Position | None]] = []
    linked: set[str] = set()
    for u, v, attrs in graph.edges(data=True):
        line = eline(u, v)
        extra = sorted(set(attrs) - _LINK_KEYS)
        if extra:
            raise _fail(where, line, ("edge", f"{u}-{v}"), f"unknown attribute(s) {extra}; allowed: "
                                                            f"{sorted(_LINK_KEYS - {'id'})}")
        if "device" in (kinds[u], kinds[v]):
            dnode, other = (u, v) if kinds[u] == "device" else (v, u)
            if kinds[other] != "edge" or dnode in linked:
                raise _fail(where, line, ("edge", f"{u}-{v}"), "a device node links to exactly one edge server")
            if set(attrs) - {"latency_ms", "id"}:
                raise _fail(where, line, ("edge", f"{u}-{v}"), "a device link takes only latency_ms (the device's "
                                                              "own bandwidth comes from the scenario's devices:)")
            lat = attrs.get("latency_ms")
            if lat is not None and not (math.isfinite(lat) and lat >= 0):
                raise _fail(where, line, ("edge", f"{u}-{v}", "latency_ms"), f"must be >= 0, got {lat}")
            linked.add(dnode)
            dattrs = graph.nodes[dnode]
            device_nodes.append((device_of[dnode], other, lat,
                                 _position(dattrs, where, node_line.get(dnode), dnode)))
            continue
        locs[("links", len(raw["links"]))] = line
        raw["links"].append({"between": [u, v], **{k: val for k, val in attrs.items() if k != "id"}})
    lonely = sorted(set(device_of) - linked)
    if lonely:
        raise _fail(where, node_line.get(lonely[0]), ("node", lonely[0]), "a device node links to exactly one "
                                                                          "edge server")
    devices: dict[str, Any] = {}
    if "attach" in gattrs:
        devices["attach"] = gattrs["attach"]
    if "regions" in gattrs:
        devices["regions"] = _parse_regions(str(gattrs["regions"]), where)
    if "area_km" in gattrs:
        devices["placement"] = {"area_km": gattrs["area_km"],
                                "origin_km": [gattrs.get("origin_x_km", 0.0), gattrs.get("origin_y_km", 0.0)]}
    lat = {k2: gattrs[k1] for k1, k2 in (("latency_base_ms", "base_ms"), ("latency_ms_per_km", "ms_per_km"))
           if k1 in gattrs}
    if lat:
        devices["latency"] = lat
    d2d = {k2: gattrs[k1] for k1, k2 in (("d2d_latency_ms", "latency_ms"), ("d2d_ms_per_km", "ms_per_km"),
                                         ("d2d_bandwidth_mbps", "bandwidth_mbps")) if k1 in gattrs}
    if d2d:
        devices["d2d"] = d2d
    if devices:
        raw["devices"] = devices
    for key in ("name", "description"):
        if key in gattrs:
            raw[key] = str(gattrs[key])

    def line_of(loc: tuple[str | int, ...]) -> int | None:
        for n in range(len(loc), 0, -1):
            if loc[:n] in locs:
                return locs[loc[:n]]
        return None

    model = _validate(raw, where, line_of)
    try:
        spec = spec_from_mapping(model, where, device_nodes=tuple(sorted(device_nodes)))
        return _with_lines(spec, line_of)
    except SpecIssue as exc:
        raise _fail(where, line_of(exc.loc), exc.loc, exc.message) from None
