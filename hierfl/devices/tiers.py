"""Device tiers (``devices.tiers``): named hardware classes with training throughput and an access link.

The shipped figures are in ``hierfl/profiles/tiers.yaml``; a scenario adds or overrides tiers
under ``devices.custom_tiers``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml
from pydantic import Field, NonNegativeFloat, PositiveFloat

from hierfl.config.base import ConfigModel

__all__ = ["TierSpec", "shipped_tiers"]


class TierSpec(ConfigModel):
    """One device tier: training throughput and access link (figures in ``hierfl/profiles/tiers.yaml``)."""

    gflops: PositiveFloat = Field(description="effective training GFLOP/s")
    uplink_mbps: PositiveFloat = Field(description="access uplink of the tier, Mbit/s")
    downlink_mbps: PositiveFloat = Field(description="access downlink of the tier, Mbit/s")
    rtt_ms: NonNegativeFloat = Field(description="round trip to the edge; one-way latency = rtt_ms / 2")
    gflops_range: tuple[PositiveFloat, PositiveFloat] | None = Field(default=None, description="measured spread (low, high) of the tier's training GFLOP/s, for reference")
    link: str | None = Field(default=None, description="radio link type for the energy model (4g, wifi_fixed, …)")
    availability: str | None = Field(default=None, description="a note on how available such devices are")


@lru_cache(maxsize=1)
def shipped_tiers() -> dict[str, TierSpec]:
    """The tiers shipped in ``hierfl/profiles/tiers.yaml``."""
    text = resources.files("hierfl").joinpath("profiles/tiers.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)["tiers"]
    return {name: TierSpec(**spec) for name, spec in raw.items()}
