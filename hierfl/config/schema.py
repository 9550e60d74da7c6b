"""The scenario schema: YAML → frozen, typed pydantic models (unknown keys are errors).

Plug-in sections (``data.dataset``, ``data.partition``, ``model``, ``protocol``) are
discriminated unions built from the plug-in registries, so the allowed names appear in the
error message of a misspelled one.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from hierfl.config.base import ConfigModel, rename_alias
from hierfl.config.dists import ConstantDist, Dist
from hierfl.config.dynamics import (
    AlwaysAvailability,
    AvailabilityConfig,
    EventConfig,
    NetworkConfig,
    StragglerConfig,
    TierSpec,
    WaitAll,
)
from hierfl.core.serveropt import ServerOptimizerSection
from hierfl.data import DATASETS, PARTITIONERS, IIDConfig
from hierfl.learn.trainers import TRAINERS, SGDTrainer
from hierfl.models import MODELS
from hierfl.protocols import PROTOCOLS
from hierfl.config.errors import Problem
from hierfl.config.files import resolve_file
from hierfl.core.world import EdgeLink
from hierfl.topology import GENERATORS, TopologySpec, check_devices, load_topology_file
from hierfl.traces import CapacityTraceConfig

__all__ = [
    "DataConfig", "DevicesConfig", "LinkConfig", "TopologyConfig", "TrainingConfig",
    "EvaluationConfig", "StopConfig", "RuntimeConfig", "Scenario",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _require_non_negative(value: Any) -> Any:
    if value.lower_bound() < 0:
        raise ValueError(f"latency must be >= 0; this distribution can give {value.lower_bound():g}")
    return value


def _require_positive(value: Any, what: str) -> Any:
    low = value.lower_bound()
    if low <= 0:
        raise ValueError(f"{what} must be > 0 for every device; this distribution can give {low:g}")
    return value


class DataConfig(ConfigModel):
    """Which dataset to generate or load and how to split it across devices."""

    dataset: DATASETS.union()  # type: ignore[valid-type]
    partition: PARTITIONERS.union() = IIDConfig()  # type: ignore[valid-type]


class DevicesConfig(ConfigModel):
    """How many devices, and the distributions their profiles are drawn from (seeded)."""

    count: PositiveInt
    speed_sps: Dist = Field(default=ConstantDist(value=100.0),
                            description="training throughput, samples per second")
    uplink_mbps: Dist = ConstantDist(value=10.0)
    downlink_mbps: Dist = ConstantDist(value=50.0)
    latency_ms: Dist = Field(default=ConstantDist(value=20.0),
                             description="one-way latency of the device's access link")
    tiers: dict[str, PositiveFloat] | None = Field(
        default=None, description="mix of named tiers by proportion (hierfl/profiles/tiers.yaml); replaces the "
                                  "speed/link distributions")
    custom_tiers: dict[str, TierSpec] = Field(default_factory=dict, description="extra or overriding tier figures")
    compute_sigma: float = Field(default=0.0, ge=0.0,
                                 description="per-device lognormal σ around its tier's GFLOP/s (median kept)")
    jitter_sigma: float = Field(default=0.0, ge=0.0,
                                description="per-task lognormal σ on compute time (mean 1)")
    availability: AvailabilityConfig = AlwaysAvailability()  # type: ignore[valid-type]
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="probability a task fails part-way")

    @model_validator(mode="after")
    def _tiers_or_dists(self) -> DevicesConfig:
        if self.tiers is not None:
            both = sorted({"speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms"} & self.model_fields_set)
            if both:
                raise ValueError(f"devices.tiers sets compute and links; remove {', '.join(both)} "
                                 "(or drop tiers and use the distributions)")
        return self
    capacity_trace: CapacityTraceConfig | None = Field(
        default=None, description="FedScale or CSV capacity trace: overrides speed_sps, uplink_mbps, downlink_mbps")

    @field_validator("speed_sps", "uplink_mbps", "downlink_mbps")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        return _require_positive(value, "this value")

    @field_validator("latency_ms")
    @classmethod
    def _non_negative(cls, value: Any) -> Any:
        return _require_non_negative(value)


class LinkConfig(ConfigModel):
    """A fixed link (edge server ↔ cloud)."""

    uplink_mbps: PositiveFloat = 1000.0
    downlink_mbps: PositiveFloat = 1000.0
    latency_ms: float = Field(default=20.0, ge=0)


_GENERATOR = TypeAdapter(GENERATORS.union())


class TopologyConfig(ConfigModel):
    """Edge servers between devices and the cloud, and how devices are assigned to them.

    With ``file`` (YAML or GraphML) or ``generator`` (star, tree, random_geometric) the topology
    defines the edge servers: ``edge_servers`` is filled in from it (a different explicit value is
    an error) and ``grouping`` defaults to ``topology`` (the file's or generator's attachment rule).
    """

    edge_servers: NonNegativeInt = Field(default=0, description="0 = devices talk to the cloud directly")
    grouping: Literal["random", "round_robin", "nearest", "kmeans", "fedch", "topology"] = Field(
        default="round_robin",
        description="kmeans: k-means on (log compute time per epoch, log time to upload 1 MB), one group per edge; "
                    "fedch: balanced Hungarian device → edge assignment on arrival time (FedCH §2.3); "
                    "topology: as the topology file or generator says")
    edge_latency_ms: Dist = Field(
        default=ConstantDist(value=0.0),
        description="extra one-way latency per (device, edge server) pair; `nearest` picks the lowest",
    )
    edge_cloud: LinkConfig = LinkConfig()
    file: str | None = Field(default=None, description="topology file (YAML or GraphML), e.g. topologies/metro-3edge.yaml")
    generator: GENERATORS.union() | None = Field(default=None)  # type: ignore[valid-type]
    _spec: TopologySpec | None = PrivateAttr(default=None)
    _path: str | None = PrivateAttr(default=None)

    @field_validator("edge_latency_ms")
    @classmethod
    def _non_negative(cls, value: Any) -> Any:
        return _require_non_negative(value)

    @model_validator(mode="before")
    @classmethod
    def _fill_from_topology(cls, data: Any, info: ValidationInfo) -> Any:
        """``edge_servers`` and ``grouping`` default to what the file or generator says."""
        if not isinstance(data, dict) or (data.get("file") is None and data.get("generator") is None):
            return data
        data = dict(data)
        count = None
        try:
            if isinstance(data.get("file"), str):
                count = load_topology_file(resolve_file(data["file"], info.context)).num_edges
            elif data.get("generator") is not None:
                count = _GENERATOR.validate_python(data["generator"]).num_edges
        except (ValueError, ValidationError):
            pass  # reported by the field's own validation
        if data.get("edge_servers") is None and count is not None:
            data["edge_servers"] = count
        if data.get("grouping") is None:
            data["grouping"] = "topology"
        return data

    @field_validator("file")
    @classmethod
    def _readable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            load_topology_file(resolve_file(value, info.context))  # ValueError names the file and line
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> TopologyConfig:
        if self.file is not None and self.generator is not None:
            raise ValueError("give topology.file or topology.generator, not both")
        if self.grouping == "topology" and self.file is None and self.generator is None:
            raise ValueError("grouping: topology needs topology.file or topology.generator")
        count, what = None, ""
        if self.file is not None:
            path = resolve_file(self.file, info.context)
            self._spec, self._path = load_topology_file(path), str(path)
            count, what = self._spec.num_edges, f"the topology file {self.file}"
        elif self.generator is not None:
            count, what = self.generator.num_edges, f"the {self.generator.name} generator"
        if count is not None and count != self.edge_servers:
            raise ValueError(f"edge_servers is {self.edge_servers} but {what} defines {count} edge servers; "
                             "leave edge_servers out (or null) to take the topology's")
        return self

    @field_serializer("file")
    def _absolute(self, value: str | None) -> str | None:
        # the resolved scenario (a run's config.yaml) names the file it read, so it runs again from anywhere
        return self._path if self._path is not None else value

    def topology_spec(self, num_devices: int, seed: int) -> TopologySpec | None:
        """The file's or generator's topology (None for the plain ``edge_servers`` model)."""
        if self.generator is not None:
            link = EdgeLink(self.edge_cloud.uplink_mbps, self.edge_cloud.downlink_mbps, self.edge_cloud.latency_ms)
            return self.generator.generate(num_devices, seed, link)
        if self.file is not None:
            if self._spec is None:  # built without validation (model_construct): read it now
                self._spec = load_topology_file(resolve_file(self.file))
            return self._spec
        return None

    def check(self, num_devices: int) -> list[Problem]:
        """Problems that depend on the number of devices (explicit indices, more edges than devices)."""
        if self.file is not None and self._spec is not None:
            return [Problem("topology.file", msg) for msg in check_devices(self._spec, num_devices)]
        if self.generator is not None and self.generator.num_edges > num_devices:
            return [Problem("topology.generator", f"the {self.generator.name} generator makes "
                            f"{self.generator.num_edges} edge servers but there are only {num_devices} devices "
                            "(devices.count); allowed: at most one edge server per device")]
        return []


class TrainingConfig(ConfigModel):
    """Local training on each device: minibatch SGD."""

    epochs: PositiveInt | None = None
    steps: PositiveInt | None = None
    batch_size: PositiveInt | None = Field(default=32, description="null = full batch (FedSGD)")
    lr: PositiveFloat = 0.01
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    optimizer: Literal["sgd"] = "sgd"
    trainer: TRAINERS.union() = Field(  # type: ignore[valid-type]
        default=SGDTrainer(), description="local trainer plug-in: sgd, fedprox (mu), scaffold")

    @model_validator(mode="before")
    @classmethod
    def _local_steps_alias(cls, data: Any) -> Any:
        # `local_steps` (the name ARCHITECTURE.md's example uses) is `steps`
        return rename_alias(data, "local_steps", "steps")

    @model_validator(mode="after")
    def _one_budget(self) -> TrainingConfig:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("set either epochs or steps, not both")
        return self

    @property
    def local_epochs(self) -> int | None:
        """Epochs per job (1 when neither epochs nor steps is set)."""
        return self.epochs if self.epochs is not None or self.steps is not None else 1


class EvaluationConfig(ConfigModel):
    """When the global model is evaluated on the held-out test set."""

    every_s: PositiveFloat | None = Field(default=None, description="null = only at start and end")
    target_accuracy: float | None = Field(default=None, gt=0.0, le=1.0)


class StopConfig(ConfigModel):
    """When the run ends: whichever limit is reached first."""

    virtual_time_s: PositiveFloat | None = None
    rounds: PositiveInt | None = Field(default=None, description="cloud aggregations")
    target_accuracy: float | None = Field(default=None, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _some_limit(self) -> StopConfig:
        if self.virtual_time_s is None and self.rounds is None:
            raise ValueError("set stop.virtual_time_s or stop.rounds (a run needs a bound)")
        return self


class RuntimeConfig(ConfigModel):
    """Where the emulation runs. Results do not depend on any of these settings."""

    executor: Literal["ray", "local"] = "ray"
    workers: PositiveInt | Literal["auto"] = "auto"
    address: str | None = Field(default=None, description="an existing Ray cluster, e.g. 'auto' or 'ray://host:10001'")
    torch_threads: PositiveInt = 1


class Scenario(ConfigModel):
    """A complete, validated scenario."""

    name: str
    seed: NonNegativeInt = 0
    data: DataConfig
    model: MODELS.union()  # type: ignore[valid-type]
    devices: DevicesConfig
    topology: TopologyConfig = TopologyConfig()
    protocol: PROTOCOLS.union()  # type: ignore[valid-type]
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    stop: StopConfig
    runtime: RuntimeConfig = RuntimeConfig()
    events: list[EventConfig] = Field(default_factory=list, description="changes at given virtual times")
    network: NetworkConfig = NetworkConfig()
    straggler: StragglerConfig = WaitAll()  # type: ignore[valid-type]
    server_optimizer: ServerOptimizerSection = Field(
        default=ServerOptimizerSection(), description="optimizer of the cloud and edge aggregations (fedavg, η = 1)")
    versions: dict[str, str] | None = Field(
        default=None, description="informational: package versions recorded in a run's config.yaml"
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-' only (it names the run directory)")
        return value
