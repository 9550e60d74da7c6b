"""Flow-level network: max-min fair sharing with exact finish times, link changes, and the emulator using it."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.build import build
from hierfl.core.network import FlowNetwork
from hierfl.driver import run_scenario
from tests.conftest import tiny


def test_two_flows_share_a_link_then_the_survivor_speeds_up():
    net = FlowNetwork({"L": 10.0})
    net.add(0.0, 1, ["L"], 10.0)      # 10 Mbit
    net.add(0.0, 2, ["L"], 30.0)      # 30 Mbit
    # 5 Mbps each: flow 1 ends at 2 s; flow 2 has 20 Mbit left, alone at 10 Mbps → ends at 4 s
    assert net.next_finish() == (2.0, [1])
    net.remove(2.0, 1)
    t, ids = net.next_finish()
    assert ids == [2] and t == pytest.approx(4.0, abs=1e-12)


def test_three_flows_one_joining_late_hand_computed():
    net = FlowNetwork({"L": 12.0})
    net.add(0.0, 1, ["L"], 12.0)
    net.add(0.0, 2, ["L"], 12.0)
    # at t=1: flows 1, 2 have 6 Mbit left each; flow 3 (4 Mbit) joins → 4 Mbps each
    net.add(1.0, 3, ["L"], 4.0)
    t, ids = net.next_finish()
    assert ids == [3] and t == pytest.approx(2.0)           # 4 Mbit at 4 Mbps
    net.remove(2.0, 3)
    t, ids = net.next_finish()                               # 2 Mbit left each at 6 Mbps
    assert ids == [1, 2] and t == pytest.approx(2.0 + 2.0 / 6.0)


def test_max_min_with_different_bottlenecks():
    # flow a: uplink 2 Mbps + shared ingress 10; flows b, c: uplinks 100 + the same ingress
    net = FlowNetwork({"ua": 2.0, "ub": 100.0, "uc": 100.0, "in": 10.0})
    for fid, up in ((1, "ua"), (2, "ub"), (3, "uc")):
        net.add(0.0, fid, [up, "in"], 100.0)
    rates = {fid: f.rate for fid, f in net.flows.items()}
    assert rates[1] == pytest.approx(2.0) and rates[2] == pytest.approx(4.0) and rates[3] == pytest.approx(4.0)


def test_capacity_change_mid_transfer():
    net = FlowNetwork({"L": 8.0})
    net.add(0.0, 1, ["L"], 16.0)        # alone: would end at 2 s
    net.set_capacity(1.0, "L", 2.0)     # 8 Mbit left at 2 Mbps → 4 more seconds
    assert net.next_finish() == (pytest.approx(5.0), [1])


def test_no_contention_each_flow_runs_at_its_bottleneck():
    net = FlowNetwork({"L": 10.0, "M": 4.0}, contention=False)
    net.add(0.0, 1, ["L"], 10.0)
    net.add(0.0, 2, ["L", "M"], 8.0)
    assert net.flows[1].rate == 10.0 and net.flows[2].rate == 4.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(0.1, 50)), min_size=1, max_size=8),
       st.lists(st.floats(1.0, 100.0), min_size=4, max_size=4))
def test_max_min_rates_are_feasible_and_every_flow_has_a_bottleneck(flows, caps):
    net = FlowNetwork({i: c for i, c in enumerate(caps)})
    for fid, (a, b, size) in enumerate(flows):
        net.add(0.0, fid, sorted({a, b}), size)
    load = {i: 0.0 for i in range(4)}
    for f in net.flows.values():
        for link in f.links:
            load[link] += f.rate
    for i, c in enumerate(caps):
        assert load[i] <= c * (1 + 1e-9)
    # max-min: each flow crosses a saturated link on which it has the largest rate
    for f in net.flows.values():
        assert any(load[link] >= caps[link] * (1 - 1e-9)
                   and all(g.rate <= f.rate * (1 + 1e-9) for g in net.flows.values() if link in g.links)
                   for link in f.links)


def _two_device_uploads(contention: bool, ingress: float):
    sc = tiny(devices={"count": 2}, stop={"rounds": 1}, evaluation={"every_s": None},
              network={"contention": contention, "cloud_ingress_mbps": ingress})
    built = build(sc)
    assert built.world.cloud_ingress_mbps == ingress
    return sc, built


def test_uploads_sharing_the_cloud_ingress_arrive_at_hand_computed_times(tmp_path):
    """Two devices (0.5 Mbps up each) upload to a cloud whose ingress is 0.6 Mbps: 0.3 Mbps each."""
    sc, built = _two_device_uploads(True, 0.6)
    res = run_scenario(sc, tmp_path / "a", built=built)
    w = built.world
    mbit = w.model_bytes * 8 / 1e6
    down = 0.020 + mbit / 1.0
    compute = 2 * 120 / 100.0      # 2 epochs of 120 samples at 100 samples/s
    up = 0.020 + mbit / 0.3
    assert res.summary["virtual_time_s"] == pytest.approx(down + compute + up, abs=1e-9)
    # without contention each upload runs at its own 0.5 Mbps uplink
    sc, built = _two_device_uploads(False, 0.6)
    res = run_scenario(sc, tmp_path / "b", built=built)
    assert res.summary["virtual_time_s"] == pytest.approx(down + compute + 0.020 + mbit / 0.5, abs=1e-9)


def test_link_event_slows_an_upload_in_flight(tmp_path):
    """Device 0's uplink drops to 0.1 Mbps while it uploads; the round ends when its last bit arrives."""
    sc = tiny(devices={"count": 1}, stop={"rounds": 1}, evaluation={"every_s": None})
    built = build(sc)
    mbit = built.world.model_bytes * 8 / 1e6
    down = 0.020 + mbit / 1.0
    compute = 2 * 240 / 100.0
    t_up0 = down + compute
    at = t_up0 + 0.5 * mbit / 0.5          # half the data sent at 0.5 Mbps
    sc = tiny(devices={"count": 1}, stop={"rounds": 1}, evaluation={"every_s": None},
              events=[{"at_s": at, "link": {"select": {"ids": [0]}, "uplink_mbps": 0.1}}])
    res = run_scenario(sc, tmp_path)
    assert res.summary["virtual_time_s"] == pytest.approx(at + 0.5 * mbit / 0.1 + 0.020, abs=1e-9)
    assert not math.isnan(res.summary["final_accuracy"]) and np.isfinite(res.final_params).all()


