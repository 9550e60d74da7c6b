"""Device–device graphs (``topology.device_graph``): who may talk to whom in serverless protocols.

Each generator is a plug-in config registered by its YAML name; :meth:`DeviceGraphConfig.build`
returns a :class:`~hierfl.core.graphs.DeviceGraph` over the scenario's ``N`` devices, drawn (for the
random ones) from the stream ``topology.device_graph``. ``link`` optionally sets one bandwidth and
latency for every edge; ``edges`` lists the edges by hand, each with its own. A link without them
takes the world's device-to-device rule: bandwidth ``min(uplink_i, downlink_j)`` (capped by a
topology's ``d2d_link``), latency ``latency_i + latency_j`` (or the topology's distance rule).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import (
    Field,
    PositiveInt,
    PrivateAttr,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from hierfl.config.base import ConfigModel
from hierfl.config.files import display_path, read_cached, resolve_file
from hierfl.config.registry import Registry
from hierfl.config.yamlsafe import load_yaml
from hierfl.core import graphs
from hierfl.core.graphs import DeviceGraph
from hierfl.core.rng import stream

__all__ = ["DEVICE_GRAPHS", "DeviceGraphConfig", "EdgeEntry", "GraphLink"]

DEVICE_GRAPHS = Registry("device graph")
STREAM = "topology.device_graph"


class GraphLink(ConfigModel):
    """Bandwidth and latency of a device-to-device link of the graph (null: the world's rule)."""

    bandwidth_mbps: float | None = Field(default=None, gt=0, description="capacity of the link, Mbit/s per direction "
                                         "(null: min(uplink of the sender, downlink of the receiver))")
    latency_ms: float | None = Field(default=None, ge=0, description="one-way latency of the link, ms (null: the "
                                     "two devices' access latencies added, or the topology's device-to-device rule)")


class DeviceGraphConfig(ConfigModel):
    """Keys every device graph takes."""

    # whether the graph has no edges at all (every device alone): a protocol that needs edges refuses it
    no_edges: ClassVar[bool] = False

    name: str
    link: GraphLink = Field(default=GraphLink(), description="bandwidth and latency of every edge (null values: "
                            "the world's device-to-device rule)")

    def problems(self, n: int) -> list[tuple[str, str, object]]:
        """What does not fit ``n`` devices: ``(key, message, value)`` triples (none by default)."""
        return []

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """The graph's edges for ``n`` devices (without per-link values)."""
        raise NotImplementedError

    def build(self, n: int, seed: int) -> DeviceGraph:
        """The graph over ``n`` devices, with ``link`` set on every edge when it sets anything."""
        g = self.edges_for(n, seed)
        if self.link.bandwidth_mbps is None and self.link.latency_ms is None and not g.links:
            return g
        bw = math.inf if self.link.bandwidth_mbps is None else float(self.link.bandwidth_mbps)
        lat = math.nan if self.link.latency_ms is None else float(self.link.latency_ms)
        links = {e: g.links.get(e, (bw, lat)) for e in g.edges}
        return DeviceGraph(g.n, g.edges, links)


@DEVICE_GRAPHS.register
class RingGraph(DeviceGraphConfig):
    """``ring``: device i linked to i ± 1 (mod N)."""

    name: Literal["ring"] = "ring"

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """The cycle over ``n`` devices."""
        return graphs.ring(n)


@DEVICE_GRAPHS.register
class EmptyGraph(DeviceGraphConfig):
    """``empty``: no edges — every device learns alone (the no-cooperation baseline of a serverless
    protocol; one that is only itself when devices mix refuses it)."""

    name: Literal["empty"] = "empty"
    no_edges: ClassVar[bool] = True

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """``n`` isolated devices."""
        return DeviceGraph(n, ())


@DEVICE_GRAPHS.register
class TorusGraph(DeviceGraphConfig):
    """``torus``: a ``rows × cols`` grid with wrap-around (``rows · cols`` = devices.count)."""

    name: Literal["torus"] = "torus"
    rows: PositiveInt = Field(description="rows of the grid; devices.count must be a multiple of it")

    @classmethod
    def example(cls) -> TorusGraph:
        """A minimal valid config (conformance tests)."""
        return cls(rows=2)

    def problems(self, n: int) -> list[tuple[str, str, object]]:
        """``rows`` must divide N."""
        if n % self.rows:
            return [("rows", f"must divide devices.count ({n}); allowed: a divisor of {n}", self.rows)]
        return []

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """Node ``r·cols + c`` linked to its four grid neighbours."""
        return graphs.torus(self.rows, n // self.rows)


@DEVICE_GRAPHS.register
class RandomGeometricGraph(DeviceGraphConfig):
    """``random_geometric``: devices uniform in the unit square, linked when closer than ``radius``."""

    name: Literal["random_geometric"] = "random_geometric"
    radius: float = Field(gt=0, le=1.5, description="link radius in units of the square's side")

    @classmethod
    def example(cls) -> RandomGeometricGraph:
        """A minimal valid config (conformance tests)."""
        return cls(radius=0.5)

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """Positions from the stream ``topology.device_graph``."""
        return graphs.random_geometric(n, self.radius, stream(seed, STREAM))[0]


@DEVICE_GRAPHS.register
class ErdosRenyiGraph(DeviceGraphConfig):
    """``erdos_renyi``: every pair of devices linked with probability ``p``."""

    name: Literal["erdos_renyi"] = "erdos_renyi"
    p: float = Field(gt=0, le=1, description="probability of each edge")

    @classmethod
    def example(cls) -> ErdosRenyiGraph:
        """A minimal valid config (conformance tests)."""
        return cls(p=0.5)

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """Pairs drawn from the stream ``topology.device_graph``."""
        return graphs.erdos_renyi(n, self.p, stream(seed, STREAM))


@DEVICE_GRAPHS.register
class KRegularGraph(DeviceGraphConfig):
    """``k_regular``: each device linked to its ``k/2`` nearest ring neighbours on each side."""

    name: Literal["k_regular"] = "k_regular"
    k: int = Field(ge=2, description="degree of every device (even, below devices.count)")

    @classmethod
    def example(cls) -> KRegularGraph:
        """A minimal valid config (conformance tests)."""
        return cls(k=2)

    def problems(self, n: int) -> list[tuple[str, str, object]]:
        """``k`` even and below N."""
        if self.k % 2 or self.k >= n:
            return [("k", f"must be even and below devices.count ({n}); allowed: 2, 4, … < {n}", self.k)]
        return []

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """The circulant graph."""
        return graphs.k_regular(n, self.k)


@DEVICE_GRAPHS.register
class SmallWorldGraph(KRegularGraph):
    """``small_world``: Watts–Strogatz, the ``k_regular`` graph with each edge rewired with probability ``beta``."""

    name: Literal["small_world"] = "small_world"  # type: ignore[assignment]
    k: int = Field(default=4, ge=2, description="degree before rewiring (even, below devices.count)")
    beta: float = Field(default=0.1, ge=0, le=1, description="probability of rewiring each edge")

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """Rewiring draws from the stream ``topology.device_graph``."""
        return graphs.small_world(n, self.k, self.beta, stream(seed, STREAM))


class EdgeEntry(GraphLink):
    """One edge of an explicit graph, with its own link values (null: ``link``'s, then the world's rule)."""

    a: int = Field(ge=0, description="one end (device id)")
    b: int = Field(ge=0, description="the other end (device id)")


@DEVICE_GRAPHS.register
class EdgeListGraph(DeviceGraphConfig):
    """``edges``: the edges given one by one, each with optional bandwidth and latency."""

    name: Literal["edges"] = "edges"
    edges: list[EdgeEntry] = Field(min_length=1, description="the edges: {a, b, bandwidth_mbps, latency_ms}")

    @classmethod
    def example(cls) -> EdgeListGraph:
        """A minimal valid config (conformance tests)."""
        return cls(edges=[EdgeEntry(a=0, b=1)])

    def problems(self, n: int) -> list[tuple[str, str, object]]:
        """Ends within 0..N-1, no self-loops, no edge twice."""
        out: list[tuple[str, str, object]] = []
        seen: set[tuple[int, int]] = set()
        for k, e in enumerate(self.edges):
            pair = (min(e.a, e.b), max(e.a, e.b))
            if max(pair) >= n or e.a == e.b:
                out.append((f"edges.{k}", f"ends must be two different devices; allowed: 0..{n - 1}", [e.a, e.b]))
            elif pair in seen:
                out.append((f"edges.{k}", "the same edge is given twice", [e.a, e.b]))
            seen.add(pair)
        return out

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """The listed edges, with each one's own link values where it sets them."""
        links: dict[tuple[int, int], tuple[float, float]] = {}
        for e in self.edges:
            bw = e.bandwidth_mbps if e.bandwidth_mbps is not None else self.link.bandwidth_mbps
            lat = e.latency_ms if e.latency_ms is not None else self.link.latency_ms
            if bw is not None or lat is not None:
                links[(min(e.a, e.b), max(e.a, e.b))] = (math.inf if bw is None else float(bw),
                                                         math.nan if lat is None else float(lat))
        pairs = sorted({(min(e.a, e.b), max(e.a, e.b)) for e in self.edges})
        return DeviceGraph(n, tuple(pairs), links)


def _number(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{where}: not a number: {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{where}: must be a finite number >= 0, got {value!r}")
    return x


def _read_graph(path: Path) -> tuple[int | None, list[tuple[int, int, float | None, float | None]]]:
    """``(nodes or None, [(a, b, bandwidth_mbps, latency_ms)])`` of a graph file (YAML edge list or GraphML)."""
    where = display_path(path)
    if path.suffix.lower() in (".graphml", ".xml"):
        import networkx as nx  # noqa: PLC0415 (only a GraphML device graph needs it)

        try:
            g = nx.read_graphml(path)
        except Exception as exc:  # noqa: BLE001 (any parse error is the file's problem)
            raise ValueError(f"{where}: not a readable GraphML file: {exc}") from None
        try:
            ids = {node: int(node) for node in g.nodes}
        except ValueError:
            raise ValueError(f"{where}: node ids must be device numbers 0..N-1") from None
        edges = [(ids[u], ids[v], _number(d.get("bandwidth_mbps"), f"{where}: edge {u}-{v} bandwidth_mbps"),
                  _number(d.get("latency_ms"), f"{where}: edge {u}-{v} latency_ms")) for u, v, d in g.edges(data=True)]
        return len(ids), edges
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"{where}: unknown device graph file type {path.suffix!r}; use .yaml/.yml or .graphml")
    raw = load_yaml(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("edges"), list):
        raise ValueError(f"{where}: a device graph file is a mapping with a list `edges` of {{a, b}} entries")
    extra = set(raw) - {"nodes", "edges"}
    if extra:
        raise ValueError(f"{where}: unknown keys {sorted(extra)}; allowed: nodes, edges")
    out = []
    for k, e in enumerate(raw["edges"]):
        if not isinstance(e, dict) or not {"a", "b"} <= set(e) or set(e) - {"a", "b", "bandwidth_mbps", "latency_ms"}:
            raise ValueError(f"{where}: edges.{k}: an edge is {{a, b, bandwidth_mbps, latency_ms}}, got {e!r}")
        a, b = e["a"], e["b"]
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (a, b)):
            raise ValueError(f"{where}: edges.{k}: ends must be device numbers >= 0, got {a!r}, {b!r}")
        out.append((a, b, _number(e.get("bandwidth_mbps"), f"{where}: edges.{k}.bandwidth_mbps"),
                    _number(e.get("latency_ms"), f"{where}: edges.{k}.latency_ms")))
    nodes = raw.get("nodes")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int)):
        raise ValueError(f"{where}: nodes must be a number of devices, got {nodes!r}")
    return nodes, out


