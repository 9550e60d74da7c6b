"""Flow-level network: max-min fair sharing with exact finish times, link changes, and the emulator using it."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.assemble import build
from hierfl.kernel.network import FlowNetwork
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



def _random_network(seed: int, name) -> list[tuple]:
    """A run of adds, removes and capacity changes over 6 links named by ``name(i)``: every rate and
    finish time it produces, as exact floats."""
    rng = np.random.default_rng(seed)
    caps = {name(i): float(c) for i, c in enumerate(rng.uniform(0.5, 50.0, 6))}
    caps[name(6)] = math.inf
    net = FlowNetwork(caps)
    out: list[tuple] = []
    t = 0.0
    for fid in range(40):
        t += float(rng.exponential(0.3))
        k = int(rng.integers(1, 4))
        links = [name(int(i)) for i in rng.choice(7, size=k, replace=False)]
        net.add(t, fid, links, float(rng.uniform(0.1, 20.0)))
        if fid % 7 == 3:
            net.set_capacity(t, name(int(rng.integers(0, 6))), float(rng.uniform(0.5, 50.0)))
        if fid % 3 == 2 and len(net.flows) > 2:
            net.remove(t, sorted(net.flows)[int(rng.integers(0, len(net.flows)))])
        out.append((t, sorted((i, f.rate) for i, f in net.flows.items()), net.next_finish()))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2 ** 32 - 1))
def test_rates_do_not_depend_on_link_names_or_their_order(seed):
    """Progressive filling gives the same bits whatever the links are called (their repr order) and
    in whatever order a flow lists them."""
    perm = np.random.default_rng(seed).permutation(7).tolist()
    plain = _random_network(seed, lambda i: i)
    renamed = _random_network(seed, lambda i: ("link", f"z{perm[i]}" if i % 2 else f"a{perm[i]}"))
    assert plain == renamed


def test_max_min_rates_are_exact_for_hand_computed_components():
    # two bottlenecks: a alone on a 3 Mbps link; b, c split what is left of the 9 Mbps link
    net = FlowNetwork({"x": 3.0, "y": 9.0, "z": 100.0})
    net.add(0.0, 0, ["x", "y"], 1.0)
    net.add(0.0, 1, ["y", "z"], 1.0)
    net.add(0.0, 2, ["z", "y"], 1.0)
    assert [net.flows[i].rate for i in range(3)] == [3.0, 3.0, 3.0]
    net.set_capacity(0.0, "y", 12.0)   # y: 12 − 3 = 9 for two flows
    assert [net.flows[i].rate for i in range(3)] == [3.0, 4.5, 4.5]


_HASHSEED_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tests.kernel.test_network import _random_network
print(json.dumps([[float.hex(t), [[i, float.hex(r)] for i, r in rates],
                   None if nf is None else [float.hex(nf[0]), nf[1]]]
                  for t, rates, nf in _random_network(7, lambda i: ("up", f"device-{i}"))]))
"""


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_rates_are_the_same_bits_in_processes_with_different_hash_seeds(tmp_path):
    """Links keyed by tuples of strings (as the driver keys them) hash differently in every process
    (Ray workers, a resumed run): nothing may iterate a set of them for order."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    outs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", _HASHSEED_SCRIPT, root], capture_output=True, text=True,
                              env=env, cwd=root, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and len(json.loads(outs[0])) == 40

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
