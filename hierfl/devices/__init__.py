"""Device profiles: the distributions per-device figures are drawn from, and named tiers."""

from hierfl.devices.dists import (
    DISTRIBUTIONS,
    ChoiceDist,
    ConstantDist,
    Dist,
    DistConfig,
    LogNormalDist,
    UniformDist,
)
from hierfl.devices.tiers import TierSpec, shipped_tiers

__all__ = ["DISTRIBUTIONS", "ChoiceDist", "ConstantDist", "Dist", "DistConfig", "LogNormalDist", "UniformDist",
           "TierSpec", "shipped_tiers"]
