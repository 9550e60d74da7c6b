"""Sub-protocols at an aggregation point (hierfl/subprotocol): extra message rounds between an aggregator and
its senders before it aggregates, run as real transfers in virtual time.

The times are hand-computed from the tiny scenario's links (every device: 0.5 Mbit/s up, 1 Mbit/s down,
20 ms latency, no shared link): a message of ``b`` bytes takes ``8b / (Mbit/s · 1e6) + 0.02`` s."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from hierfl.config import late
from hierfl.config.errors import ConfigError
from hierfl.driver import resume_run, run_scenario
from hierfl.driver.checkpoint import Checkpointer
from hierfl.plugin import SUBPROTOCOLS, RoundView, SubProtocolConfig, SubRound
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.badinput import assert_refused
from tests.conftest import TINY, tiny
from tests.golden import bit_differences, contract_outputs

UP, DOWN, LAT = 0.5, 1.0, 0.020        # the tiny scenario's device links
CLOUD_GFLOPS = 3500.0                  # servers.cloud default (cloud_gpu)

TWO_ROUNDS = {"name": "rounds", "rounds": [
    {"name": "keys", "down_bytes": 1000, "up_bytes": 2000},
    {"name": "shares", "up_per_peer_bytes": 500, "server_flops": 1e9}]}


def _up(b: float) -> float:
    return 8 * b / (UP * 1e6) + LAT


def _down(b: float) -> float:
    return 8 * b / (DOWN * 1e6) + LAT


def _run(tmp: Path, name: str, **override: Any) -> Path:
    out = tmp / name
    run_scenario(tiny(**override), out)
    return out


def _lines(run: Path, event: str | None = None) -> list[dict[str, Any]]:
    lines = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    return [ln for ln in lines if event is None or ln["event"] == event]


def _totals(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())["totals"]


# -- (a) the round's commit waits for the sub-protocol's hand-computed time; the model is the same -----------

def test_two_rounds_shift_each_commit_by_their_transfer_times(tmp_path: Path) -> None:
    plain = _run(tmp_path, "plain")
    sub = _run(tmp_path, "sub", subprotocol={"cloud": TWO_ROUNDS})
    # round 0: keys (1000 B down, 2000 B up per device), then shares (500 B per other device up: 3 peers), then
    # the cloud's 1 GFLOP; every device has the same links, so the round ends with each device's chain
    expected = _down(1000) + _up(2000) + _up(500 * 3) + 1e9 / (CLOUD_GFLOPS * 1e9)
    t_plain = [ln["t"] for ln in _lines(plain, "cloud_aggregate")]
    t_sub = [ln["t"] for ln in _lines(sub, "cloud_aggregate")]
    assert len(t_plain) == len(t_sub) == 3
    assert t_sub[0] == pytest.approx(t_plain[0] + expected, abs=1e-9)
    # each round starts later by the sub-protocols before it; its own length is unchanged
    for k in range(3):
        assert t_sub[k] == pytest.approx(t_plain[k] + (k + 1) * expected, abs=1e-9)
    totals, base = _totals(sub), _totals(plain)
    assert totals["subprotocol_runs"] == 3 and totals["subprotocol_rounds"] == 6
    assert totals["subprotocol_s"] == pytest.approx(3 * expected, abs=1e-9)
    assert totals["bytes_cloud"] - base["bytes_cloud"] == 3 * 4 * (1000 + 2000 + 1500)
    assert "subprotocol_runs" not in base  # a run without one has no sub-protocol counters
    # nobody dropped: the same updates, added in the same order, give the same model bit for bit
    assert np.array_equal(np.load(sub / "final_model.npy"), np.load(plain / "final_model.npy"))
    assert _lines(sub, "eval")[-1]["accuracy"] == _lines(plain, "eval")[-1]["accuracy"]
    # the trace shows every round on the cloud's lane and every message on its device's lane
    names = [e["name"] for e in json.loads((sub / "trace.json").read_text()) if "name" in e]
    assert names.count("sub:rounds:keys") == 3 and names.count("sub:rounds:shares") == 3
    assert names.count("sub:rounds:keys:down") == 12 and names.count("sub:rounds:shares:up") == 12


# -- (b) churn: a participant lost mid sub-protocol is left out; below the threshold the round fails ---------

def _leave(at_s: float, ids: list[int]) -> dict[str, Any]:
    return {"events": [{"at_s": at_s, "leave": {"select": {"ids": ids}}}]}


def test_a_participant_lost_mid_subprotocol_is_left_out(tmp_path: Path) -> None:
    plain = _run(tmp_path, "plain", stop={"rounds": 1})
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]  # the last update arrives then: the sub-protocol starts
    sub = _run(tmp_path, "sub", subprotocol={"cloud": TWO_ROUNDS}, stop={"rounds": 1},
               **_leave(t0 + _down(1000) / 2, [2]))
    agg = _lines(sub, "cloud_aggregate")
    assert len(agg) == 1 and agg[0]["participants"] == 3   # device 2's update is not aggregated
    totals = _totals(sub)
    assert totals["subprotocol_dropped"] == 1 and totals["devices_lost"] == 1
    assert "subprotocol_failed" not in totals
    lost = _lines(sub, "device_lost")
    assert [(ln["device"], ln["stage"], ln["reason"]) for ln in lost] == [(2, "subprotocol", "offline")]
    # the next rounds of its sub-protocol cost three participants' messages: 2 peers each in `shares`
    expected = _down(1000) + _up(2000) + _up(500 * 2) + 1e9 / (CLOUD_GFLOPS * 1e9)
    assert agg[0]["t"] == pytest.approx(t0 + expected, abs=1e-9)


def test_below_the_threshold_the_round_fails_and_the_model_stays(tmp_path: Path) -> None:
    plain = _run(tmp_path, "plain", stop={"rounds": 1})
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    strict = {**TWO_ROUNDS, "min_survivors": 4}
    sub = _run(tmp_path, "sub", subprotocol={"cloud": strict}, stop={"virtual_time_s": t0 + 0.5, "rounds": None},
               **_leave(t0 + _down(1000) / 2, [2]))
    empty = _lines(sub, "round_empty")
    assert empty and empty[0]["round"] == 0 and empty[0]["subprotocol"] == "below_threshold"
    assert empty[0]["t"] == pytest.approx(t0 + _down(1000) / 2, abs=1e-9)   # it fails as soon as it is short
    totals = _totals(sub)
    assert totals["subprotocol_failed"] == 1 and totals["subprotocol_dropped"] == 1
    # round 0 aggregated nothing: the first aggregation is a later round's
    assert all(ln["t"] > t0 + 0.1 for ln in _lines(sub, "cloud_aggregate"))


# -- a plug-in: secure aggregation's four rounds with its O(N) share round, written on the API ---------------

class FourRounds(SubProtocolConfig):
    """A test-only stand-in for SecAgg's four rounds (Bonawitz et al., CCS 2017, sizes of its §1.4 table in
    our spec): advertise keys, share keys (one 106-byte share per other participant), masked input, unmask
    (its inputs survive a loss: the others' shares recover it)."""

    name: Literal["test_four_rounds"] = "test_four_rounds"
    sender_gflops: float | None = 10.0

    def plan(self, view: RoundView) -> SubRound | None:
        k = view.peers
        rounds = [SubRound("advertise", up_bytes=74),
                  SubRound("share", down_bytes=72 * k + 45, up_bytes=106 * k, sender_flops=2e5 * k),
                  SubRound("masked", down_bytes=106 * k, up_bytes=8),
                  SubRound("unmask", down_bytes=4 * view.dropped + 8, up_bytes=40 * k, server_flops=1e6 * view.alive,
                           keeps_lost_inputs=True)]
        return rounds[view.round] if view.round < len(rounds) else None

    def threshold(self, participants: int) -> int:
        return math.ceil(2 * participants / 3)


def _register(cls: type) -> type:
    """Register a test's plug-in for that test only: the suite's plug-in isolation (tests/conftest.py) forgets
    it after the test, so it never reaches the tests that list every registered plug-in."""
    from hierfl.config import late

    SUBPROTOCOLS.register(cls)
    late.refresh()  # the scenario schema's sub-protocol union now names it
    return cls


@pytest.fixture
def four_rounds() -> type:
    """The four-round plug-in, registered for one test only."""
    return _register(FourRounds)


def test_a_four_round_plugin_runs_with_its_n_dependent_bytes(tmp_path: Path, four_rounds: type) -> None:
    plain = _run(tmp_path, "plain", stop={"rounds": 1})
    sub = _run(tmp_path, "sub", subprotocol={"cloud": {"name": "test_four_rounds"}}, stop={"rounds": 1})
    k = 3
    expected = (_up(74)
                + _down(72 * k + 45) + 2e5 * k / 10e9 + _up(106 * k)
                + _down(106 * k) + _up(8)
                + _down(8) + _up(40 * k) + 1e6 * 4 / (CLOUD_GFLOPS * 1e9))
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    assert _lines(sub, "cloud_aggregate")[0]["t"] == pytest.approx(t0 + expected, abs=1e-9)
    per_device = 74 + (72 * k + 45) + 106 * k + 106 * k + 8 + 8 + 40 * k
    assert _totals(sub)["bytes_cloud"] - _totals(plain)["bytes_cloud"] == 4 * per_device
    assert _totals(sub)["subprotocol_rounds"] == 4


def test_a_loss_in_a_round_that_keeps_inputs_still_aggregates_that_input(tmp_path: Path, four_rounds: type) -> None:
    plain = _run(tmp_path, "plain", stop={"rounds": 1})
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    k = 3
    unmask_at = (t0 + _up(74) + _down(72 * k + 45) + 2e5 * k / 10e9 + _up(106 * k) + _down(106 * k) + _up(8))
    sub = _run(tmp_path, "sub", subprotocol={"cloud": {"name": "test_four_rounds"}}, stop={"rounds": 1},
               **_leave(unmask_at + _down(8) / 2, [1]))
    assert _totals(sub)["subprotocol_dropped"] == 1
    assert _lines(sub, "cloud_aggregate")[0]["participants"] == 4  # its masked input was in: it is aggregated


VIEWS: list[RoundView] = []


class Recorder(SubProtocolConfig):
    """A test-only sub-protocol that records the views it plans from: two rounds of 1000 bytes down."""

    name: Literal["test_recorder"] = "test_recorder"

    def plan(self, view: RoundView) -> SubRound | None:
        VIEWS.append(view)
        return SubRound(f"r{view.round}", down_bytes=1000) if view.round < 2 else None

    def charges_sender_flops(self) -> bool:
        return False


@pytest.fixture
def recorder() -> type:
    """The recording plug-in, registered for one test only."""
    return _register(Recorder)


def test_a_round_is_planned_from_who_is_left(tmp_path: Path, recorder: type) -> None:
    plain = _run(tmp_path, "plain", stop={"rounds": 1})
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    VIEWS.clear()
    _run(tmp_path, "sub", subprotocol={"cloud": {"name": "test_recorder"}}, stop={"rounds": 1},
         **_leave(t0 + _down(1000) / 2, [0]))
    got = [(v.round, v.participants, v.alive, v.dropped, v.dropped_last, v.peers) for v in VIEWS[:3]]
    assert got == [(0, 4, 4, 0, 0, 3), (1, 4, 3, 1, 1, 2), (2, 4, 3, 1, 0, 2)]


def test_too_few_participants_to_begin_with_fail_every_round(tmp_path: Path) -> None:
    sub = _run(tmp_path, "sub", subprotocol={"cloud": {**TWO_ROUNDS, "min_survivors": 5}},
               stop={"virtual_time_s": 5.0, "rounds": None})
    totals = _totals(sub)
    assert totals["subprotocol_failed"] == totals["subprotocol_runs"] >= 2
    assert totals["cloud_aggregations"] == 0 and "subprotocol_rounds" not in totals
    # the global model never changed: it is the initial one (a run stopped before its first round)
    first = _run(tmp_path, "t0", stop={"virtual_time_s": 0.5, "rounds": None}, evaluation={"every_s": 0.5})
    assert np.array_equal(np.load(sub / "final_model.npy"), np.load(first / "final_model.npy"))


late.refresh()  # the scenario schema's union of sub-protocols names the two registered above


# -- (d) bad keys and protocols that cannot run one ---------------------------------------------------------

@pytest.mark.parametrize("sub, key", [
    ({"cloud": {"name": "round"}}, "subprotocol.cloud"),
    ({"cloud": {"name": "rounds", "rounds": []}}, "subprotocol.cloud.rounds"),
    ({"cloud": {"name": "rounds", "rounds": [{"up_bytes": -1}]}}, "subprotocol.cloud.rounds.0.up_bytes"),
    ({"cloud": {"name": "rounds", "rounds": [{"up_byte": 1}]}}, "subprotocol.cloud.rounds.0.up_byte"),
    ({"cloud": {"name": "rounds", "rounds": [{"sender_flops": 1e6}]}}, "subprotocol.cloud.sender_gflops"),
    ({"edge": {"name": "rounds", "rounds": [{"up_bytes": 1}]}}, "subprotocol.edge.name"),
])
def test_bad_keys_exit_2_with_their_path(tmp_path: Path, capsys: Any, sub: dict[str, Any], key: str) -> None:
    assert_refused(tmp_path, capsys, deep_merge(copy.deepcopy(TINY), {"subprotocol": sub}), key)


def test_unknown_name_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        tiny(subprotocol={"cloud": {"name": "no_such_subprotocol"}})
    assert all(n in str(err.value) for n in ("none", "rounds", "secagg", "secagg_plus"))


def test_a_protocol_that_cannot_run_one_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        validate_raw(deep_merge(copy.deepcopy(TINY), {"protocol": {"name": "fedasync"},
                                                      "subprotocol": {"name": "rounds", "rounds": [{"up_bytes": 8}]}}))
    text = str(err.value)
    assert "subprotocol.cloud.name" in text and "fedasync" in text and "tiers it supports: none" in text


def test_none_and_the_shorthand() -> None:
    assert tiny().subprotocol.default
    sc = tiny(subprotocol={"name": "rounds", "rounds": [{"up_bytes": 8}]})  # a single mapping: the cloud's
    assert sc.subprotocol.at("cloud").name == "rounds" and sc.subprotocol.at("edge") is None


# -- HierFAVG: at its edge servers and at the cloud over the edges ------------------------------------------

def test_hierfavg_runs_one_at_each_tier(tmp_path: Path) -> None:
    hier = {"topology": {"edge_servers": 2}, "protocol": {"name": "hierfavg", "kappa1": 5, "kappa2": 1},
            "training": {"epochs": None}, "stop": {"rounds": 2}}
    plain = _run(tmp_path, "plain", **hier)
    sub = _run(tmp_path, "sub", **hier, subprotocol={"edge": TWO_ROUNDS, "cloud": {
        "name": "rounds", "rounds": [{"down_bytes": 100, "up_bytes": 100}]}})
    totals = _totals(sub)
    assert totals["subprotocol_runs"] == 2 * 2 + 2   # two edges' rounds and the cloud's, twice
    assert totals["subprotocol_rounds"] == 2 * 2 * 2 + 2
    assert np.array_equal(np.load(sub / "final_model.npy"), np.load(plain / "final_model.npy"))
    assert _lines(sub, "cloud_aggregate")[0]["t"] > _lines(plain, "cloud_aggregate")[0]["t"]


# -- (e) a checkpoint taken while a sub-protocol is in flight resumes to the uninterrupted run ---------------

def test_resume_from_a_checkpoint_inside_a_subprotocol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    over = {"subprotocol": {"cloud": TWO_ROUNDS}, "stop": {"rounds": 3}}
    ref = _run(tmp_path, "ref", **over)
    taken: list[float] = []
    due = Checkpointer.due

    def due_inside(self: Checkpointer, run: Any) -> bool:
        running = run.ctx.aggregation.subprotocols._instances  # a sub-protocol is in flight
        if not taken and running and run.ctx.counters["cloud_aggregations"] >= 1:
            taken.append(run.ctx.now)
            return True
        return due(self, run)

    def stop_after(t: float, rounds: int, acc: float | None) -> None:
        if taken and t > taken[0]:
            raise KeyboardInterrupt

    monkeypatch.setattr(Checkpointer, "due", due_inside)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(tiny(**over), out, progress=stop_after)
    monkeypatch.setattr(Checkpointer, "due", due)
    assert taken and json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert resume_run(out).summary["status"] == "completed"
    assert not bit_differences(contract_outputs(ref), contract_outputs(out))


# -- (c) the Ray executor gives the local executor's bits ---------------------------------------------------

@pytest.mark.ray
def test_ray_matches_local(tmp_path: Path, ray_session: Any) -> None:
    over = {"subprotocol": {"cloud": TWO_ROUNDS}, "stop": {"rounds": 2}}
    local = _run(tmp_path, "local", **over)
    ray_run = _run(tmp_path, "ray", **over, runtime={"executor": "ray", "workers": 2})
    assert not bit_differences(contract_outputs(local), contract_outputs(ray_run))
