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

__all__ = ["CryptoRates", "TierSpec", "shipped_tiers"]


class CryptoRates(ConfigModel):
    """A tier's single-core speed at the primitives of secure aggregation (one key agreement, bytes per
    second of a cipher, one field multiply-add), which a sub-protocol's crypto operations are charged at."""

    ecdh_x25519_ms: PositiveFloat = Field(description="one X25519 key agreement (or key generation), ms")
    ecdh_p256_ms: PositiveFloat = Field(description="one NIST P-256 key agreement (or key generation), ms")
    aes_ctr_mb_s: PositiveFloat = Field(description="AES-CTR PRG expansion, MB/s (10^6 bytes)")
    aes_gcm_mb_s: PositiveFloat = Field(description="AES-GCM encryption / decryption, MB/s")
    chacha20_mb_s: PositiveFloat = Field(description="ChaCha20, MB/s")
    shamir_muladd_ns: PositiveFloat = Field(description="one multiply-add in Shamir's 31-bit prime field, ns")

    def seconds_per_unit(self) -> dict[str, float]:
        """Seconds per unit of each operation of :data:`hierfl.subprotocol.math.CRYPTO_OPS`."""
        return {"ecdh_x25519": self.ecdh_x25519_ms * 1e-3, "ecdh_p256": self.ecdh_p256_ms * 1e-3,
                "aes_ctr": 1.0 / (self.aes_ctr_mb_s * 1e6), "aes_gcm": 1.0 / (self.aes_gcm_mb_s * 1e6),
                "chacha20": 1.0 / (self.chacha20_mb_s * 1e6), "shamir_muladd": self.shamir_muladd_ns * 1e-9}


class TierSpec(ConfigModel):
    """One device tier: training throughput and access link (figures in ``hierfl/profiles/tiers.yaml``)."""

    gflops: PositiveFloat = Field(description="effective training GFLOP/s")
    uplink_mbps: PositiveFloat = Field(description="access uplink of the tier, Mbit/s")
    downlink_mbps: PositiveFloat = Field(description="access downlink of the tier, Mbit/s")
    rtt_ms: NonNegativeFloat = Field(description="round trip to the edge; one-way latency = rtt_ms / 2")
    gflops_range: tuple[PositiveFloat, PositiveFloat] | None = Field(default=None, description="measured spread (low, high) of the tier's training GFLOP/s, for reference")
    link: str | None = Field(default=None, description="radio link type for the energy model (4g, wifi_fixed, …)")
    availability: str | None = Field(default=None, description="a note on how available such devices are")
    crypto: CryptoRates | None = Field(default=None, description="single-core crypto rates (secure aggregation's "
                                       "key agreements, PRG, encryption, secret sharing); null: none known")


@lru_cache(maxsize=1)
def shipped_tiers() -> dict[str, TierSpec]:
    """The tiers shipped in ``hierfl/profiles/tiers.yaml``."""
    text = resources.files("hierfl").joinpath("profiles/tiers.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)["tiers"]
    return {name: TierSpec(**spec) for name, spec in raw.items()}
