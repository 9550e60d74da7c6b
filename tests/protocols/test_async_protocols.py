"""Asynchronous protocols (AHFL, FedAsync, FedBuff) on the local executor: exact traces.

Tiny scenario: 4 devices of 60 samples, 100 samples/s, 72-byte models; every device has the
same profile, so each one's download + train + upload cycle lasts exactly ``CYCLE``.
"""

import json
import math

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from tests.conftest import tiny

DOWN = 0.020 + 72 * 8 / 1.0e6
UP = 0.020 + 72 * 8 / 0.5e6
CYCLE = DOWN + 0.6 + UP          # 1 epoch of 60 samples at 100/s
LINK = 0.010 + 72 * 8 / 100e6    # edge <-> cloud


def lines(out, kind):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == kind]


def flat(name, **protocol):
    return tiny(protocol={"name": name, **protocol}, training={"epochs": 1}, evaluation={"every_s": None})


def test_fedasync_trace_staleness_and_weights(tmp_path):
    res = run_scenario(flat("fedasync", staleness={"name": "polynomial", "a": 0.5}), tmp_path)
    aggs = lines(tmp_path, "cloud_aggregate")
    assert len(aggs) == 3 and res.summary["rounds"] == 3
    # all four devices arrive together at CYCLE, processed in event order: versions 0..3 applied
    for k, a in enumerate(aggs):
        assert a["t"] == pytest.approx(CYCLE, abs=1e-9)
        assert a["ids"] == [k] and a["staleness"] == [k] and a["version"] == k + 1
        assert a["weights"][0] == pytest.approx(0.6 * (k + 1) ** -0.5)
    hist = res.summary["staleness"]["cloud"]["histogram"]
    assert hist == {"0": 1, "1": 1, "2": 1}


def test_fedasync_second_wave_all_three_stale(tmp_path):
    run_scenario(flat("fedasync").model_copy(update={"stop": tiny(stop={"rounds": 8}).stop}), tmp_path)
    aggs = lines(tmp_path, "cloud_aggregate")
    # device k restarted from version k+1; its second update lands at version 4+k: tau = 3
    assert [a["staleness"][0] for a in aggs] == [0, 1, 2, 3, 3, 3, 3, 3]
    assert all(a["t"] == pytest.approx(2 * CYCLE, abs=1e-9) for a in aggs[4:])
    for a in aggs:  # bounded: staleness < version = number of cloud aggregations so far
        assert 0 <= a["staleness"][0] < a["version"] == a["round"]


