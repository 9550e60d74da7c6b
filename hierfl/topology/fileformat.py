"""Topology files: the YAML format and the checks shared with GraphML → :class:`TopologySpec`.

Both formats become the same mapping, validated by :class:`TopologyFile` (unknown keys are
errors) and then checked for meaning (names, link ends, a path to the cloud from every edge
server) by :func:`spec_from_mapping`. Every error names the file and, where it can, the line: YAML
nodes carry their marks (GraphML: :mod:`hierfl.topology.graphml`). docs/howto/traces-topologies.md documents both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hierfl.core.world import D2DLink
from hierfl.topology.spec import EdgeServer, LinkSpec, RegionRule, SpecIssue, TopologySpec, route

__all__ = ["TopologyFile", "TopologyFileError", "parse_indices", "spec_from_mapping", "read_yaml"]

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
            msg = "unknown key (docs/howto/traces-topologies.md describes the topology file format)"
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


def read_yaml(path: Path, where: str) -> TopologySpec:
    """Read and check a YAML topology file (``where`` names it in messages)."""
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
