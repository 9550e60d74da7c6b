"""Scenario sections of the network: ``topology`` (edge servers, grouping, edge-cloud link, topology
file or generator, device graph) and ``network`` (how transfers share links)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from hierfl.config.base import ConfigModel
from hierfl.config.files import resolve_file
from hierfl.devices import ConstantDist, Dist
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.scenario.population import _require_non_negative
from hierfl.topology import GENERATORS
from hierfl.topology.devgraph import DEVICE_GRAPHS
from hierfl.topology.grouping import FROM_TOPOLOGY, GROUPINGS, GroupingConfig


class LinkConfig(ConfigModel):
    """A fixed link (edge server ↔ cloud)."""

    uplink_mbps: PositiveFloat = Field(default=1000.0, description="edge server → cloud bandwidth, Mbit/s")
    downlink_mbps: PositiveFloat = Field(default=1000.0, description="cloud → edge server bandwidth, Mbit/s")
    latency_ms: float = Field(default=20.0, ge=0, description="one-way latency of the link, ms")


_GENERATORS: dict[int, TypeAdapter[Any]] = {}


def _generator_adapter() -> TypeAdapter[Any]:
    """A validator of ``topology.generator`` alone, as registered now (a plug-in's generator included)."""
    from hierfl.config import late

    gen = late.generation()
    if gen not in _GENERATORS:
        _GENERATORS.clear()
        _GENERATORS[gen] = TypeAdapter(GENERATORS.union())
    return _GENERATORS[gen]


class TopologyConfig(ConfigModel):
    """Edge servers between devices and the cloud, and how devices are assigned to them.

    With ``file`` (YAML or GraphML) or ``generator`` (star, tree, random_geometric) the topology
    defines the edge servers: ``edge_servers`` is filled in from it (a different explicit value is
    an error; a file's count is filled in by the loader, which reads the file) and ``grouping``
    defaults to ``topology`` (the file's or generator's attachment rule).
    """

    edge_servers: NonNegativeInt | None = Field(
        default=0, description="0 = devices talk to the cloud directly; null = as topology.file says; a "
                               "serverless protocol (no server in the data path) refuses more than 0 without a "
                               "topology file or generator")
    grouping: GROUPINGS.name_field() = Field(  # type: ignore[valid-type]
        default="round_robin",
        description="a registered grouping (hierfl.topology.grouping): round_robin, random, nearest, kmeans "
                    "(similar devices together), topology (as the topology file or generator says), or one "
                    f"a method adds; registered: {', '.join(GROUPINGS.names())}")
    edge_latency_ms: Dist = Field(
        default=ConstantDist(value=0.0),
        description="extra one-way latency per (device, edge server) pair; `nearest` picks the lowest",
    )
    edge_cloud: LinkConfig = LinkConfig()
    file: str | None = Field(default=None, description="topology file (YAML or GraphML), e.g. topologies/metro-3edge.yaml")
    generator: GENERATORS.union() | None = Field(default=None, description="a generated topology: star, tree, random_geometric")  # type: ignore[valid-type]
    device_graph: DEVICE_GRAPHS.union() | None = Field(  # type: ignore[valid-type]
        default=None, description="device-to-device graph of serverless protocols: ring, torus, "
                                  "random_geometric, erdos_renyi, k_regular, small_world or an explicit edge list")
    _path: str | None = PrivateAttr(default=None)

    @field_validator("edge_latency_ms")
    @classmethod
    def _non_negative(cls, value: Any) -> Any:
        return _require_non_negative(value)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_topology(cls, data: Any) -> Any:
        """``grouping`` defaults to the topology's rule; ``edge_servers`` to the generator's count."""
        if not isinstance(data, dict) or (data.get("file") is None and data.get("generator") is None):
            return data
        data = dict(data)
        if data.get("edge_servers") is None and data.get("file") is None:
            try:
                data["edge_servers"] = _generator_adapter().validate_python(data["generator"]).num_edges
            except ValidationError:
                pass  # reported by the field's own validation
        if data.get("edge_servers") is None:
            data["edge_servers"] = None  # the file's count: filled in by the loader (it reads the file)
        if data.get("grouping") is None:
            data["grouping"] = FROM_TOPOLOGY
        return data

    @field_validator("file")
    @classmethod
    def _exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            resolve_file(value, info.context)  # ValueError lists the places tried; parsed later, once
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> TopologyConfig:
        if self.file is not None and self.generator is not None:
            raise ValueError("give topology.file or topology.generator, not both")
        if self.grouper.needs_topology and self.file is None and self.generator is None:
            raise ValueError(f"grouping: {self.grouping} needs topology.file or topology.generator")
        if self.edge_servers is None and self.file is None:
            raise ValueError("edge_servers: null takes the count of topology.file; without one give a number")
        if self.file is not None:
            self._path = str(resolve_file(self.file, info.context))
        elif self.generator is not None and self.generator.num_edges != self.edge_servers:
            raise ValueError(f"edge_servers is {self.edge_servers} but the {self.generator.name} generator defines "
                             f"{self.generator.num_edges} edge servers; leave edge_servers out (or null) to take "
                             "the topology's")
        return self

    @field_serializer("file")
    def _absolute(self, value: str | None) -> str | None:
        # the resolved scenario (a run's config.yaml) names the file it read, so it runs again from anywhere
        return self._path if self._path is not None else value

    @property
    def path(self) -> str | None:
        """The resolved topology file (None without one)."""
        if self.file is not None and self._path is None:  # built without validation (model_construct)
            self._path = str(resolve_file(self.file))
        return self._path

    @property
    def grouper(self) -> GroupingConfig:
        """The grouping plug-in named by ``grouping``."""
        return GROUPINGS.get(self.grouping).model_validate({"name": self.grouping})  # type: ignore[no-any-return]


class NetworkConfig(ConfigModel):
    """How transfers share links."""

    contention: bool = Field(
        default=True, description="transfers sharing a finite-capacity link share it max-min fairly; "
                                  "false = every transfer runs at its path's bottleneck as if alone")
    # shared capacities (Mbps); null = as the topology file or generator says (unlimited without one)
    cloud_ingress_mbps: PositiveFloat | None = Field(
        default=None, description="capacity shared by every transfer into the cloud")
    cloud_egress_mbps: PositiveFloat | None = Field(
        default=None, description="capacity shared by every transfer out of the cloud")
    edge_ingress_mbps: PositiveFloat | None = Field(
        default=None, description="per edge server: capacity shared by its devices' uploads")
    edge_egress_mbps: PositiveFloat | None = Field(
        default=None, description="per edge server: capacity shared by its downloads to devices")
