"""The scenario: its schema (assembled from the plug-in registries), its loader and its cross-section checks."""

from hierfl.scenario.loader import apply_overrides, deep_merge, dump_scenario, load_raw, load_scenario, validate_raw
from hierfl.scenario.schema import Scenario

__all__ = ["Scenario", "load_scenario", "load_raw", "apply_overrides", "validate_raw", "deep_merge", "dump_scenario"]
