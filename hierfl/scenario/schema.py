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
from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
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

from hierfl.channels.config import ChannelsSection
from hierfl.config.base import ConfigModel, rename_alias
from hierfl.config.files import resolve_file
from hierfl.data import DATASETS, PARTITIONERS, IIDConfig
from hierfl.devices import ConstantDist, Dist, TierSpec
from hierfl.dynamics import AVAILABILITY, AlwaysAvailability, event_entry_field, event_entry_model
from hierfl.energy.config import EnergyConfig
from hierfl.executors import EXECUTORS
from hierfl.scenario.serveropt import ServerOptimizerSection
from hierfl.learn.trainers import TRAINERS, SGDTrainer
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.models import MODELS
from hierfl.policies.straggler import MIN_INTERVAL_S, default_policy, device_policy_field
from hierfl.protocols import PROTOCOLS
from hierfl.robust.config import AggregationSection
from hierfl.scenario.nonfinite import NonFiniteConfig
from hierfl.scenario.servers import ServersConfig
from hierfl.subprotocol.config import SubProtocolSection
from hierfl.topology import GENERATORS
from hierfl.topology.devgraph import DEVICE_GRAPHS
from hierfl.topology.grouping import FROM_TOPOLOGY, GROUPINGS, GroupingConfig
from hierfl.traces import CapacityTraceConfig

__all__ = [
    "DataConfig", "LabelNoiseConfig", "PublicDataConfig", "DevicesConfig", "LinkConfig", "TopologyConfig", "TrainingConfig", "EvaluationConfig",
    "StopConfig", "RuntimeConfig", "NetworkConfig", "EventConfig", "Scenario",
]

EventConfig: Any = event_entry_model()
"""One entry of ``events:`` (``at_s`` plus exactly one registered event kind)."""

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


class PublicDataConfig(ConfigModel):
    """A public (proxy) split every participant may use: taken out of the dataset's training samples
    before they are split across devices, so it is disjoint from every device's data and from the test set."""

    size: PositiveInt = Field(description="public samples, drawn at random (stream data.public) from the training "
                                          "samples; the devices' private data are split from the rest")
    labelled: bool = Field(default=True, description="whether the public samples' labels are visible (an output-exchange method's "
                                                     "transfer-learning phase needs them)")
    placement: Literal["preinstalled", "download_once", "server_only"] = Field(
        default="preinstalled",
        description="where the public data are: preinstalled (every device and server holds them, free; design "
                    "default, as the reference codes), download_once (each device downloads them over its downlink "
                    "before its first job: 4 bytes per feature, plus 4 per label if labelled) or server_only (only "
                    "the servers hold them)")


class LabelNoiseConfig(ConfigModel):
    """Label noise on the devices' private training labels (the test set and the public split stay clean)."""

    kind: Literal["symmetric", "pair_flip"] = Field(
        description="symmetric: a corrupted label becomes another class drawn uniformly; pair_flip: class c "
                    "becomes (c + 1) mod C")
    rate: float = Field(ge=0.0, le=1.0, description="probability that a device's label is corrupted (its lowest "
                                                    "value when rate_high is set)")
    rate_high: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="per-device rates drawn uniformly from [rate, rate_high] (stream label_noise.rate; design "
                    "default: null, every device at rate)")

    @model_validator(mode="after")
    def _ordered(self) -> LabelNoiseConfig:
        if self.rate_high is not None and self.rate_high < self.rate:
            raise ValueError(f"rate_high ({self.rate_high}) must be at least rate ({self.rate})")
        return self


class DataConfig(ConfigModel):
    """Which dataset to generate or load and how to split it across devices."""

    dataset: DATASETS.union() = Field(description="the dataset plug-in (see Datasets)")  # type: ignore[valid-type]
    partition: PARTITIONERS.union() = Field(default=IIDConfig(), description="how samples are split across devices")  # type: ignore[valid-type]
    # per-device evaluation (personalisation; docs/howto/personalisation.md)
    local_test_fraction: float = Field(
        default=0.0, ge=0.0, lt=1.0,
        description="share of every device's own samples held out as its local test set (0 = none); eval "
                    "lines then carry the distribution of per-device accuracy")
    test_devices: NonNegativeInt = Field(
        default=0, description="extra devices held out whole (never train): unseen clients, evaluated after "
                               "adapting on their support set")
    label_noise: LabelNoiseConfig | None = Field(
        default=None, description="corrupt each device's private training labels (symmetric or pair flip, a rate "
                                  "per device, seeded per device); null = clean labels")
    public: PublicDataConfig | None = Field(
        default=None, description="a public split disjoint from the private and test data, for methods that "
                                  "exchange outputs on shared data; null = none")


