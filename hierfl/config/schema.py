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
    field_validator,
    model_validator,
)

from hierfl.config.base import ConfigModel
from hierfl.config.dists import ConstantDist, Dist
from hierfl.core.serveropt import ServerOptimizerSection
from hierfl.data import DATASETS, PARTITIONERS, IIDConfig
from hierfl.learn.trainers import TRAINERS, SGDTrainer
from hierfl.models import MODELS
from hierfl.protocols import PROTOCOLS

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


class TopologyConfig(ConfigModel):
    """Edge servers between devices and the cloud, and how devices are assigned to them."""

    edge_servers: NonNegativeInt = Field(default=0, description="0 = devices talk to the cloud directly")
    grouping: Literal["random", "round_robin", "nearest", "kmeans"] = Field(
        default="round_robin",
        description="kmeans: k-means on (log compute time per epoch, log time to upload 1 MB), one group per edge")
    edge_latency_ms: Dist = Field(
        default=ConstantDist(value=0.0),
        description="extra one-way latency per (device, edge server) pair; `nearest` picks the lowest",
    )
    edge_cloud: LinkConfig = LinkConfig()

    @field_validator("edge_latency_ms")
    @classmethod
    def _non_negative(cls, value: Any) -> Any:
        return _require_non_negative(value)


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
