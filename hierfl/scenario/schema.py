"""The scenario schema: YAML → frozen, typed pydantic models (unknown keys are errors).

The top of the config layers: it assembles the sections from the plug-in registries. Every
open set — datasets, partitions, models, protocols, trainers, server optimizers, straggler
policies, groupings, topology generators, availability models, event kinds, distributions,
executors — is a discriminated union (or, for groupings and executors, a registered name) built
from its :class:`~hierfl.config.registry.Registry`, so the allowed names appear in the error
message of a misspelled one and a new plug-in needs no edit here. Validation reads no file: a
file-valued key is only resolved (it must exist); files are parsed by the load-time checks
(:mod:`hierfl.scenario.checks`) and the builders, once each.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, NonNegativeInt, field_validator

from hierfl.channels.config import ChannelsSection
from hierfl.config.base import ConfigModel
from hierfl.dynamics import event_entry_field, event_entry_model
from hierfl.energy.config import EnergyConfig
from hierfl.scenario.serveropt import ServerOptimizerSection
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.models import MODELS
from hierfl.policies.straggler import default_policy, device_policy_field
from hierfl.privacy.config import PrivacySection
from hierfl.protocols import PROTOCOLS
from hierfl.robust.config import AggregationSection
from hierfl.scenario.nonfinite import NonFiniteConfig
from hierfl.scenario.servers import ServersConfig
from hierfl.subprotocol.config import SubProtocolSection
from hierfl.scenario.learning import EvaluationConfig as EvaluationConfig
from hierfl.scenario.learning import StopConfig as StopConfig
from hierfl.scenario.learning import TrainingConfig as TrainingConfig
from hierfl.scenario.output import LIST_LIMIT as LIST_LIMIT
from hierfl.scenario.output import TRACE_AUTO_COUNTER_S as TRACE_AUTO_COUNTER_S
from hierfl.scenario.output import TRACE_AUTO_DEVICES as TRACE_AUTO_DEVICES
from hierfl.scenario.output import OutputConfig as OutputConfig
from hierfl.scenario.output import TraceDevices as TraceDevices
from hierfl.scenario.population import DataConfig as DataConfig
from hierfl.scenario.population import DevicesConfig as DevicesConfig
from hierfl.scenario.population import LabelNoiseConfig as LabelNoiseConfig
from hierfl.scenario.population import PublicDataConfig as PublicDataConfig
from hierfl.scenario.runtime import CheckpointConfig as CheckpointConfig
from hierfl.scenario.runtime import RuntimeConfig as RuntimeConfig
from hierfl.scenario.topology import LinkConfig as LinkConfig
from hierfl.scenario.topology import NetworkConfig as NetworkConfig
from hierfl.scenario.topology import TopologyConfig as TopologyConfig

__all__ = [
    "DataConfig", "LabelNoiseConfig", "PublicDataConfig", "DevicesConfig", "LinkConfig", "TopologyConfig", "TrainingConfig", "EvaluationConfig",
    "StopConfig", "RuntimeConfig", "NetworkConfig", "EventConfig", "Scenario",
]

EventConfig: Any = event_entry_model()
"""One entry of ``events:`` (``at_s`` plus exactly one registered event kind)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")



class Scenario(ConfigModel):
    """A complete, validated scenario."""

    name: str = Field(description="names the run directory (letters, digits, . _ -); default: the file's stem")
    plugins: list[str] = Field(
        default_factory=list,
        description="plug-ins loaded before the scenario is validated: .py files (relative to the scenario file) "
                    "or module names; recorded resolved (absolute paths), with --plugin's and plugins='s "
                    "(docs/howto/extend.md)")
    seed: NonNegativeInt = Field(default=0, description="the only source of randomness; --seed overrides")
    data: DataConfig
    model: MODELS.union() = Field(description="the model plug-in")  # type: ignore[valid-type]
    models: dict[str, MODELS.union()] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="per-device model heterogeneity: a model per device tier (keys: tiers of devices.tiers) that "
                    "replaces `model` on that tier's devices, with its own parameter layout and its own FLOPs in the "
                    "time model; a protocol that averages weights refuses layouts that differ from `model`'s. "
                    "Empty (default): every device runs `model`")
    devices: DevicesConfig
    topology: TopologyConfig = TopologyConfig()
    protocol: PROTOCOLS.union() = Field(description="the protocol plug-in")  # type: ignore[valid-type]
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    stop: StopConfig
    runtime: RuntimeConfig = RuntimeConfig()
    events: list[event_entry_field()] = Field(default_factory=list, description="changes at given virtual times")  # type: ignore[valid-type]
    network: NetworkConfig = NetworkConfig()
    channels: ChannelsSection = Field(
        default=ChannelsSection(), description="what a model message becomes on each link direction (a transfer "
        "channel: fp16, bf16, …): its bytes, its encode/decode work and its precision (none everywhere)")
    servers: ServersConfig = Field(default=ServersConfig(), description="how fast the cloud and the edge servers "
                                   "run server tasks (a protocol's own computation at a server: fine-tuning, a "
                                   "generator, a matching)")
    straggler: device_policy_field() = Field(default=default_policy(), description="policy of the protocol's synchronous device rounds, at the aggregation points it declares (cloud: its round over edge servers)")  # type: ignore[valid-type]
    server_optimizer: ServerOptimizerSection = Field(
        default=ServerOptimizerSection(), description="optimizer of the cloud and edge aggregations (plain averaging by default)")
    aggregation: AggregationSection = Field(
        default=AggregationSection(), description="Byzantine-robust rule of the cloud and edge aggregations (mean)")
    subprotocol: SubProtocolSection = Field(
        default=SubProtocolSection(), description="extra message rounds between an aggregation point and its senders "
                                                  "before it aggregates, per tier (none): docs/howto/extend.md")
    privacy: PrivacySection = Field(
        default=PrivacySection(), description="differential privacy of the cloud's aggregation (DP-FedAvg) and its "
                                              "accountant (none)")
    output: OutputConfig = OutputConfig()
    robustness: NonFiniteConfig = Field(
        default=NonFiniteConfig(), description="non-finite updates: on_nonfinite fail (default) or drop")
    energy: EnergyConfig | None = Field(
        default=None, description="per-tier device energy model (J per FLOP, radio power per link type); "
                                  "null = off (docs/explanation/energy.md)")
    versions: dict[str, str] | None = Field(
        default=None, description="informational: package versions recorded in a run's config.yaml"
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-' only (it names the run directory)")
        return value