class DevicesConfig(ConfigModel):
    """How many devices, and the distributions their profiles are drawn from (seeded)."""

    count: PositiveInt = Field(description="number of devices")
    speed_sps: Dist = Field(default=ConstantDist(value=100.0),
                            description="training throughput, samples per second")
    uplink_mbps: Dist = Field(default=ConstantDist(value=10.0), description="access uplink bandwidth, Mbit/s")
    downlink_mbps: Dist = Field(default=ConstantDist(value=50.0), description="access downlink bandwidth, Mbit/s")
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
    availability: AVAILABILITY.union() = Field(default=AlwaysAvailability(), description="when devices are online: always, markov, trace")  # type: ignore[valid-type]
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


class TrainingConfig(ConfigModel):
    """Local training on each device: minibatch SGD."""

    epochs: PositiveInt | None = Field(default=None, description="local epochs per job (1 when neither epochs nor steps is set)")
    steps: PositiveInt | None = Field(default=None, description="local SGD steps per job instead of epochs")
    batch_size: PositiveInt | None = Field(default=32, description="null = full batch (one gradient step per epoch)")
    lr: PositiveFloat = Field(default=0.01, description="local learning rate")
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0, description="SGD momentum")
    weight_decay: float = Field(default=0.0, ge=0.0, description="L2 weight decay")
    optimizer: Literal["sgd"] = Field(default="sgd", description="local optimizer (sgd)")
    trainer: TRAINERS.union() = Field(  # type: ignore[valid-type]
        default=SGDTrainer(), description="local trainer plug-in (see Trainers)")

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
    target_accuracy: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="the accuracy time_to_target_s and rounds_to_target are measured against (the run goes on; "
                    "stop.target_accuracy stops it)")
    # personalisation: what per-device evaluation (data.local_test_fraction) costs the devices in virtual time
    device_eval_cost: Literal["free", "forward"] = Field(
        default="free", description="free: per-device evaluation takes no virtual time; forward: each device is "
                                    "busy for a forward pass over its held-out rows (hierfl.driver.eval_cost)")

    @field_validator("every_s")
    @classmethod
    def _floor(cls, value: float | None) -> float | None:
        # 1e-9 s means billions of evaluations: a typo, never a plan (reliability)
        if value is not None and value < MIN_INTERVAL_S:
            raise ValueError(f"must be at least {MIN_INTERVAL_S:g} s (one evaluation per virtual millisecond)")
        return value


class StopConfig(ConfigModel):
    """When the run ends: whichever limit is reached first."""

    virtual_time_s: PositiveFloat | None = Field(default=None, description="virtual seconds to emulate")
    rounds: PositiveInt | None = Field(default=None, description="cloud aggregations")
    target_accuracy: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="stop the run at the first evaluation at or above this test accuracy (stop_reason "
                    "target_accuracy); time_to_target_s is measured against evaluation.target_accuracy")

    @model_validator(mode="after")
    def _some_limit(self) -> StopConfig:
        if self.virtual_time_s is None and self.rounds is None:
            raise ValueError("set stop.virtual_time_s or stop.rounds (a run needs a bound)")
        return self


class CheckpointConfig(ConfigModel):
    """``runtime.checkpoint``: how often the driver saves a resumable checkpoint (``checkpoint.pkl``).

    A checkpoint is taken between two events, so it never changes a result; it is what
    ``hierfl resume`` continues from and what the driver rolls back to when a Ray actor or node
    is lost. One is always taken before the first event. ``every_s`` counts real (wall-clock)
    seconds; ``every_cloud_aggregations`` counts rounds; with both, whichever comes first.
    """

    enabled: bool = Field(default=True, description="false: no checkpoint, no resume, no recovery from lost actors")
    every_s: PositiveFloat | None = Field(default=60.0, ge=1.0,
                                          description="wall-clock seconds between checkpoints (at least 1)")
    every_cloud_aggregations: PositiveInt | None = Field(
        default=None, description="cloud aggregations (rounds) between checkpoints")
    max_recoveries: NonNegativeInt = Field(
        default=10, description="lost actors or nodes the driver recovers from before the run fails")


