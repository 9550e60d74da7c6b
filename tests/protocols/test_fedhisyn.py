"""FedHiSyn on the local executor: an exact 3-device ring trace, weights, outputs and bad input."""

import json

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.core.aggregate import weighted_average
from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from tests.conftest import TINY, tiny

# tiny links: 72-byte model, up 0.5 Mbps, down 1 Mbps, 20 ms latency per access link
DOWN = 0.020 + 72 * 8 / 1.0e6
UP = 0.020 + 72 * 8 / 0.5e6
HOP = 0.040 + 72 * 8 / 0.5e6   # d2d: min(up_i, down_j) = 0.5 Mbps, latency 20 + 20 ms
SPEEDS = [120.0, 200.0, 40.0]  # 60 samples each -> unit times 0.5, 0.3, 1.5 s: ring 1 -> 0 -> 2 -> 1


def ring3(**protocol):
    sc = tiny(devices={"count": 3}, data={"dataset": {"num_samples": 180}},
              protocol={"name": "fedhisyn", "k": 1, **protocol}, stop={"rounds": 1})
    built = build(sc)
    built.world.speed_sps = np.array(SPEEDS)
    return sc, built


def trainer_for(sc, built):
    trainer = LocalTrainer(sc.model, tuple(built.dataset.input_shape), built.dataset.num_classes)
    spec = TrainSpec(epochs=1, batch_size=sc.training.batch_size, lr=sc.training.lr)

    def train(device, start, job):
        idx = built.parts[device]
        return trainer.train(start, built.dataset.x_train[idx], built.dataset.y_train[idx], spec,
                             stream_seed(sc.seed, "train", device, job))[0]
    return train


def own_chain(train, device, start, units):
    """``[start, m_1, …, m_units]``: a device that only ever continues from its own model."""
    chain = [start]
    for job in range(units):
        chain.append(train(device, chain[-1], job))
    return chain


def lines(path, name):
    return [json.loads(x) for x in (path / name).read_text().splitlines()]


@pytest.mark.parametrize("weighting", ["time", "data", "uniform"])
def test_three_device_ring_latest_exact_trace(tmp_path, weighting):
    sc, built = ring3(weighting=weighting)
    assert [len(p) for p in built.parts] == [60, 60, 60]
    result = run_scenario(sc, tmp_path, built=built)
    T = 1.5 + HOP  # auto: slowest unit + its hop
    # who holds what (window [DOWN, DOWN + T]):
    #  dev1 (0.3 s) trains its own chain 5 times (ends .3 .6 .9 1.2 1.5), forwarding each to dev0;
    #     dev2's model reaches it only at 1.5 + HOP, after its last unit; a 6th unit would end at 1.8 > T
    #  dev0 (0.5 s): unit 1 from w0; at .5 it holds dev1's 1st (arrived .3+HOP) -> unit 2 from it;
    #     at 1.0 it holds dev1's 2nd and 3rd -> unit 3 from the newest (3rd); a 4th would end at 2.0 > T
    #  dev2 (1.5 s): one unit from w0
    train = trainer_for(sc, built)
    w0 = built.init_params
    m1 = own_chain(train, 1, w0, 5)  # dev1 never holds an arrival when it starts a unit
    m0_2 = train(0, m1[1], 1)
    m0_3 = train(0, m1[3], 2)
    m2_1 = train(2, w0, 0)
    busy1 = 0.0
    for _ in range(5):
        busy1 += 60 / 200.0
    weights = {"time": [0.5, busy1 / 5, 1.5], "data": [60, 60, 60], "uniform": [1, 1, 1]}[weighting]
    expected = weighted_average([m0_3, m1[5], m2_1], weights)  # uploads arrive in device order
    np.testing.assert_array_equal(result.final_params, expected)
    assert not np.array_equal(m0_3, train(0, m0_2, 2))  # it really matters which model dev0 continued from

    agg = [x for x in lines(tmp_path, "metrics.jsonl") if x["event"] == "cloud_aggregate"]
    assert len(agg) == 1 and abs(agg[0]["t"] - (DOWN + T + UP)) < 1e-9 and agg[0]["participants"] == 3
    totals = result.summary["totals"]
    assert totals["train_jobs"] == 9 and totals["bytes_d2d"] == 9 * 72
    assert totals["bytes_cloud"] == 6 * 72 and totals["device_updates"] == 3

    trace = json.loads((tmp_path / "trace.json").read_text())
    spans = [e for e in trace if e["ph"] == "X"]
    assert [sum(1 for e in spans if e["name"] == "train" and e["tid"] == d) for d in range(3)] == [3, 5, 1]
    hops = [(e["tid"], e["args"]["peer"]) for e in spans if e["name"] == "ring_send"]
    assert sorted(hops) == [(0, 2)] * 3 + [(1, 0)] * 5 + [(2, 1)]
    assert all(abs(e["dur"] - HOP * 1e6) < 1e-3 for e in spans if e["name"] == "ring_send")
    sends1 = sorted(e["ts"] / 1e6 for e in spans if e["name"] == "ring_send" and e["tid"] == 1)
    assert np.allclose(sends1, [DOWN + 0.3 * k for k in range(1, 6)])
    arrivals0 = sorted(e["ts"] / 1e6 for e in trace if e["ph"] == "i" and e["name"] == "ring_arrival"
                       and e["tid"] == 0)
    assert np.allclose(arrivals0[:4], [DOWN + 0.3 * k + HOP for k in range(1, 5)])
    assert sum(1 for e in trace if e["ph"] in ("s", "f")) == 2 * 9
    assert sum(1 for e in spans if e["name"] == "train_discarded") == 3

    clusters = lines(tmp_path, "clusters.jsonl")
    assert clusters[0]["grouping"] == "capacity_classes" and clusters[0]["rings"] == [[1, 0, 2]]
    assert clusters[0]["members"] == [[0, 1, 2]] and abs(clusters[0]["round_s"] - T) < 1e-12


