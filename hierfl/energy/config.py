"""``energy:`` — the per-tier device energy model (off unless the section is given).

With the section, the driver charges each device's finished training jobs (J per FLOP of its
tier), its other timed work (crypto, channel coding, DP: seconds at its active power) and its
model transfers (Huang et al.'s per-bit + time-on-air radio model of its tier's link type),
writes per-device joules to ``devices.csv``, the totals ``energy_device_j``, ``energy_compute_j``,
``energy_comm_j`` to every evaluation line and to ``summary.json``'s ``totals``, and a breakdown to ``summary.json``'s ``energy``. Without it, nothing is written and
every output is byte-identical to a run of the same scenario before the model existed.
Formulas, defaults and their sources: :mod:`hierfl.energy.math`, docs/explanation/energy.md.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, ValidationInfo, field_validator

from hierfl.config.base import ConfigModel
from hierfl.energy.math import CUSTOM_TIER, J_PER_FLOP_DEFAULTS, RADIO_DEFAULTS, RadioPower

__all__ = ["EnergyConfig", "RadioConfig"]


class RadioConfig(ConfigModel):
    """One link type's radio power (Huang et al., MobiSys 2012): mW per Mbit/s up, down, and base mW."""

    up_mw_per_mbps: NonNegativeFloat = Field(description="α_u: mW per Mbit/s sent (= mJ per Mbit)")
    down_mw_per_mbps: NonNegativeFloat = Field(description="α_d: mW per Mbit/s received (= mJ per Mbit)")
    base_mw: NonNegativeFloat = Field(description="β: mW while the radio is on for a transfer")

    def power(self) -> RadioPower:
        """The core's value object."""
        return RadioPower(self.up_mw_per_mbps, self.down_mw_per_mbps, self.base_mw)


class EnergyConfig(ConfigModel):
    """Device energy figures; every key has a documented default (hierfl.energy.math)."""

    j_per_flop: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description=f"training joules per FLOP per device tier (overrides the defaults; '{CUSTOM_TIER}' = devices "
                    f"drawn without a tier); defaults: {', '.join(sorted(J_PER_FLOP_DEFAULTS))}")
    links: dict[str, RadioConfig] = Field(
        default_factory=dict,
        description=f"radio power per link type (overrides or adds); defaults: {', '.join(sorted(RADIO_DEFAULTS))}")
    device_link: str = Field(
        default="4g", description="link type of devices without a tier, or whose tier names no link")
    tier_links: dict[str, str] = Field(
        default_factory=dict, description="link type per tier, overriding the tier's own `link`")

    @field_validator("device_link")
    @classmethod
    def _known_link(cls, value: str, info: ValidationInfo) -> str:
        known = sorted({*RADIO_DEFAULTS, *(info.data.get("links") or {})})
        if value not in known:
            raise ValueError(f"unknown link type {value!r}; allowed: {', '.join(known)} (or add it under energy.links)")
        return value

    @field_validator("tier_links")
    @classmethod
    def _known_links(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        known = sorted({*RADIO_DEFAULTS, *(info.data.get("links") or {})})
        for tier, link in value.items():
            if link not in known:
                raise ValueError(f"{tier}: unknown link type {link!r}; allowed: {', '.join(known)} "
                                 "(or add it under energy.links)")
        return value

    def radios(self) -> dict[str, RadioPower]:
        """Every link type's radio power: the defaults, overridden or extended by ``links``."""
        return {**RADIO_DEFAULTS, **{k: v.power() for k, v in self.links.items()}}

    @staticmethod
    def j_per_flop_defaults() -> dict[str, float]:
        """The shipped J/FLOP per tier."""
        return dict(J_PER_FLOP_DEFAULTS)

    def tier_j_per_flop(self, tier: str) -> float | None:
        """J/FLOP of ``tier`` (None: no default and none given)."""
        return self.j_per_flop.get(tier, J_PER_FLOP_DEFAULTS.get(tier))
