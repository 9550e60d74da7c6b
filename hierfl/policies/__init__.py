"""Policy plug-ins: straggler policies at barriers, staleness functions, re-clustering."""

from hierfl.policies.recluster import RECLUSTER, ReclusterConfig
from hierfl.policies.staleness import STALENESS, StalenessConfig
from hierfl.policies.straggler import STRAGGLERS, StragglerPolicy

__all__ = ["RECLUSTER", "ReclusterConfig", "STALENESS", "StalenessConfig", "STRAGGLERS", "StragglerPolicy"]
