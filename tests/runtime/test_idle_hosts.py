"""Host actors kept between the runs of one process on a Ray instance it attached to (IdleHosts): the next run
of the same shape reuses them and computes exactly what it would on new hosts; a run of another shape, a run
with plug-ins and a host that died get new ones. The leaders' host of a run with edge servers is kept the same
way (IdleLeader)."""

from __future__ import annotations

import numpy as np
import ray
import pytest

from hierfl.driver import run_scenario
from hierfl.plugin.testing import comparable_lines
from hierfl.runtime.ray_cluster import IdleHosts, IdleLeader
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY

pytestmark = pytest.mark.ray

RAY = {"runtime": {"executor": "ray", "workers": 2}}


def _run(tmp_path, name, **override):
    out = tmp_path / name
    run_scenario(validate_raw(deep_merge(deep_merge(dict(TINY), RAY), override)), out)
    return out


def _kept() -> list:
    return [] if IdleHosts._kept is None else list(IdleHosts._kept[1])


def _killed(host, within_s: float = 30.0) -> bool:
    """Whether ``host`` is dead within ``within_s``: ``ray.kill`` is asynchronous, so a call sent right after
    it may still be answered; the calls after the kill lands fail."""
    import time

    import ray

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(host.release.remote(), timeout=within_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.1)
    return False


def _same(a, b) -> None:
    assert comparable_lines(a) == comparable_lines(b)
    assert np.load(a / "final_model.npy").tobytes() == np.load(b / "final_model.npy").tobytes()


def test_the_next_run_reuses_the_hosts_and_gives_the_same_bits(tmp_path, ray_session):
    IdleHosts.take(("nothing",))  # start from no kept host (kills any an earlier test left)
    first = _run(tmp_path, "first", seed=5)
    kept = _kept()
    assert len(kept) == 2  # the first run's hosts, released
    ids = [h._actor_id for h in kept]
    # a different scenario in between: the kept hosts serve it, and forget it
    _run(tmp_path, "other", seed=9, training={"epochs": 1, "lr": 0.3})
    assert [h._actor_id for h in _kept()] == ids
    again = _run(tmp_path, "again", seed=5)
    assert [h._actor_id for h in _kept()] == ids
    _same(first, again)
    # and what new hosts give: kill the kept ones first
    IdleHosts.take(("nothing",))
    fresh = _run(tmp_path, "fresh", seed=5)
    assert [h._actor_id for h in _kept()] != ids
    _same(first, fresh)


def test_a_run_of_fewer_hosts_takes_some_and_parks_the_rest_and_one_of_more_starts_the_rest(tmp_path, ray_session):
    IdleHosts.take(("nothing",))
    two_run = _run(tmp_path, "two", seed=5)
    two = _kept()
    assert len(two) == 2
    ids = [h._actor_id for h in two]
    _run(tmp_path, "one", seed=5, runtime={"executor": "ray", "workers": 1})
    # the first kept host served it; the other stayed parked (the run needed no more CPUs than both held)
    assert [h._actor_id for h in _kept()] == ids
    again = _run(tmp_path, "again", seed=5)  # two hosts again: both kept ones, no new process
    assert [h._actor_id for h in _kept()] == ids
    _same(two_run, again)
    # a run of more hosts of the same resources takes the kept ones and starts the rest
    IdleHosts.take(("nothing",))
    _run(tmp_path, "one_only", seed=5, runtime={"executor": "ray", "workers": 1})
    one = _kept()
    assert len(one) == 1
    more = _run(tmp_path, "more", seed=5)
    now = _kept()
    assert len(now) == 2 and now[0]._actor_id == one[0]._actor_id
    _same(two_run, more)


def test_hosts_of_other_resources_are_killed(tmp_path, ray_session):
    IdleHosts.take(("nothing",))
    _run(tmp_path, "two", seed=5)
    two = _kept()
    _run(tmp_path, "three", seed=5, runtime={"executor": "ray", "workers": 3})  # 2/3 CPU each: not the kept ones'
    assert {h._actor_id for h in _kept()}.isdisjoint({h._actor_id for h in two})
    assert _killed(two[0])


def test_a_dead_kept_host_is_replaced(tmp_path, ray_session):
    import ray

    first = _run(tmp_path, "first", seed=5)
    kept = _kept()
    ray.kill(kept[0])
    assert _killed(kept[0])  # dead before the next run asks the kept hosts (the kill is asynchronous)
    again = _run(tmp_path, "again", seed=5)
    assert {h._actor_id for h in _kept()}.isdisjoint({h._actor_id for h in kept})
    _same(first, again)


