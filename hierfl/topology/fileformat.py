"""Topology files: YAML (our format) and GraphML (read with networkx) → :class:`TopologySpec`.

Both formats become the same mapping, validated by :class:`TopologyFile` (unknown keys are
errors) and then checked for meaning (names, link ends, a path to the cloud from every edge
server). Every error names the file and, where it can, the line: YAML nodes carry their marks,
GraphML nodes and edges are found in the text by id. The README documents both formats.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hierfl.config.files import display_path
from hierfl.core.world import D2DLink
from hierfl.topology.spec import EdgeServer, LinkSpec, RegionRule, SpecIssue, TopologySpec, route

__all__ = ["TopologyFile", "TopologyFileError", "load_topology_file", "parse_indices", "spec_from_mapping"]

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
Position = tuple[float, float]
Latency = Field(ge=0, allow_inf_nan=False)


class TopologyFileError(ValueError):
    """A topology file that cannot be used; the message starts with ``file:line:``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CloudNode(_Model):
    """The cloud: a name, an optional position and its shared capacities (null = unlimited)."""

    name: str = Field(default="cloud", min_length=1)
    position_km: Position | None = None
    ingress_mbps: float | None = Field(default=None, gt=0)
    egress_mbps: float | None = Field(default=None, gt=0)


class EdgeServerNode(_Model):
    """An edge server."""

    name: str = Field(min_length=1)
    position_km: Position | None = None
    region: str | None = None
    ingress_mbps: float | None = Field(default=None, gt=0, description="shared by device uploads; null = unlimited")
    egress_mbps: float | None = Field(default=None, gt=0, description="shared by device downloads; null = unlimited")


class RouterNode(_Model):
    """An intermediate node (aggregation switch, metro core): routes, aggregates nothing."""

    name: str = Field(min_length=1)
    position_km: Position | None = None


class LinkEntry(_Model):
    """A link between two nodes: ``bandwidth_mbps`` (both ways) or ``up_mbps`` + ``down_mbps``."""

    between: tuple[str, str]
    bandwidth_mbps: float | None = Field(default=None, gt=0)
    up_mbps: float | None = Field(default=None, gt=0, description="toward the cloud")
    down_mbps: float | None = Field(default=None, gt=0, description="away from the cloud")
    latency_ms: float = Latency

    @model_validator(mode="after")
    def _one_form(self) -> LinkEntry:
        if self.bandwidth_mbps is not None and (self.up_mbps is not None or self.down_mbps is not None):
            raise ValueError("give bandwidth_mbps or up_mbps + down_mbps, not both")
        if self.bandwidth_mbps is None and (self.up_mbps is None or self.down_mbps is None):
            raise ValueError("a link needs bandwidth_mbps, or both up_mbps and down_mbps")
        return self


class Placement(_Model):
    """Devices placed uniformly at random in the square ``origin_km + [0, area_km]²``."""

    area_km: float = Field(gt=0, allow_inf_nan=False)
    origin_km: Position = (0.0, 0.0)


class DistanceLatency(_Model):
    """Extra device ↔ edge one-way latency from distance: ``base_ms + ms_per_km · km``."""

    base_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    ms_per_km: float = Field(default=0.01, ge=0, allow_inf_nan=False)


class D2DDefaults(_Model):
    """Device ↔ device links: ``latency_ms + ms_per_km · km``, bandwidth capped at ``bandwidth_mbps``."""

    latency_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    ms_per_km: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    bandwidth_mbps: float | None = Field(default=None, gt=0)


IndexList = list[int | str]


class DevicesSection(_Model):
    """How devices attach to edge servers."""

    attach: Literal["explicit", "region", "nearest", "round_robin"] | None = None
    explicit: dict[str, IndexList] | None = Field(default=None, description="edge name → device indices")
    regions: dict[str, float | IndexList] | None = Field(default=None, description="region → share or indices")
    placement: Placement | None = None
    latency: DistanceLatency = DistanceLatency()
    d2d: D2DDefaults | None = None


