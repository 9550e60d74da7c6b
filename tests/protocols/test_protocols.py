"""Protocols on the local executor: exact virtual times, participants and aggregated models."""

import json
import math

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.core.aggregate import weighted_average
from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from tests.conftest import tiny

# tiny scenario: logreg 5 features x 3 classes -> 18 params -> 72 bytes
DOWN = 0.020 + 72 * 8 / 1.0e6   # latency 20 ms + 72 B over 1 Mbps
UP = 0.020 + 72 * 8 / 0.5e6     # 72 B over 0.5 Mbps


def _events(out, kind):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["event"] == kind]


def test_fedavg_kth_aggregation_time_is_hand_computed(tmp_path):
    # 240 samples over 4 devices: 60 each; 2 epochs at 100 samples/s = 1.2 s of compute
    result = run_scenario(tiny(stop={"rounds": 4}), tmp_path)
    times = [e["t"] for e in _events(tmp_path, "cloud_aggregate")]
    round_s = DOWN + 1.2 + UP
    assert len(times) == 4
    for k, t in enumerate(times, start=1):
        assert abs(t - k * round_s) < 1e-9
    assert result.summary["rounds"] == 4 and result.summary["stop_reason"] == "rounds"
    assert result.summary["totals"]["bytes_cloud"] == 4 * 4 * 2 * 72


def test_fedavg_round_waits_for_the_slowest_selected_device(tmp_path):
    # 250 samples -> 63, 63, 62, 62: the round lasts as long as a 63-sample device
    run_scenario(tiny(data={"dataset": {"num_samples": 250}}, stop={"rounds": 2}), tmp_path)
    times = [e["t"] for e in _events(tmp_path, "cloud_aggregate")]
    round_s = DOWN + 2 * 63 / 100 + UP
    assert abs(times[0] - round_s) < 1e-9 and abs(times[1] - 2 * round_s) < 1e-9


def test_fedavg_model_is_sample_weighted_average_of_local_jobs(tmp_path):
    sc = tiny(data={"dataset": {"num_samples": 250}}, stop={"rounds": 1})
    result = run_scenario(sc, tmp_path)
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    locals_, weights = [], []
    for dev, idx in enumerate(b.parts):
        new, _ = trainer.train(b.init_params, b.dataset.x_train[idx], b.dataset.y_train[idx], b.spec,
                               stream_seed(sc.seed, "train", dev, 0))
        locals_.append(new)
        weights.append(len(idx))
    assert weights == [63, 63, 62, 62]
    np.testing.assert_array_equal(result.final_params, weighted_average(locals_, weights))


def test_fedavg_samples_ceil_c_n_devices_per_round(tmp_path):
    sc = tiny(devices={"count": 10}, protocol={"fraction": 0.25}, stop={"rounds": 3},
              data={"dataset": {"num_samples": 600}})
    run_scenario(sc, tmp_path)
    aggs = _events(tmp_path, "cloud_aggregate")
    assert [a["participants"] for a in aggs] == [math.ceil(0.25 * 10)] * 3
    trace = json.loads((tmp_path / "trace.json").read_text())
    trained = [e["tid"] for e in trace if e.get("ph") == "X" and e["name"] == "train"]
    assert len(trained) == 9 and len(set(trained)) > 3  # different devices over rounds


def test_hierfavg_edge_and_cloud_times_are_hand_computed(tmp_path):
    sc = tiny(protocol={"name": "hierfavg", "kappa1": 5, "kappa2": 2, "fraction": 1.0},
              training={"epochs": None, "batch_size": 10},
              topology={"edge_servers": 2, "grouping": "round_robin", "edge_latency_ms": 5,
                        "edge_cloud": {"uplink_mbps": 100, "downlink_mbps": 100, "latency_ms": 10}},
              stop={"rounds": 2})
    result = run_scenario(sc, tmp_path)
    down, up = DOWN + 0.005, UP + 0.005                # device <-> edge latency 20 + 5 ms
    edge_round = down + 5 * 10 / 100 + up               # kappa1 = 5 steps of 10 samples at 100/s
    link = 0.010 + 72 * 8 / 100e6                       # edge <-> cloud
    first = 2 * edge_round + link
    second = first + link + 2 * edge_round + link
    clouds = [e["t"] for e in _events(tmp_path, "cloud_aggregate")]
    assert abs(clouds[0] - first) < 1e-9 and abs(clouds[1] - second) < 1e-9
    edges = _events(tmp_path, "edge_aggregate")
    assert [round(e["t"], 9) for e in edges[:4]] == [round(edge_round, 9)] * 2 + [round(2 * edge_round, 9)] * 2
    assert all(e["participants"] == 2 for e in edges)
    totals = result.summary["totals"]
    assert totals["edge_aggregations"] == 8 and totals["cloud_aggregations"] == 2
    assert totals["bytes_cloud"] == 72 * (2 + 2 + 2)    # up, down, up (no broadcast after the last round)
    assert totals["device_updates"] == 16