class RuntimeConfig(ConfigModel):
    """Where the emulation runs. Results do not depend on these settings, except ``fast_path`` (opt-in) and
    ``device``, whose numbers agree with the default path's within float tolerance, and ``precision``
    (``bf16``: accuracy within a stated tolerance of ``fp32``'s); emulated times, event order and counters
    never depend on any of them (docs/howto/batched-learning.md)."""

    executor: EXECUTORS.name_field() = Field(  # type: ignore[valid-type]
        default="ray", description="a registered executor (hierfl.executors): ray, local")
    workers: PositiveInt | Literal["auto"] = Field(default="auto", description="training processes (auto = the CPUs the Ray cluster offers)")
    address: str | None = Field(default=None, description="an existing Ray cluster, e.g. 'auto' or 'ray://host:10001'")
    torch_threads: PositiveInt = Field(default=1, description="torch threads per training job")
    fast_path: bool = Field(
        default=False, description="train a host's jobs in groups on stacked parameters (logreg/MLP on CPU: "
                                   "hand-written, 12-15x faster for small models; any model, and every model on "
                                   "CUDA: torch.func vmap); numbers differ from the default path within float "
                                   "tolerance but stay identical across executors and worker counts")
    device: Literal["cpu", "cuda", "auto"] = Field(
        default="cpu", description="torch device of batched training (runtime.fast_path) and evaluation: cpu, cuda, "
                                   "or auto (cuda where torch.cuda.is_available(), else cpu); emulated times never "
                                   "depend on it, the numbers agree within float tolerance")
    precision: Literal["fp32", "bf16"] = Field(
        default="fp32", description="arithmetic of every forward pass (training, one job or batched, and "
                                    "evaluation): fp32, or bf16 (torch.autocast to bfloat16; parameters, "
                                    "gradients and optimizer state stay fp32); bf16 is faster on GPUs with "
                                    "bfloat16 tensor cores and on CPUs with AMX, changes accuracy within a "
                                    "stated tolerance, never emulated times")
    cpu_batching: Literal["auto", "vmap"] = Field(
        default="auto", description="with runtime.fast_path on a CPU: auto trains Linear/ReLU chains (logreg, "
                                    "mlp) in groups and every other model (cnn, char_lstm) job by job, exactly as "
                                    "without the fast path, because vmap's grouped convolutions and LSTMs are "
                                    "slower than one job after another on CPU kernels; vmap batches every model "
                                    "with torch.func on the CPU as on a GPU (for tests and benchmarks)")
    gpus_per_host: NonNegativeFloat = Field(
        default=0.0, description="Ray executor: GPUs reserved by each device host actor (fractions share a GPU); "
                                 "0 = none")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig,
                                         description="resumable checkpoints (hierfl resume) and recovery")


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


class TraceDevices(ConfigModel):
    """``output.trace: {devices: K}``: every edge server and the cloud, plus K device lanes (a seeded sample)."""

    devices: PositiveInt = Field(description="device lanes kept in trace.json (a seeded sample)")


TRACE_AUTO_DEVICES = 200  # device lanes `output.trace: auto` keeps when there are more devices than that
LIST_LIMIT = 200  # `output.list_limit`'s default (hierfl.output.bounded)
TRACE_AUTO_COUNTER_S = 0.1  # `output.trace_counter_s: auto` once the trace samples device lanes


class OutputConfig(ConfigModel):
    """What the run writes besides the always-whole metrics, summary, devices.csv and clusters.jsonl."""

    trace: Literal["auto", "all", "none"] | TraceDevices = Field(
        default="auto", description=f"device lanes of trace.json: all, none, {{devices: K}} (a seeded sample), or "
                                    f"auto = all up to {TRACE_AUTO_DEVICES} devices, else a sample of that many")
    list_limit: PositiveInt | None = Field(
        default=LIST_LIMIT,
        description="per-update lists (ids, weights, staleness, participants, dropped_ids) longer than this "
                    "in a metrics line or trace event are written as a summary {count, min, max, mean}; "
                    "null: always whole")
    trace_counter_s: Literal["auto"] | NonNegativeFloat = Field(
        default="auto",
        description="queue-length counters in trace.json: at most about one sample per this many virtual "
                    "seconds per queue (values that lasted less are dropped); 0: every change; auto = 0 "
                    "while the trace keeps every device lane, else 0.1")
    tensorboard: bool = Field(
        default=False, description="also write the eval lines (accuracy, loss, staleness, queue lengths) as "
                                   "TensorBoard scalars in <run>/tensorboard, against round and virtual time; "
                                   "needs the tensorboard extra")

    @field_validator("tensorboard")
    @classmethod
    def _tensorboard_installed(cls, value: bool) -> bool:
        import importlib.util

        if value and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("needs the tensorboard package: pip install 'hierfl[tensorboard]'")
        return value

    def counter_s(self, trace_devices: set[int] | None) -> float:
        """``trace_counter_s`` resolved: ``auto`` is 0 when every device lane is kept, else 0.1 s."""
        if self.trace_counter_s != "auto":
            return float(self.trace_counter_s)
        return 0.0 if trace_devices is None else TRACE_AUTO_COUNTER_S

    def trace_devices(self, num_devices: int, seed: int) -> set[int] | None:
        """The device lanes to keep (None: all), drawn from stream ``("output.trace",)``."""
        if self.trace == "all":
            return None
        if self.trace == "none":
            return set()
        k = TRACE_AUTO_DEVICES if self.trace == "auto" else self.trace.devices
        if num_devices <= k:
            return None
        from hierfl.core.rng import stream

        return {int(d) for d in stream(seed, "output.trace").choice(num_devices, size=k, replace=False)}


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
