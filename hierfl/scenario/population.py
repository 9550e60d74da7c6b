"""Scenario sections of who takes part: ``data`` (dataset, partition, label noise, public split) and
``devices`` (count and the distributions their profiles are drawn from)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from hierfl.config.base import ConfigModel
from hierfl.data import DATASETS, PARTITIONERS, IIDConfig
from hierfl.devices import ConstantDist, Dist, TierSpec
from hierfl.dynamics import AVAILABILITY, AlwaysAvailability
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.traces import CapacityTraceConfig


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