@DEVICE_GRAPHS.register
class FileGraph(DeviceGraphConfig):
    """``file``: the edges read from a file — a YAML edge list (``nodes``, ``edges: [{a, b, bandwidth_mbps,
    latency_ms}]``) or GraphML (nodes numbered 0..N-1, edge attributes ``bandwidth_mbps``, ``latency_ms``)."""

    name: Literal["file"] = "file"
    path: str = Field(description="the graph file (.yaml/.yml edge list or .graphml), e.g. topologies/ring6.yaml")
    _resolved: str | None = PrivateAttr(default=None)

    @classmethod
    def example(cls) -> FileGraph:
        """A minimal valid config (conformance tests): the shipped six-node file."""
        return cls.model_validate({"name": "file", "path": str(Path(__file__).resolve().parents[2] / "topologies"
                                                              / "ring6-d2d.yaml")})

    @field_validator("path")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        resolve_file(value, info.context)  # ValueError lists the places tried
        return value

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> FileGraph:
        self._resolved = str(resolve_file(self.path, info.context))
        return self

    @field_serializer("path")
    def _absolute(self, value: str) -> str:
        # the resolved scenario (a run's config.yaml) names the file it read, so it runs again from anywhere
        return self._resolved if self._resolved is not None else value

    def _parsed(self) -> tuple[int | None, list[tuple[int, int, float | None, float | None]]]:
        return read_cached(self._resolved or self.path, _read_graph)

    def problems(self, n: int) -> list[tuple[str, str, object]]:
        """The file must parse, name devices 0..N-1 only, and have no self-loop or repeated edge."""
        try:
            nodes, edges = self._parsed()
        except (OSError, ValueError) as exc:
            return [("path", str(exc), self.path)]
        out: list[tuple[str, str, object]] = []
        if nodes is not None and nodes != n:
            out.append(("path", f"the file has {nodes} nodes but devices.count is {n}; allowed: {n}", self.path))
        seen: set[tuple[int, int]] = set()
        for a, b, _, _ in edges:
            pair = (min(a, b), max(a, b))
            if a == b or pair[1] >= n:
                out.append(("path", f"edge {a}-{b}: ends must be two different devices 0..{n - 1}", self.path))
            elif pair in seen:
                out.append(("path", f"edge {a}-{b} is given twice", self.path))
            seen.add(pair)
        return out

    def edges_for(self, n: int, seed: int) -> DeviceGraph:
        """The file's edges, with each one's own link values where it sets them (else ``link``'s)."""
        links: dict[tuple[int, int], tuple[float, float]] = {}
        pairs = set()
        for a, b, bw, lat in self._parsed()[1]:
            pair = (min(a, b), max(a, b))
            pairs.add(pair)
            bw = bw if bw is not None else self.link.bandwidth_mbps
            lat = lat if lat is not None else self.link.latency_ms
            if bw is not None or lat is not None:
                links[pair] = (math.inf if bw is None else float(bw), math.nan if lat is None else float(lat))
        return DeviceGraph(n, tuple(sorted(pairs)), links)