def test_edge_ingress_from_the_scenario_is_shared_by_that_edge_s_uploads(tmp_path):
    """HierFAVG, 2 edges × 2 devices (0.5 Mbps up each), ``network.edge_ingress_mbps: 0.4``: the two
    uploads into one edge get 0.2 Mbps each, so the edge round ends at down + compute + 0.020 + mbit/0.2."""
    sc = tiny(devices={"count": 4}, topology={"edge_servers": 2}, stop={"rounds": 1}, evaluation={"every_s": None},
              protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 1},
              network={"edge_ingress_mbps": 0.4, "edge_egress_mbps": 100.0})
    built = build(sc)
    assert built.world.edge_ingress_mbps.tolist() == [0.4, 0.4]
    res = run_scenario(sc, tmp_path, built=built)
    mbit = built.world.model_bytes * 8 / 1e6
    ev = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    edge_t = sorted(x["t"] for x in ev if x["event"] == "edge_aggregate")
    down = 0.020 + mbit / 1.0
    compute = 2 * 10 / 100.0   # kappa1 = 2 steps of batch 10 at 100 samples/s
    assert edge_t == pytest.approx([down + compute + 0.020 + mbit / 0.2] * 2, abs=1e-9)
    assert res.summary["rounds"] == 1


def test_edge_capacity_without_edge_servers_is_a_key_path_error():
    from hierfl.config.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        tiny(network={"edge_ingress_mbps": 5})
    assert "network.edge_ingress_mbps" in str(err.value) and "no edge servers" in str(err.value)
