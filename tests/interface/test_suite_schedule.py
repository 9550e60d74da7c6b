"""How ``make test`` shares the suite out between its pytest-xdist workers (tests/conftest.py): units
of work, their expected seconds, and the longest unit first, so that the workers finish together."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import tests.conftest as suite
from tests.conftest import unit_costs, xdist_scope

pytest.importorskip("xdist")

GOLDEN = "tests/determinism/test_golden.py"


def test_a_golden_scenarios_two_runs_are_one_unit_and_other_modules_are_whole():
    local, ray = f"{GOLDEN}::test_golden_local[quickstart]", f"{GOLDEN}::test_golden_ray_gives_the_local_bits[quickstart]"
    assert xdist_scope(local) == xdist_scope(ray) == f"{GOLDEN}[quickstart]"
    assert xdist_scope(f"{GOLDEN}::test_golden_local[ahfl]") != xdist_scope(local)
    assert xdist_scope(f"{GOLDEN}::test_every_snapshot_belongs_to_a_shipped_scenario") == \
        f"{GOLDEN}::test_every_snapshot_belongs_to_a_shipped_scenario"
    assert xdist_scope("tests/core/test_rng.py::test_streams[3]") == "tests/core/test_rng.py"


def test_no_split_module_has_a_module_scoped_fixture():
    # its fixture would be built once in each worker that runs one of its units
    root = suite.DURATIONS.parents[1]
    shared = [m for m in suite.SPLIT_BY_PARAMETER if 'scope="module"' in (root / m).read_text(encoding="utf-8")]
    assert not shared, shared


def test_unit_costs_use_the_recorded_seconds_else_an_estimate_by_tests():
    ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t", f"{GOLDEN}::test_golden_local[q]",
           f"{GOLDEN}::test_golden_ray_gives_the_local_bits[q]", f"{GOLDEN}::test_golden_local[new]",
           f"{GOLDEN}::test_every_snapshot_belongs_to_a_shipped_scenario"]
    costs = unit_costs(ids, {"tests/a.py": 10.0, f"{GOLDEN}[q]": 36.0, "tests/gone.py": 99.0})
    # the golden module: 36 s over its 4 tests, 9 s a test; a new module: the suite's 46 s / 6 tests
    assert costs == pytest.approx({"tests/a.py": 10.0, "tests/b.py": 46 / 6, f"{GOLDEN}[q]": 36.0,
                                   f"{GOLDEN}[new]": 9.0, f"{GOLDEN}::test_every_snapshot_belongs_to_a_shipped_scenario": 9.0})
    # a module recorded whole and split since: its seconds shared out by tests
    split = [f"{GOLDEN}::test_golden_local[{s}]" for s in ("x", "y", "z")]
    assert unit_costs(split, {GOLDEN: 30.0}) == pytest.approx({f"{GOLDEN}[{s}]": 10.0 for s in ("x", "y", "z")})
    assert unit_costs(ids[:1], {}) == {"tests/a.py": 0.0}  # nothing recorded: xdist's own order


def test_the_recorded_durations_name_units_and_seconds():
    recorded = json.loads(suite.DURATIONS.read_text(encoding="utf-8"))
    assert recorded and all(k.startswith("tests/") and ".py" in k for k in recorded)
    assert all(isinstance(v, (int, float)) and v >= 0 for v in recorded.values())


class _Node:
    """A stand-in for an xdist worker: it records the test indexes it is sent, in order."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.queue: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.queue += indexes

    def shutdown(self) -> None:
        self.shutting_down = True


def _makespan(monkeypatch: pytest.MonkeyPatch, units: dict[str, tuple[int, float]], told: bool = True) -> float:
    """Run the scheduler on two simulated workers; the time the later one finishes. ``units``: name
    -> (tests, seconds of the whole unit); ``told``: whether the scheduler knows those seconds."""
    known = {f"tests/{u}.py": s for u, (_, s) in units.items()} if told else {}
    monkeypatch.setattr(suite, "_known_durations", lambda: known)
    config = SimpleNamespace(getvalue={"dist": "loadscope", "tx": ["2*popen"]}.get,
                             option=SimpleNamespace(loadscopereorder=True))
    sched: Any = suite.pytest_xdist_make_scheduler(config, None)
    collection = [f"tests/{u}.py::t{i}" for u, (n, _) in units.items() for i in range(n)]
    unit_of = {nodeid: nodeid[len("tests/"):].split(".py")[0] for nodeid in collection}
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    clock = {node: 0.0 for node in nodes}
    while any(node.queue for node in nodes):
        node = min((n for n in nodes if n.queue), key=lambda n: clock[n])  # the worker that gets there first
        index = node.queue.pop(0)
        tests, seconds = units[unit_of[collection[index]]]
        clock[node] += seconds / tests
        sched.mark_test_complete(node, index)
    assert sched.tests_finished and all(node.shutting_down for node in nodes)
    return max(clock.values())


def test_the_longest_unit_goes_first_so_the_workers_finish_together(monkeypatch):
    # modules of many short tests, and scenarios of two long runs each: pytest-xdist's own order (most
    # tests first) leaves the long ones for the end, where one worker runs them while the other waits
    units = {**{f"short{i}": (8, 8.0) for i in range(6)}, **{f"long{i}": (2, 40.0) for i in range(3)}}
    total = sum(s for _, s in units.values())
    ours, theirs = _makespan(monkeypatch, units), _makespan(monkeypatch, units, told=False)
    assert ours < theirs
    assert ours <= total / 2 + 8.0  # within one short unit of an even split


def test_units_that_end_kept_hosts_go_first_longest_first_then_the_rest_longest_first():
    clearing = sorted(suite.HOST_CLEARING)
    costs = {clearing[0]: 5.0, clearing[1]: 20.0, f"{GOLDEN}[a]": 50.0, "tests/core/test_rng.py": 1.0}
    waiting = list(costs)
    order = []
    while waiting:
        order.append(suite.next_unit(waiting, costs))
        waiting.remove(order[-1])
    # the clearing ones first, though the golden unit is longer: golden Ray runs after them keep their hosts
    assert order == [clearing[1], clearing[0], f"{GOLDEN}[a]", "tests/core/test_rng.py"]


def test_the_modules_said_to_end_kept_hosts_exist():
    root = suite.DURATIONS.parents[1]
    assert suite.HOST_CLEARING and all((root / m).is_file() for m in suite.HOST_CLEARING)
