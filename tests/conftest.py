"""Shared fixtures: one local Ray instance for the whole session, tiny scenarios."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hierfl.scenario.loader import deep_merge, validate_raw
from hierfl.scenario.schema import Scenario

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "data": {"dataset": {"name": "blobs", "num_samples": 240, "test_samples": 200, "num_features": 5,
                         "num_classes": 3, "separation": 3.0},
             "partition": {"name": "iid"}},
    "model": {"name": "logreg"},
    "devices": {"count": 4, "speed_sps": 100, "uplink_mbps": 0.5, "downlink_mbps": 1.0, "latency_ms": 20},
    "protocol": {"name": "fedavg", "fraction": 1.0},
    "training": {"epochs": 2, "batch_size": 10, "lr": 0.1},
    "evaluation": {"every_s": 1.0},
    "stop": {"rounds": 3},
    "runtime": {"executor": "local"},
}


def tiny(**override: Any) -> Scenario:
    """The tiny scenario with nested overrides, e.g. ``tiny(protocol={"fraction": 0.5})``."""
    return validate_raw(deep_merge(copy.deepcopy(TINY), override))


@pytest.fixture(autouse=True)
def _forget_plugins():
    """A plug-in a test loads (its own file, a shipped scenario's ``plugins:``) is forgotten after it: its
    names never reach the tests that list every registered plug-in."""
    from hierfl.config.plugins import isolated

    with isolated():
        yield


@pytest.fixture(scope="session")
def ray_session():  # noqa: ANN201
    """One shared local Ray instance (2 CPUs, no dashboard)."""
    import ray

    if not ray.is_initialized():
        # address="local": a private instance, never a cluster another process on this machine started
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