class TopologyFile(_Model):
    """A whole topology file."""

    name: str | None = None
    description: str | None = None
    cloud: CloudNode = CloudNode()
    edge_servers: list[EdgeServerNode] = Field(min_length=1)
    routers: list[RouterNode] = []
    links: list[LinkEntry] = Field(min_length=1)
    devices: DevicesSection = DevicesSection()


def parse_indices(items: list[int | str], loc: tuple[str | int, ...]) -> list[int]:
    """Device indices from ``[0, 3, "5-9"]`` (ranges inclusive); raises :class:`SpecIssue`."""
    out: list[int] = []
    for k, item in enumerate(items):
        if isinstance(item, bool):
            raise SpecIssue((*loc, k), f"not a device index: {item!r}")
        if isinstance(item, int):
            if item < 0:
                raise SpecIssue((*loc, k), f"device indices are >= 0, got {item}")
            out.append(item)
            continue
        m = _RANGE.match(item)
        if not m or int(m.group(1)) > int(m.group(2)):
            raise SpecIssue((*loc, k), f"expected a device index or a range 'a-b' with a <= b, got {item!r}")
        out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
    return out


def _inf(value: float | None) -> float:
    return math.inf if value is None else float(value)


def spec_from_mapping(data: TopologyFile, origin: str, *, device_nodes: tuple[tuple[int, str, float | None,
                      tuple[float, float] | None], ...] = ()) -> TopologySpec:
    """Check a validated file's meaning and build its :class:`TopologySpec` (raises :class:`SpecIssue`).

    ``device_nodes`` are GraphML device nodes: (device index, edge name, link latency or None,
    position or None); they attach devices explicitly.
    """
    cloud = data.cloud
    names: dict[str, tuple[str | int, ...]] = {cloud.name: ("cloud", "name")}
    named = [("edge_servers", k, e.name) for k, e in enumerate(data.edge_servers)] + \
        [("routers", k, r.name) for k, r in enumerate(data.routers)]
    for kind, k, name in named:
        if name in names:
            raise SpecIssue((kind, k, "name"), f"duplicate node name {name!r}")
        names[name] = (kind, k, "name")
    edges = [EdgeServer(e.name, e.position_km, e.region, _inf(e.ingress_mbps), _inf(e.egress_mbps))
             for e in data.edge_servers]
    edge_id = {e.name: k for k, e in enumerate(edges)}
    links: list[LinkSpec] = []
    seen: set[frozenset[str]] = set()
    for k, link in enumerate(data.links):
        a, b = link.between
        for end in (a, b):
            if end not in names:
                raise SpecIssue(("links", k, "between"), f"unknown node {end!r}; known: {sorted(names)}")
        if a == b:
            raise SpecIssue(("links", k, "between"), f"a link needs two different nodes, got {a!r} twice")
        if frozenset((a, b)) in seen:
            raise SpecIssue(("links", k, "between"), f"a second link between {a!r} and {b!r}")
        seen.add(frozenset((a, b)))
        up = link.bandwidth_mbps if link.bandwidth_mbps is not None else link.up_mbps
        down = link.bandwidth_mbps if link.bandwidth_mbps is not None else link.down_mbps
        links.append(LinkSpec(a, b, float(up), float(down), float(link.latency_ms)))  # type: ignore[arg-type]
    edge_links, paths = route(cloud.name, edges, [r.name for r in data.routers], links,
                              [("edge_servers", k, "name") for k in range(len(edges))])

    dev = data.devices
    explicit: list[tuple[int, int]] = []
    if dev.explicit is not None:
        for name, items in dev.explicit.items():
            if name not in edge_id:
                raise SpecIssue(("devices", "explicit", name), f"unknown edge server {name!r}; known: {list(edge_id)}")
            explicit.extend((i, edge_id[name]) for i in parse_indices(items, ("devices", "explicit", name)))
    pair_latency: list[tuple[int, int, float]] = []
    fixed_xy: list[tuple[int, float, float]] = []
    for index, edge_name, latency, xy in device_nodes:
        if edge_name not in edge_id:
            raise SpecIssue(("devices", "explicit"), f"device {index} is linked to {edge_name!r}, not an edge server")
        explicit.append((index, edge_id[edge_name]))
        if latency is not None:
            pair_latency.append((index, edge_id[edge_name], float(latency)))
        if xy is not None:
            fixed_xy.append((index, float(xy[0]), float(xy[1])))
    counts: dict[int, int] = {}
    for i, _ in explicit:
        counts[i] = counts.get(i, 0) + 1
    twice = sorted(i for i, c in counts.items() if c > 1)
    if twice:
        raise SpecIssue(("devices", "explicit"), f"devices attached to more than one edge server: {twice[:10]}")
    if fixed_xy and len(fixed_xy) != len(device_nodes):
        raise SpecIssue(("devices",), "give x_km and y_km on every device node or on none")

    regions: list[RegionRule] = []
    if dev.regions is not None:
        known = {e.region for e in edges if e.region is not None}
        kinds = {isinstance(v, list) for v in dev.regions.values()}
        if len(kinds) > 1:
            raise SpecIssue(("devices", "regions"), "give every region a share (a number) or every region a "
                                                    "list of device indices, not a mix")
        for name, value in dev.regions.items():
            loc = ("devices", "regions", name)
            if name not in known:
                raise SpecIssue(loc, f"no edge server has region {name!r}; regions: {sorted(known)}")
            members = tuple(k for k, e in enumerate(edges) if e.region == name)
            if isinstance(value, list):
                regions.append(RegionRule(name, members, devices=tuple(parse_indices(value, loc))))
            else:
                if not (math.isfinite(value) and value >= 0):
                    raise SpecIssue(loc, f"a region's share must be a finite number >= 0, got {value}")
                regions.append(RegionRule(name, members, weight=float(value)))
        if regions and regions[0].weight is not None:
            total = sum(r.weight or 0.0 for r in regions)
            if abs(total - 1.0) > 1e-6:
                raise SpecIssue(("devices", "regions"), f"region shares must sum to 1, got {total:g}")

    attach = dev.attach
    if attach is None:
        attach = ("explicit" if explicit else "region" if regions else
                  "nearest" if dev.placement is not None or fixed_xy else "round_robin")
    if attach == "explicit" and not explicit:
        raise SpecIssue(("devices", "attach"), "attach: explicit needs devices.explicit (edge name → device indices)")
    if attach == "region" and not regions:
        raise SpecIssue(("devices", "attach"), "attach: region needs devices.regions (region → share or indices)")
    if explicit and attach != "explicit":
        raise SpecIssue(("devices", "explicit"), f"devices.explicit is only used with attach: explicit (got {attach})")
    if regions and attach != "region":
        raise SpecIssue(("devices", "regions"), f"devices.regions is only used with attach: region (got {attach})")
    placement = None
    if dev.placement is not None:
        if fixed_xy:
            raise SpecIssue(("devices", "placement"), "device nodes already have positions; drop placement")
        placement = (float(dev.placement.area_km), *map(float, dev.placement.origin_km))
    if placement is not None or fixed_xy:
        missing = [e.name for e in edges if e.xy is None]
        if missing:
            raise SpecIssue(("devices", "placement"), f"placing devices needs position_km on every edge server; "
                                                      f"missing on {missing}")
    d2d = None
    if dev.d2d is not None:
        d2d = D2DLink(dev.d2d.latency_ms, dev.d2d.ms_per_km, _inf(dev.d2d.bandwidth_mbps))
    return TopologySpec(
        origin=origin, edges=tuple(edges), edge_links=tuple(edge_links), paths=tuple(paths),
        cloud_name=cloud.name, cloud_xy=cloud.position_km, cloud_ingress_mbps=_inf(cloud.ingress_mbps),
        cloud_egress_mbps=_inf(cloud.egress_mbps), attach=attach, explicit=tuple(sorted(explicit)),
        regions=tuple(regions), placement=placement,  # type: ignore[arg-type]
        device_xy=tuple(sorted(fixed_xy)), pair_latency_ms=tuple(sorted(pair_latency)),
        latency_base_ms=dev.latency.base_ms, latency_ms_per_km=dev.latency.ms_per_km, d2d=d2d,
    )


