"""Shared fixtures: one local Ray instance per test process, tiny scenarios; the scheduling of
pytest-xdist workers.

``make test`` runs the suite in three pytest-xdist workers (``-n 3 --dist loadscope``). Each worker
is a test process of its own: it starts at most one Ray instance (:func:`ray_session`), whose
temporary directory is private to the process (``RAY_TMPDIR``, set in :func:`pytest_configure`)
and whose ports the operating system assigns, so two workers (or two people's suites on one
machine) never share a Ray instance, a socket or a log folder. A module's tests run in one worker,
so that its module-scoped fixtures are built once, as in a serial run; the golden module is split
by scenario (:func:`xdist_scope`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
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


def skip_unless_installed(*modules: str) -> None:
    """Skip the calling test module (at collection) where one of ``modules`` is not installed. Unlike
    ``pytest.importorskip`` it does not import them: every xdist worker collects every module, and importing
    scikit-learn or Ray Tune there costs each worker about 2 CPU s for tests that mostly run elsewhere."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            pytest.skip(f"{name} is not installed", allow_module_level=True)


def cli_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: dict[str, Any], key: str) -> None:
    """``hierfl validate`` of ``raw`` (written to a file) exits 2 naming the YAML key path ``key``."""
    from hierfl.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(raw))
    assert main(["validate", str(path)]) == 2
    assert key in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _forget_plugins():
    """A plug-in a test loads (its own file, a shipped scenario's ``plugins:``) is forgotten after it: its
    names never reach the tests that list every registered plug-in."""
    from hierfl.config.plugins import isolated

    with isolated():
        yield
_RAY_TMPDIR_KEY = "_hierfl_ray_tmpdir"


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


# long modules whose tests share no module-scoped fixture: one scheduling unit per parameter id
# (a test without parameters is a unit of its own), not one per module (as one unit, the golden
# module alone would be a third of the suite, and test_determinism's Ray comparisons a long tail).
# The golden module's local and Ray tests of a scenario share an id, so they stay together: the
# Ray run is compared with the worker's local run. A module with a module-scoped fixture must
# not be listed: its fixture would be built in both workers.
SPLIT_BY_PARAMETER = (
    "tests/determinism/test_golden.py",
    "tests/determinism/test_determinism.py",
    "tests/determinism/test_contract.py",
    "tests/determinism/test_portability.py",
    "tests/interface/test_claims.py",
    "tests/interface/test_sweep.py",
    "tests/scenario/test_straggler_points.py",
    "tests/driver/test_timing_only.py",
    "tests/learn/test_fastpath.py",
    "tests/learn/test_batched_learning.py",
    "tests/robust/test_robust.py",
    "tests/core/test_dynamics.py",
    "tests/faults/test_edge_faults.py",
    "tests/protocols/test_gossip_runs.py",
    "tests/learn/test_learning_conformance.py",
    "tests/learn/test_precision.py",
    "tests/interface/test_docs.py",
    "tests/interface/test_own_method_tutorial.py",
    "tests/driver/test_detached_flows.py",
    "tests/driver/test_run_endings.py",
    "tests/protocols/test_async_knobs.py",
)