def test_topology_d2d_rule_sets_hop_latency_and_caps_bandwidth(tmp_path):
    """A topology's device ↔ device rule: latency 5 ms + 2 ms/km × distance, bandwidth capped at 0.25 Mbps."""
    from hierfl.core.world import D2DLink

    sc, built = ring3()
    w = built.world
    w.d2d_link = D2DLink(latency_ms=5.0, ms_per_km=2.0, bandwidth_mbps=0.25)
    w.device_xy = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 10.0]])   # |01| = 5 km, |02| = 10 km, |12| = √45 km
    km = {(0, 2): 10.0, (1, 0): 5.0, (2, 1): 45 ** 0.5}
    hop = {p: (5.0 + 2.0 * d) / 1000.0 + 72 * 8 / 0.25e6 for p, d in km.items()}
    assert w.d2d_s(1, 0) == pytest.approx(hop[(1, 0)], abs=1e-12)
    run_scenario(sc, tmp_path, built=built)
    trace = json.loads((tmp_path / "trace.json").read_text())
    sends = [e for e in trace if e["ph"] == "X" and e["name"] == "ring_send"]
    assert sends and {(e["tid"], e["args"]["peer"]) for e in sends} == set(hop)
    for e in sends:  # one hop at a time per pair here (units are longer than hops): the rule alone
        assert abs(e["dur"] - hop[(e["tid"], e["args"]["peer"])] * 1e6) < 1e-3, e
    clusters = lines(tmp_path, "clusters.jsonl")
    assert abs(clusters[0]["round_s"] - (1.5 + hop[(2, 1)])) < 1e-12   # T = slowest unit + its hop


def test_three_device_ring_average_policy(tmp_path):
    sc, built = ring3(arrival_policy="average", weighting="uniform")
    result = run_scenario(sc, tmp_path, built=built)
    train = trainer_for(sc, built)
    w0 = built.init_params
    m1 = own_chain(train, 1, w0, 5)  # dev1 never holds an arrival when it starts a unit
    m0_1 = train(0, w0, 0)
    m0_2 = train(0, weighted_average([m0_1, m1[1]], [1, 1]), 1)          # own + the one arrived
    m0_3 = train(0, weighted_average([m0_2, m1[2], m1[3]], [1, 1, 1]), 2)  # own + both arrived
    m2_1 = train(2, w0, 0)
    np.testing.assert_array_equal(result.final_params, weighted_average([m0_3, m1[5], m2_1], [1, 1, 1]))