# -- reading files ----------------------------------------------------------------------------------

LineOf = Callable[[tuple[str | int, ...]], int | None]


def _dotted(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(x) for x in loc)


def _fail(where: str, line: int | None, loc: tuple[str | int, ...], message: str) -> TopologyFileError:
    at = f"{where}:{line}" if line is not None else where
    key = f"{_dotted(loc)}: " if loc else ""
    return TopologyFileError(f"{at}: {key}{message}")


def _validate(raw: Any, where: str, line_of: LineOf) -> TopologyFile:
    if not isinstance(raw, dict):
        raise _fail(where, 1, (), f"a topology file is a mapping (cloud, edge_servers, links, …), "
                                  f"got {type(raw).__name__}")
    try:
        return TopologyFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]  # the first problem, with its line; fix and rerun
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith(("function-", "list["))))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (see the README's topology file format for the allowed keys)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif not isinstance(err.get("input"), (dict, list)):
            msg += f" (got {err.get('input')!r})"
        more = len(exc.errors()) - 1
        if more:
            msg += f" [and {more} more problem(s)]"
        raise _fail(where, line_of(loc), loc, msg) from None


def _yaml_line_of(root: yaml.Node | None) -> LineOf:
    def line_of(loc: tuple[str | int, ...]) -> int | None:
        node, line = root, None
        for item in loc:
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == str(item):
                        line, node = key.start_mark.line + 1, value
                        break
                else:
                    break
            elif isinstance(node, yaml.SequenceNode) and isinstance(item, int) and item < len(node.value):
                node = node.value[item]
                line = node.start_mark.line + 1
            else:
                break
        if line is None and root is not None:
            line = root.start_mark.line + 1
        return line
    return line_of


def _read_yaml(path: Path, where: str) -> TopologySpec:
    text = _read_text(path, where)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise _fail(where, mark.line + 1 if mark is not None else None, (), f"invalid YAML: {problem}") from None
    line_of = _yaml_line_of(root)
    model = _validate(raw, where, line_of)
    try:
        return _with_lines(spec_from_mapping(model, where), line_of)
    except SpecIssue as exc:
        raise _fail(where, line_of(exc.loc), exc.loc, exc.message) from None


def _with_lines(spec: TopologySpec, line_of: LineOf) -> TopologySpec:
    keys = ("devices", "devices.explicit", "devices.regions", "devices.placement", "edge_servers")
    lines = tuple((k, ln) for k in keys if (ln := line_of(tuple(k.split(".")))) is not None)
    return TopologySpec(**{**spec.__dict__, "lines": lines})


def _read_text(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyFileError(f"{where}: cannot read the file: {exc}") from None


# -- GraphML ------------------------------------------------------------------------------------------

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


def _read_graphml(path: Path, where: str) -> TopologySpec:
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


@lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int) -> TopologySpec:
    p = Path(path)
    where = display_path(p)
    if p.suffix.lower() in (".graphml", ".xml"):
        return _read_graphml(p, where)
    if p.suffix.lower() in (".yaml", ".yml"):
        return _read_yaml(p, where)
    raise TopologyFileError(f"{where}: unknown topology file type {p.suffix!r}; use .yaml/.yml or .graphml")


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and check a topology file (YAML or GraphML, by extension); cached by path and mtime.

    Raises :class:`TopologyFileError` whose message starts with ``file:line:``.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise TopologyFileError(f"{display_path(p)}: cannot read the file: {exc}") from None
    return _load_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)