def xdist_scope(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: ``nodeid``'s module, or for a module of
    :data:`SPLIT_BY_PARAMETER`, its module and the test's parameter id (or the test's name)."""
    module, _, rest = nodeid.partition("::")
    if module not in SPLIT_BY_PARAMETER:
        return module
    if "[" in rest:
        return f"{module}[{rest.split('[', 1)[1]}"
    return nodeid


# what each unit took in a recent run of the whole suite (seconds, both workers busy; see
# unit_costs): the scheduler hands out the longest units first, so that the two workers finish
# together instead of one waiting while the other runs a long unit that came last
DURATIONS = Path(__file__).with_name("durations.json")


# modules whose tests end the Ray host processes a worker's runs keep for the next run (IdleHosts): sweeps
# (their trials need the CPUs), runs attached from another process (ray_address), runs of other host resources,
# and the tests of keeping and recovery themselves. They are handed out first: were they interleaved with the
# golden Ray runs, every golden run after one of them would start two host processes again (torch imported in
# each, about 2.5 CPU s), where the golden runs that follow them all reuse the same two.
HOST_CLEARING = frozenset({
    "tests/interface/test_sweep.py",
    "tests/interface/test_sweep_refused.py",
    "tests/runtime/test_idle_hosts.py",
    "tests/driver/test_recovery.py",
    "tests/runtime/test_ray_auth.py",
    "tests/driver/test_reliability.py",
    "tests/driver/test_run_endings.py",
    "tests/runtime/test_startup_memory.py",
})


def _module(unit: str) -> str:
    return unit.split("::", 1)[0].split("[", 1)[0]


def unit_costs(nodeids: list[str], known: dict[str, float]) -> dict[str, float]:
    """The expected seconds of each :func:`xdist_scope` unit of ``nodeids``: its recorded time in
    ``known``, else its number of tests times its module's recorded seconds a test (the suite's,
    when the module is new), so that a new unit, or a module recorded before it was split, is
    placed roughly, not last."""
    counts: dict[str, int] = {}
    for nodeid in nodeids:
        unit = xdist_scope(nodeid)
        counts[unit] = counts.get(unit, 0) + 1
    tests: dict[str, int] = {}
    for unit, n in counts.items():
        tests[_module(unit)] = tests.get(_module(unit), 0) + n
    seconds: dict[str, float] = {}
    for unit, s in known.items():
        if _module(unit) in tests:
            seconds[_module(unit)] = seconds.get(_module(unit), 0.0) + s
    overall = sum(seconds.values()) / max(1, sum(tests[m] for m in seconds))
    return {unit: known.get(unit, n * (seconds[_module(unit)] / tests[_module(unit)] if _module(unit) in seconds
                                       else overall))
            for unit, n in counts.items()}


def next_unit(waiting: Iterable[str], costs: dict[str, float]) -> str:
    """The unit to hand out next: the longest of the :data:`HOST_CLEARING` units while any is waiting, then
    the longest of the rest (so that the workers finish together)."""
    return max(waiting, key=lambda unit: (_module(unit) in HOST_CLEARING, costs.get(unit, 0.0)))


def _known_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text(encoding="utf-8")).items()}
    except (OSError, ValueError):
        return {}


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown where the plug-in is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with the units of :func:`xdist_scope`, longest first (pytest-xdist's own
    scopes are modules and classes, ordered by their number of tests; its ``loadgroup`` marks do
    not reach the scheduler under pytest 9)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    known = _known_durations()

    class ModuleScheduling(LoadScopeScheduling):
        costs: dict[str, float] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # move the unit to run next to the front: pytest-xdist hands out the front one
            if self.costs is None:
                self.costs = unit_costs(list(self.collection or ()), known)
            longest = next_unit(self.workqueue, self.costs)
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="write each xdist unit's seconds in this run to tests/durations.json (run the whole suite)")


_UNIT_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each unit's seconds (set-up, call and tear-down) for ``--store-durations``."""
    unit = xdist_scope(report.nodeid)
    _UNIT_SECONDS[unit] = _UNIT_SECONDS.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``--store-durations``, in the process that saw every report (the xdist controller, or
    the only process), write :data:`DURATIONS`."""
    config = session.config
    if not config.getoption("store_durations") or hasattr(config, "workerinput") or not _UNIT_SECONDS:
        return
    merged = {**_known_durations(), **{k: round(v, 1) for k, v in _UNIT_SECONDS.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n", encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``ray`` every test that takes :func:`ray_session` (the marker's meaning: it uses a Ray
    instance), so that ``-m "not ray"`` (``make test-fast``) leaves it out whether or not its
    module marked it."""
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()) and item.get_closest_marker("ray") is None:
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_session():  # noqa: ANN201
    """One local Ray instance for this test process (2 CPUs, no dashboard), in the process's own
    temporary directory, on ports the operating system assigns."""
    import ray

    if not ray.is_initialized():
        # address="local": a private instance, never a cluster another process on this machine started
        # lean: without the log and autoscaler monitors, which a test never reads and which poll for CPU all along
        from hierfl.runtime.ray_head import lean_init

        lean_init(address="local", num_cpus=2, logging_level="ERROR", log_to_driver=False)
    from hierfl.runtime import ray_actors

    if "HIERFL_KEEP_HOSTS_S" not in os.environ:
        # the session's Ray runs take the host processes the last one kept (IdleHosts) instead of starting two
        # Python processes importing torch each; nothing else of this process waits for their CPUs (a sweep and
        # a run with plug-ins free them first), and they end with the instance
        ray_actors.KEEP_S = 3600.0
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_address(ray_session) -> str:  # noqa: ANN001
    """The address of this test process's Ray instance, for another process (a CLI run) to attach to. The
    hosts this process keeps (:class:`~hierfl.runtime.ray_actors.IdleHosts`) are freed first: that process's
    own hosts need their CPUs (a kept leaders' host holds none and stays)."""
    from hierfl.runtime.ray_actors import IdleHosts

    IdleHosts.free_cpus()
    return ray_session.get_runtime_context().gcs_address
