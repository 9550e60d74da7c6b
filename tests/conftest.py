"""Shared fixtures: one local Ray instance per test process, tiny scenarios; grouping for pytest-xdist.

``make test`` runs the suite in two pytest-xdist workers (``-n 2 --dist loadgroup``). Each worker
is a test process of its own: it starts at most one Ray instance (:func:`ray_session`), whose
temporary directory is private to the process (``RAY_TMPDIR``, set in :func:`pytest_configure`)
and whose ports the operating system assigns, so two workers (or two people's suites on one
machine) never share a Ray instance, a socket or a log folder. Tests that share a module-scoped
fixture are kept in one worker (:func:`pytest_collection_modifyitems`), so that the fixture is
built once, as in a serial run.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
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


_RAY_TMPDIR_KEY = "_hierfl_ray_tmpdir"
# fixture scopes whose value tests of one module share: such tests run in one xdist worker
_SHARED_SCOPES = ("module", "class", "package")


def pytest_configure(config: pytest.Config) -> None:
    """Give this test process a Ray temporary directory of its own (every Ray it or its
    subprocesses start puts its sessions, sockets and logs there), unless the caller chose one."""
    controller = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
    if "RAY_TMPDIR" in os.environ or controller:  # an xdist controller runs no test
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    # short: Ray's socket paths under it must stay within the 107-character limit of AF_UNIX
    path = tempfile.mkdtemp(prefix=f"hierfl-ray-{worker}-")
    os.environ["RAY_TMPDIR"] = path
    setattr(config, _RAY_TMPDIR_KEY, path)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the Ray temporary directory :func:`pytest_configure` made (Ray is shut down by now)."""
    path = getattr(config, _RAY_TMPDIR_KEY, None)
    if path is not None:
        os.environ.pop("RAY_TMPDIR", None)
        shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put a test that uses a module-scoped (or class-, package-scoped) fixture, or a
    session-scoped one defined in its own module, in its module's ``xdist_group``: under
    ``--dist loadgroup`` such tests then run in one worker and the fixture is built once. Tests
    with an ``xdist_group`` of their own keep it; every other test is scheduled alone."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        module = item.nodeid.split("::", 1)[0]
        for defs in info.name2fixturedefs.values():
            fixture = defs[-1]
            local = fixture.baseid.split("::", 1)[0] == module
            if fixture.scope in _SHARED_SCOPES or (fixture.scope == "session" and local):
                item.add_marker(pytest.mark.xdist_group(module))
                break


@pytest.fixture(scope="session")
def ray_session():  # noqa: ANN201
    """One local Ray instance for this test process (2 CPUs, no dashboard), in the process's own
    temporary directory, on ports the operating system assigns."""
    import ray

    if not ray.is_initialized():
        # address="local": a private instance, never a cluster another process on this machine started
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