def test_classes_of_one_never_hop_and_explicit_T_excludes_slow_devices(tmp_path):
    sc, built = ring3(k=3)
    result = run_scenario(sc, tmp_path / "a", built=built)
    assert result.summary["totals"]["bytes_d2d"] == 0
    assert lines(tmp_path / "a", "clusters.jsonl")[0]["rings"] == [[1], [0], [2]]
    # T = 1.0: dev2 (1.5 s per unit) never finishes one and is left out; dev0 2 units (0.5 + 0.5 fits
    # exactly), dev1 3
    sc, built = ring3(T=1.0, weighting="data")
    result = run_scenario(sc, tmp_path / "b", built=built)
    agg = [x for x in lines(tmp_path / "b", "metrics.jsonl") if x["event"] == "cloud_aggregate"]
    # dev0's last unit ends at exactly 1.0: its ring send and its upload leave together and share
    # its uplink (contention), so the upload's data phase takes twice as long
    data_up = 72 * 8 / 0.5e6
    assert agg[0]["participants"] == 2 and abs(agg[0]["t"] - (DOWN + 1.0 + UP + data_up)) < 1e-9
    assert result.summary["totals"]["train_jobs"] == 5
    # with contention off, the plain latency + bytes / bandwidth model
    sc, built = ring3(T=1.0, weighting="data")
    sc = sc.model_copy(update={"network": sc.network.model_copy(update={"contention": False})})
    run_scenario(sc, tmp_path / "c", built=built)
    agg = [x for x in lines(tmp_path / "c", "metrics.jsonl") if x["event"] == "cloud_aggregate"]
    assert abs(agg[0]["t"] - (DOWN + 1.0 + UP)) < 1e-9


def test_runs_several_rounds_and_stops_by_rounds(tmp_path):
    sc = tiny(devices={"count": 5, "speed_sps": {"dist": "uniform", "low": 50, "high": 400}},
              protocol={"name": "fedhisyn", "k": 2}, stop={"rounds": 3})
    result = run_scenario(sc, tmp_path)
    assert result.summary["rounds"] == 3 and result.summary["stop_reason"] == "rounds"
    assert result.summary["final_accuracy"] > 0.5


def _problems(raw):
    from hierfl.scenario.loader import validate_raw
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    return [p.path + " | " + p.format() for p in info.value.problems]


@pytest.mark.parametrize("key,value,expect", [
    ("k", 0, "greater than or equal to 1"),
    ("k", 5, "allowed: 1..4"),
    ("T", 0, "'auto' or a number of seconds > 0"),
    ("T", -3.5, "'auto' or a number of seconds > 0"),
    ("T", "soon", "'auto' or a number of seconds > 0"),
    ("weighting", "speed", "'time', 'data' or 'uniform'"),
    ("arrival_policy", "oldest", "'latest' or 'average'"),
    ("classing", "spectral", "'kmeans' or 'quantile'"),
])
def test_bad_input_names_key_path_and_allowed_values(key, value, expect):
    got = _problems({**TINY, "protocol": {"name": "fedhisyn", key: value}})
    assert any(g.startswith(f"protocol.{key} |") and expect in g for g in got), got


def test_edge_servers_rejected_and_cli_exit_2(tmp_path, capsys):
    got = _problems({**TINY, "topology": {"edge_servers": 2}, "protocol": {"name": "fedhisyn"}})
    assert any(g.startswith("topology.edge_servers |") and "allowed: 0" in g for g in got)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "protocol": {"name": "fedhisyn", "k": 9}}))
    assert main(["run", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "protocol.k" in err and "allowed: 1..4" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_T_shorter_than_every_unit_is_a_config_error(tmp_path):
    sc, built = ring3(T=0.1)
    with pytest.raises(ConfigError, match="protocol.T.*no device can finish a unit"):
        run_scenario(sc, tmp_path, built=built)