def test_hierfavg_cloud_weights_by_edge_data(tmp_path):
    # one edge round per cloud round: the global model is the n_l-weighted average of edge models
    sc = tiny(protocol={"name": "hierfavg", "kappa1": 3, "kappa2": 1},
              data={"dataset": {"num_samples": 250}},
              training={"epochs": None, "batch_size": 10},
              topology={"edge_servers": 2, "grouping": "round_robin"}, stop={"rounds": 1})
    result = run_scenario(sc, tmp_path)
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    spec = TrainSpec(epochs=None, steps=3, batch_size=10, lr=sc.training.lr)
    edge_models, edge_n = [], []
    for members in ([0, 2], [1, 3]):
        vecs = [trainer.train(b.init_params, b.dataset.x_train[b.parts[d]], b.dataset.y_train[b.parts[d]], spec,
                              stream_seed(sc.seed, "train", d, 0))[0] for d in members]
        n = [len(b.parts[d]) for d in members]
        edge_models.append(weighted_average(vecs, n))
        edge_n.append(sum(n))
    assert edge_n == [125, 125]
    np.testing.assert_array_equal(result.final_params, weighted_average(edge_models, edge_n))


def test_hierfavg_partial_fraction_samples_floor(tmp_path):
    sc = tiny(devices={"count": 8}, data={"dataset": {"num_samples": 480}},
              protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 1, "fraction": 0.5},
              training={"epochs": None}, topology={"edge_servers": 2}, stop={"rounds": 2})
    run_scenario(sc, tmp_path)
    assert [e["participants"] for e in _events(tmp_path, "edge_aggregate")] == [2, 2, 2, 2]


def test_stop_by_virtual_time_and_target(tmp_path):
    r = run_scenario(tiny(stop={"rounds": None, "virtual_time_s": 3.0}), tmp_path / "a")
    assert r.summary["stop_reason"] == "virtual_time" and r.summary["virtual_time_s"] == 3.0
    evals = _events(tmp_path / "a", "eval")
    assert [e["t"] for e in evals] == [0.0, 1.0, 2.0, 3.0]
    r = run_scenario(tiny(stop={"rounds": 50, "target_accuracy": 0.5}), tmp_path / "b")
    assert r.summary["stop_reason"] == "target_accuracy"
    assert r.summary["time_to_target_s"] == r.summary["virtual_time_s"] <= 50 * (DOWN + 1.2 + UP)
    assert r.summary["final_accuracy"] >= 0.5


def test_failure_midway_keeps_metrics_and_writes_failed_summary(tmp_path, monkeypatch):
    from hierfl.driver import RunError
    from hierfl.methods.fedavg import protocol as fedavg

    calls = {"n": 0}
    original = fedavg.FedAvg.on_upload_done

    def flaky(self, event):
        calls["n"] += 1
        if calls["n"] == 6:
            raise ArithmeticError("boom")
        return original(self, event)

    monkeypatch.setattr(fedavg.FedAvg, "on_upload_done", flaky)
    with pytest.raises(RunError, match=r"t=.*upload_done \(device \d, round 1\).*boom"):
        run_scenario(tiny(), tmp_path)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert any('"cloud_aggregate"' in line for line in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "boom" in summary["error"]


def test_executor_start_failure_is_a_run_error(tmp_path, monkeypatch):
    from hierfl.driver import RunError
    from hierfl.runtime import start as runtime_start

    def broken(*args, **kwargs):
        raise ConnectionError("no cluster here")

    monkeypatch.setattr(runtime_start, "make_executor", broken)
    with pytest.raises(RunError, match="cannot start the local executor: ConnectionError: no cluster here"):
        run_scenario(tiny(), tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_kmeans_grouping_separates_fast_and_slow_devices():
    from hierfl.core.grouping import kmeans
    from hierfl.core.rng import stream

    # two obvious groups in (compute, link) space; group 0 = the faster one
    feats = np.log(np.array([[10.0, 1.0], [11.0, 1.1], [0.5, 1.0], [0.55, 1.2], [9.0, 0.9], [0.6, 1.1]]))
    labels = kmeans(feats, 2, stream(0, "g"))
    assert labels.tolist() == [1, 1, 0, 0, 1, 0]
    for seed in range(5):  # the seeding does not change the answer here
        assert np.array_equal(kmeans(feats, 2, stream(seed, "g")), labels)
    # every label used even with duplicates
    same = np.zeros((4, 2))
    assert sorted(set(kmeans(same, 3, stream(1, "g")).tolist())) == [0, 1, 2]


def test_kmeans_grouping_from_a_scenario(tmp_path):
    sc = tiny(devices={"count": 8, "speed_sps": {"dist": "choice", "values": [20, 1000]}},
              data={"dataset": {"num_samples": 480}},
              protocol={"name": "hierfavg", "kappa1": 2}, training={"epochs": None},
              topology={"edge_servers": 2, "grouping": "kmeans"}, stop={"rounds": 1})
    b = build(sc)
    slow = b.world.speed_sps < 100
    assert np.all(b.world.edge_of[~slow] == 0) and np.all(b.world.edge_of[slow] == 1)
    assert run_scenario(sc, tmp_path).summary["status"] == "completed"