def test_fedasync_first_update_is_hand_mixed(tmp_path):
    sc = flat("fedasync", alpha=0.9, rho=0.0, concurrency=1).model_copy(
        update={"stop": tiny(stop={"rounds": 1}).stop})
    res = run_scenario(sc, tmp_path)
    b = build(sc)
    device = lines(tmp_path, "cloud_aggregate")[0]["ids"][0]
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    idx = b.parts[device]
    y, _ = trainer.train(b.init_params, b.dataset.x_train[idx], b.dataset.y_train[idx],
                         TrainSpec(epochs=1, batch_size=10, lr=0.1), stream_seed(sc.seed, "train", device, 0))
    expect = (0.1 * b.init_params.astype(np.float64) + 0.9 * y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(res.final_params, expect)


def test_fedbuff_k2_trace(tmp_path):
    res = run_scenario(flat("fedbuff", K=2, concurrency=4, server_lr=1.0).model_copy(
        update={"stop": tiny(stop={"rounds": 4}).stop}), tmp_path)
    aggs = lines(tmp_path, "cloud_aggregate")
    assert [a["ids"] for a in aggs] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert [a["staleness"] for a in aggs] == [[0, 0], [1, 1], [2, 1], [2, 1]]
    assert [round(a["t"] / CYCLE, 9) for a in aggs] == [1, 1, 2, 2]
    s = [1 / math.sqrt(1 + t) for t in (0, 1, 2)]
    assert aggs[1]["weights"] == pytest.approx([0.5 * s[1]] * 2)
    assert aggs[2]["weights"] == pytest.approx([0.5 * s[2], 0.5 * s[1]])
    assert res.summary["staleness"]["cloud"]["max"] == 2


def test_fedbuff_k1_constant_equals_fedasync(tmp_path):
    stop = tiny(stop={"rounds": 6}).stop
    a = run_scenario(flat("fedasync", alpha=0.7, rho=0.0, concurrency=1,
                          staleness={"name": "constant"}).model_copy(update={"stop": stop}), tmp_path / "a")
    b = run_scenario(flat("fedbuff", K=1, concurrency=1, server_lr=0.7,
                          staleness={"name": "constant"}).model_copy(update={"stop": stop}), tmp_path / "b")
    # one dispatch stream for both protocols: the same devices train from the same models
    ids_a = [x["ids"] for x in lines(tmp_path / "a", "cloud_aggregate")]
    ids_b = [x["ids"] for x in lines(tmp_path / "b", "cloud_aggregate")]
    assert ids_a == ids_b
    np.testing.assert_allclose(a.final_params, b.final_params, rtol=0, atol=1e-7)


def test_max_staleness_drops_and_counts(tmp_path):
    sc = flat("fedasync", max_staleness=1).model_copy(update={"stop": tiny(stop={"rounds": 4}).stop})
    res = run_scenario(sc, tmp_path)
    dropped = lines(tmp_path, "update_dropped")
    # first wave: tau 0, 1 applied; tau 2, 3 dropped; second wave of devices 0, 1: tau = 2-1, 3-2 ... applied
    assert [(d["source"], d["staleness"]) for d in dropped[:2]] == [(2, 2), (3, 2)]
    assert res.summary["totals"]["updates_dropped"] == len(dropped) >= 2
    assert all(t <= 1 for a in lines(tmp_path, "cloud_aggregate") for t in a["staleness"])


def ahfl(**protocol):
    return tiny(protocol={"name": "ahfl", "leader_period": 1.0, "cloud_period": 2.0, **protocol},
                training={"epochs": 1}, evaluation={"every_s": 1.0},
                topology={"edge_servers": 2, "grouping": "round_robin",
                          "edge_cloud": {"uplink_mbps": 100, "downlink_mbps": 100, "latency_ms": 10}},
                stop={"rounds": 2})


def test_ahfl_exact_trace(tmp_path):
    res = run_scenario(ahfl(), tmp_path)
    edges = lines(tmp_path, "edge_aggregate")
    clouds = lines(tmp_path, "cloud_aggregate")
    # device arrivals at CYCLE, 2*CYCLE, 3*CYCLE (~0.64, 1.28, 1.93 s); leader ticks at 1, 2, 3, 4
    first = [e for e in edges if e["t"] == 1.0]
    assert sorted(e["edge"] for e in first) == [0, 1]
    for e in first:
        assert e["ids"] == ([0, 2] if e["edge"] == 0 else [1, 3])
        assert e["staleness"] == [0, 0] and e["weights"] == pytest.approx([0.3, 0.3]) and e["version"] == 1
    second = [e for e in edges if e["t"] == 2.0]
    for e in second:  # each member: one update from v0 (tau 1) and one from v1 (tau 0), n/S = 1/4
        assert e["staleness"] == [1, 1, 0, 0] and e["queue_len"] == 4
        assert e["weights"] == pytest.approx([0.15 / math.sqrt(2)] * 2 + [0.15] * 2)
    # cloud ticks at 2 and 4; at t=2 both leaders' first pushes (arrived 1 + LINK) are queued
    assert [c["t"] for c in clouds] == [2.0, 4.0]
    assert clouds[0]["ids"] == [0, 1] and clouds[0]["staleness"] == [0, 0]
    assert clouds[0]["weights"] == pytest.approx([0.3, 0.3])
    # at t=4: pushes from ticks 2 and 3 of both leaders; the tick-2 pushes started at g=0 (tau 1),
    # the tick-3 pushes at g=1 (the broadcast arrived at 2 + LINK)
    assert clouds[1]["ids"] == [0, 1, 0, 1] and clouds[1]["staleness"] == [1, 1, 0, 0]
    assert clouds[1]["weights"] == pytest.approx([0.3 / math.sqrt(2)] * 2 + [0.3] * 2)
    tot = res.summary["totals"]
    assert tot["cloud_aggregations"] == 2 and tot["bytes_cloud"] == 72 * (6 + 2)  # 6 pushes, 1 broadcast
    assert res.summary["staleness"]["edge"]["max"] <= tot["edge_aggregations"]
    ev = lines(tmp_path, "eval")
    assert {"staleness_mean_edge", "staleness_mean_cloud", "queue_len_edge", "queue_len_cloud"} <= set(ev[-1])
    trace = json.loads((tmp_path / "trace.json").read_text())
    qa = [e for e in trace if e.get("name") == "queue_aggregate"]
    assert {e["cat"] for e in qa} == {"edge", "cloud"}


def test_ahfl_versions_bounded_by_aggregations(tmp_path):
    run_scenario(ahfl(leader_period=0.3, cloud_period=0.7).model_copy(
        update={"stop": tiny(stop={"rounds": 8}).stop}), tmp_path)
    counts: dict[int, int] = {}
    for e in lines(tmp_path, "edge_aggregate"):
        counts[e["edge"]] = counts.get(e["edge"], 0) + 1
        assert e["version"] == counts[e["edge"]] and max(e["staleness"]) < e["version"]
    for k, c in enumerate(lines(tmp_path, "cloud_aggregate"), start=1):
        assert c["version"] == k and max(c["staleness"]) < k


def test_ahfl_alpha_one_single_device_is_local_sgd(tmp_path):
    # one leader, one device, alpha 1, constant sigma: the leader model is the device's model
    sc = tiny(devices={"count": 1}, protocol={"name": "ahfl", "alpha": 1.0, "staleness": {"name": "constant"},
                                              "rho": 0.0, "leader_period": 1.0, "cloud_period": 2.0},
              training={"epochs": 1}, topology={"edge_servers": 1}, stop={"rounds": 1},
              data={"dataset": {"num_samples": 60}})
    res = run_scenario(sc, tmp_path)
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    spec = TrainSpec(epochs=1, batch_size=10, lr=0.1)
    w = b.init_params
    for job in range(2):  # updates of jobs 0 and 1 (arrivals ~0.64 and ~1.28) -> ticks 1 and 2
        w, _ = trainer.train(w, b.dataset.x_train[b.parts[0]], b.dataset.y_train[b.parts[0]], spec,
                             stream_seed(sc.seed, "train", 0, job))
    # cloud at t=2 applies only the tick-1 push (tick-2 push arrives after 2): w0 + 1 * (w1 - w0)
    first, _ = trainer.train(b.init_params, b.dataset.x_train[b.parts[0]], b.dataset.y_train[b.parts[0]], spec,
                             stream_seed(sc.seed, "train", 0, 0))
    np.testing.assert_allclose(res.final_params, first, atol=1e-7)


def test_prox_term_pulls_towards_the_start_model():
    sc = tiny()
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    x, y = b.dataset.x_train[b.parts[0]], b.dataset.y_train[b.parts[0]]
    free, _ = trainer.train(b.init_params, x, y, TrainSpec(epochs=2, batch_size=10, lr=0.1), 5)
    again, _ = trainer.train(b.init_params, x, y, TrainSpec(epochs=2, batch_size=10, lr=0.1, prox=0.0), 5)
    held, _ = trainer.train(b.init_params, x, y, TrainSpec(epochs=2, batch_size=10, lr=0.1, prox=5.0), 5)
    np.testing.assert_array_equal(free, again)  # prox = 0 changes nothing
    assert np.linalg.norm(held - b.init_params) < 0.5 * np.linalg.norm(free - b.init_params)


def test_ahfl_over_fedch_groups_uses_the_balanced_assignment(tmp_path):
    """AHFL with ``topology.grouping: fedch``: each leader's queue holds exactly the members of its
    balanced Hungarian group (2 per edge), here the two devices with the lower pair latency to it."""
    lat = {"dist": "choice", "values": [1.0, 90.0], "weights": [0.5, 0.5]}
    sc = ahfl().model_copy(update={"topology": tiny(topology={
        "edge_servers": 2, "grouping": "fedch", "edge_latency_ms": lat,
        "edge_cloud": {"uplink_mbps": 100, "downlink_mbps": 100, "latency_ms": 10}}).topology})
    built = build(sc)
    w = built.world
    groups = [w.edge_members(e).tolist() for e in range(2)]
    assert sorted(len(g) for g in groups) == [2, 2]
    # the chosen assignment is the best balanced one for the pair latencies (all else is equal)
    import itertools
    cost = sum(w.edge_latency_ms[d, w.edge_of[d]] for d in range(4))
    best = min(sum(w.edge_latency_ms[d, e] for d, e in enumerate(lab))
               for lab in itertools.product(range(2), repeat=4) if sorted(lab) == [0, 0, 1, 1])
    assert cost == pytest.approx(best)
    run_scenario(sc, tmp_path, built=built)
    clusters = [json.loads(x) for x in (tmp_path / "clusters.jsonl").read_text().splitlines()]
    assert clusters[0]["grouping"] == "fedch" and clusters[0]["members"] == groups
    edges = lines(tmp_path, "edge_aggregate")
    assert edges and all(set(e["ids"]) <= set(groups[e["edge"]]) for e in edges)