def test_clear_frees_the_kept_hosts_and_a_driver_keeps_them(tmp_path, ray_session):
    """``IdleHosts.clear`` (what a sweep calls before its trials) kills the kept hosts; a driver process keeps
    hosts, a Ray worker (a Tune trial, an actor) would not."""
    assert IdleHosts.applies()
    _run(tmp_path, "one", seed=5)
    kept = _kept()
    assert kept
    IdleHosts.clear()
    assert _kept() == []
    assert _killed(kept[0])


def _knows(host, name: str) -> bool:
    """Whether the host's process has the protocol ``name`` registered."""
    return ray.get(host.model_call.remote(lambda n: n in __import__("hierfl.protocols.base", fromlist=["PROTOCOLS"])
                                          .PROTOCOLS.names(), name))


def test_a_run_with_a_plugin_borrows_the_kept_hosts_and_they_forget_it_when_kept_again(tmp_path, ray_session):
    """A run with plug-ins takes the kept hosts (they load its plug-ins) rather than start new processes or wait for
    the CPUs the kept ones hold (the instance has 2 CPUs, the kept hosts reserve 1 each); when kept again they forget
    the plug-in (its registrations and modules), so the next run, with the plug-in or without it, takes them too,
    and every run's results are those of new hosts."""
    import shutil
    from pathlib import Path

    from tests.interface.test_plugins import WITH_PLUGIN

    _run(tmp_path, "two", seed=5)
    assert len(_kept()) == 2
    plugin = tmp_path / "mine" / "my_fedavg.py"
    plugin.parent.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "own_method" / "my_fedavg.py", plugin)
    import hierfl

    two = _kept()
    assert not _knows(two[0], "my_fedavg")
    run = hierfl.run({**WITH_PLUGIN, **RAY}, plugins=[str(plugin)], out=tmp_path / "plugin")
    assert run.summary["executor"] == "ray" and run.summary["rounds"] > 0
    after = _kept()
    assert after == two  # it borrowed both, and they are kept again (handles compare by actor id)
    assert not any(_knows(h, "my_fedavg") for h in after) and all(_knows(h, "fedavg") for h in after)
    again = hierfl.run({**WITH_PLUGIN, **RAY}, plugins=[str(plugin)], out=tmp_path / "plugin_again")
    assert _kept() == two and again.summary["rounds"] == run.summary["rounds"]
    _same(tmp_path / "plugin", tmp_path / "plugin_again")
    IdleHosts.clear()  # new hosts: the plug-in run on them gives the same files
    fresh = hierfl.run({**WITH_PLUGIN, **RAY}, plugins=[str(plugin)], out=tmp_path / "plugin_fresh")
    assert not set(_kept()) & set(two)
    _same(tmp_path / "plugin", tmp_path / "plugin_fresh")
    _run(tmp_path, "plain_after", seed=5)  # a run without the plug-in, on hosts that had it: the plain run's files
    _same(tmp_path / "two", tmp_path / "plain_after")


def test_kept_hosts_expire(tmp_path, ray_session, monkeypatch):
    """Kept hosts hold CPUs other processes on the instance may wait for: they are killed after KEEP_S seconds."""
    import time

    from hierfl.runtime import ray_actors

    monkeypatch.setattr(ray_actors, "KEEP_S", 1.0)
    _run(tmp_path, "one", seed=5)
    kept = _kept()
    assert len(kept) == 2
    time.sleep(3.0)
    assert _kept() == []
    assert _killed(kept[0])


HIER = {"topology": {"edge_servers": 2}, "protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 2}}


def _leader() -> object | None:
    return None if IdleLeader._kept is None else IdleLeader._kept[1]


def test_the_leaders_host_is_kept_for_the_next_hierarchical_run_and_gives_the_same_bits(tmp_path, ray_session):
    """A run with edge servers keeps its leaders' host; the next one (another scenario in between, a robust rule
    at the edges included) reuses it and gets exactly what a new one gives; clear ends it."""
    IdleHosts.clear()
    first = _run(tmp_path, "first", seed=5, **HIER)
    leader = _leader()
    assert leader is not None
    robust = _run(tmp_path, "robust", seed=5, aggregation={"edge": {"name": "geomed"}}, **HIER)
    assert _leader() == leader
    again = _run(tmp_path, "again", seed=5, **HIER)
    assert _leader() == leader
    _same(first, again)
    IdleHosts.clear()  # a new leaders' host (and new hosts): the same bits, for both scenarios
    assert _leader() is None and _killed(leader)
    _same(first, _run(tmp_path, "fresh", seed=5, **HIER))
    assert _leader() is not None and _leader() != leader
    _same(robust, _run(tmp_path, "robust_fresh", seed=5, aggregation={"edge": {"name": "geomed"}}, **HIER))
