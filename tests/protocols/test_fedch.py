"""FedCH on the local executor: exact traces, K = 1 / K = N limits, re-clustering triggers, bad input.

Tiny scenario: 4 devices of 60 samples at 100 samples/s, 72-byte models, every link alike, so
every duration is known: a job of H = 3 steps of 10 samples lasts C = 0.3 s, a cloud → device
download DOWN, a device → cloud upload UP, a device → device hop D2D (§1.2 fallback: the
slower of up/down, both access latencies).
"""

import json

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from tests.conftest import TINY, tiny

C = 0.3
DOWN = 0.020 + 72 * 8 / 1.0e6
UP = 0.020 + 72 * 8 / 0.5e6
D2D = 0.040 + 72 * 8 / 0.5e6
EDGE = 0.020 + 72 * 8 / 1000e6                  # edge ↔ cloud, the default 1000 Mbps / 20 ms link
ROUND = DOWN + D2D + C + D2D + UP               # a cluster with a member: leader download … upload


def fedch(**protocol):
    stop = protocol.pop("stop", {"rounds": 4})
    extra = protocol.pop("extra", {})
    # hand-computed times below assume uncontended links: a device leader's uplink would otherwise be
    # shared by its simultaneous hops to the members (tests/kernel/test_network.py covers contention)
    extra.setdefault("network", {"contention": False})
    return tiny(protocol={"name": "fedch", "K": 2, "H": 3, "lr": 0.1, **protocol}, stop=stop,
                evaluation={"every_s": None}, **extra)


def lines(out, kind=None):
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if kind is None or r["event"] == kind]


def clusters(out):
    return [json.loads(x) for x in (out / "clusters.jsonl").read_text().splitlines()]


def test_two_clusters_trace_timing_and_traffic(tmp_path):
    res = run_scenario(fedch(stop={"rounds": 4}), tmp_path)
    first = clusters(tmp_path)[0]
    # identical devices: leaders are the lowest ids (ties), each cluster gets one more member
    assert first["leaders"] == [0, 1] and first["K"] == 2 and first["reason"] == "initial"
    assert sorted(len(m) for m in first["members"]) == [2, 2] and first["alpha"] == pytest.approx(0.75)
    assert np.array(first["cost"]).shape == (4, 4) and first["total_cost"] == pytest.approx(2 * D2D)
    aggs = lines(tmp_path, "cloud_aggregate")
    # both clusters finish together every ROUND; applied lower cluster id first
    assert [a["ids"] for a in aggs] == [[0], [1], [0], [1]]
    assert [a["t"] for a in aggs] == pytest.approx([ROUND, ROUND, 2 * ROUND, 2 * ROUND], abs=1e-9)
    # version 1 and 2 at ROUND: cluster 1 applies one version late; after that both restart 1 apart
    assert [a["staleness"] for a in aggs] == [[0], [1], [1], [1]]
    assert all(a["weights"] == [pytest.approx(0.75)] for a in aggs)
    edges = lines(tmp_path, "edge_aggregate")
    assert [e["round_s"] for e in edges[:2]] == pytest.approx([2 * D2D + C] * 2, abs=1e-9)
    tot = res.summary["totals"]
    # per cluster round: one member hop down and one up (d2d), one leader upload; leaders download
    # at t = 0 and after every aggregation except the last two (the run stops at round 4)
    assert tot["bytes_d2d"] == 72 * 2 * 2 * 2 and tot["edge_aggregations"] == 4 and tot["device_updates"] == 8
    assert tot["messages_cloud"] == 4 + (2 + 3) and tot["bytes_cloud"] == 72 * 9


def test_k1_is_synchronous_fedavg(tmp_path):
    ch = run_scenario(fedch(K=1, stop={"rounds": 3}), tmp_path / "ch")
    avg = run_scenario(tiny(protocol={"name": "fedavg", "fraction": 1.0}, training={"epochs": None, "steps": 3},
                            stop={"rounds": 3}), tmp_path / "avg")
    # α = 1 − (1 − 1)/N = 1: the global model is replaced by the one cluster's average of all devices
    aggs = lines(tmp_path / "ch", "cloud_aggregate")
    assert [(a["weights"], a["staleness"]) for a in aggs] == [([1.0], [0])] * 3
    assert [e["participants"] for e in lines(tmp_path / "ch", "edge_aggregate")] == [4, 4, 4]
    assert [a["t"] for a in aggs] == pytest.approx([ROUND, 2 * ROUND, 3 * ROUND], abs=1e-9)
    # same jobs, same seeds, same summation order: bit-identical to FedAvg with all devices
    np.testing.assert_array_equal(ch.final_params, avg.final_params)


def test_k_equals_n_is_asynchronous_mixing(tmp_path):
    res = run_scenario(fedch(K=4, a=1, b=1, stop={"rounds": 8}), tmp_path)
    first = clusters(tmp_path)[0]
    assert first["members"] == [[0], [1], [2], [3]] and first["leaders"] == [0, 1, 2, 3]
    assert first["alpha"] == pytest.approx(0.25) and first["total_cost"] == 0.0
    aggs = lines(tmp_path, "cloud_aggregate")
    cycle = DOWN + C + UP  # a cluster of one: no device-to-device hop
    assert [a["ids"][0] for a in aggs] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [a["t"] for a in aggs] == pytest.approx([cycle] * 4 + [2 * cycle] * 4, abs=1e-9)
    # first wave: τ = 0..3 → α_τ = 0.25 (τ ≤ a = 1) then 0.25·τ^(−1); second wave: all τ = 3
    assert [a["staleness"][0] for a in aggs] == [0, 1, 2, 3, 3, 3, 3, 3]
    expect = [0.25, 0.25, 0.125, 0.25 / 3] + [0.25 / 3] * 4
    assert [a["weights"][0] for a in aggs] == pytest.approx(expect)
    assert res.summary["totals"]["bytes_d2d"] == 0


def test_staleness_key_picks_any_library_function(tmp_path):
    """``staleness: {name: fedch, a, b}`` is the a/b keys; another σ (here polynomial(0.5)) replaces it."""
    run_scenario(fedch(K=4, a=1, b=1, stop={"rounds": 8}), tmp_path / "ab")
    run_scenario(fedch(K=4, staleness={"name": "fedch", "a": 1, "b": 1}, stop={"rounds": 8}), tmp_path / "named")
    ab, named = lines(tmp_path / "ab", "cloud_aggregate"), lines(tmp_path / "named", "cloud_aggregate")
    assert [a["weights"] for a in ab] == [a["weights"] for a in named]
    run_scenario(fedch(K=4, staleness={"name": "polynomial", "a": 0.5}, stop={"rounds": 8}), tmp_path / "poly")
    poly = lines(tmp_path / "poly", "cloud_aggregate")
    assert [a["staleness"][0] for a in poly] == [0, 1, 2, 3, 3, 3, 3, 3]   # the same arrival order
    assert [a["weights"][0] for a in poly] == pytest.approx([0.25 * (1 + t) ** -0.5 for t in [0, 1, 2, 3, 3, 3, 3, 3]])


def test_first_mix_is_hand_computed(tmp_path):
    sc = fedch(K=4, stop={"rounds": 1})
    res = run_scenario(sc, tmp_path)
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    idx = b.parts[0]
    y, _ = trainer.train(b.init_params, b.dataset.x_train[idx], b.dataset.y_train[idx],
                         TrainSpec(epochs=None, steps=3, batch_size=10, lr=0.1), stream_seed(sc.seed, "train", 0, 0))
    expect = (0.75 * b.init_params.astype(np.float64) + 0.25 * y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(res.final_params, expect)


def test_periodic_reclustering_fires_every_rho_k_aggregations(tmp_path):
    run_scenario(fedch(recluster={"name": "periodic", "rho": 1}, stop={"rounds": 7}), tmp_path)
    rec = lines(tmp_path, "recluster")
    # T_b = ϱ·K = 2: after aggregations 2, 4, 6; new clusters restart from the leaders' download
    assert [r["version"] for r in rec] == [2, 4, 6] and {r["reason"] for r in rec} == {"periodic"}
    assert [r["t"] for r in rec] == pytest.approx([ROUND, 2 * ROUND, 3 * ROUND], abs=1e-9)
    lines_ = clusters(tmp_path)
    assert [c["reason"] for c in lines_] == ["initial", "periodic", "periodic", "periodic"]
    assert [c["generation"] for c in lines_] == [0, 1, 2, 3]
    assert all(c["trigger"]["after_aggregation"] == 2 * (i + 1) for i, c in enumerate(lines_[1:]))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert sum(1 for e in trace if e["name"] == "recluster") == 3


def adaptive_world(tmp_path, recluster):
    """Device 3 (a member, not a leader) computes 10× slower from t = 2·ROUND on: a scenario-level
    slowdown event, placed between two of its jobs (the one of round 1 ends at DOWN + ROUND + D2D + C
    < 2·ROUND, the one of round 2 starts at DOWN + 2·ROUND + D2D), so the first slowed job is
    slowed from its start to its end."""
    sc = fedch(recluster=recluster, stop={"rounds": 14},
               extra={"events": [{"at_s": 2 * ROUND, "slowdown": {"select": {"ids": [3]}, "factor": 10}}]})
    return run_scenario(sc, tmp_path)


def test_adaptive_reclustering_fires_exactly_when_the_trace_says(tmp_path):
    res = adaptive_world(tmp_path, {"name": "adaptive", "gamma": 1.5, "k_tilde": 1})
    first = clusters(tmp_path)[0]
    slow = next(c for c, m in enumerate(first["members"]) if 3 in m)
    assert 3 not in first["leaders"]
    # rounds start at DOWN + m·ROUND; device 3's job of round m = 2 starts after the slowdown and
    # lasts 10·C, so that round takes 2·D2D + 10·C > 1.5 × (2·D2D + C): flagged, and its upload
    # lands at 3·ROUND + 9·C. The other cluster has aggregated at ROUND·1..9 by then: 2 + 9 + 1 = 12
    flagged = [e for e in lines(tmp_path, "edge_aggregate") if e["straggler"]]
    assert [(e["cluster"], e["round_s"]) for e in flagged] == [(slow, pytest.approx(2 * D2D + 10 * C))]
    rec = lines(tmp_path, "recluster")
    assert len(rec) == 1 and rec[0]["reason"] == "adaptive" and rec[0]["version"] == 12
    assert rec[0]["t"] == pytest.approx(3 * ROUND + 9 * C, abs=1e-9)
    second = clusters(tmp_path)[1]
    assert second["trigger"]["flagged"] == [slow] and second["trigger"]["after_aggregation"] == 12
    # the construction measured the world as it is now: device 3 is 10× slower
    assert second["compute_s"] == pytest.approx([C, C, C, 10 * C])
    assert res.summary["rounds"] == 14


def test_never_does_not_recluster_under_the_same_slowdown(tmp_path):
    adaptive_world(tmp_path, {"name": "never"})
    assert lines(tmp_path, "recluster") == [] and len(clusters(tmp_path)) == 1
    assert not any(e["straggler"] for e in lines(tmp_path, "edge_aggregate"))


def test_sync_timeout_closes_with_what_arrived(tmp_path):
    sc = fedch(K=1, sync_timeout=0.5, stop={"rounds": 2})
    built = build(sc)
    built.world.speed_sps[2] = 10.0  # device 2 needs 3 s: late for a 0.5 s timeout
    run_scenario(sc, tmp_path, built=built)
    edges = lines(tmp_path, "edge_aggregate")
    assert [(e["ids"], e["missing"]) for e in edges] == [([0, 1, 3], 1), ([0, 1, 3], 1)]
    assert [e["round_s"] for e in edges] == pytest.approx([0.5, 0.5], abs=1e-9)
    aggs = lines(tmp_path, "cloud_aggregate")
    assert [a["t"] for a in aggs] == pytest.approx([DOWN + 0.5 + UP, 2 * (DOWN + 0.5 + UP)], abs=1e-9)


def test_leader_that_does_not_train(tmp_path):
    run_scenario(fedch(leader_trains=False, stop={"rounds": 2}), tmp_path)
    edges = lines(tmp_path, "edge_aggregate")
    assert [(e["leader"], e["participants"]) for e in edges] == [(0, 1), (1, 1)]


def test_edge_servers_are_fixed_leaders_with_a_balanced_assignment(tmp_path):
    sc = fedch(K="auto", stop={"rounds": 2}, extra={"topology": {"edge_servers": 2, "grouping": "nearest"}})
    res = run_scenario(sc, tmp_path)
    first = clusters(tmp_path)[0]
    assert first["leaders"] == ["edge 0", "edge 1"] and first["leader_kind"] == "edge"
    assert first["k_choice"] == {"rule": "edge_servers", "K": 2}
    # all devices alike and no extra edge latency: every device costs C + UP to either edge
    assert [len(m) for m in first["members"]] == [2, 2] and first["total_cost"] == pytest.approx(4 * (C + UP))
    import csv
    edge_of = {int(r["device"]): int(r["edge"]) for r in csv.DictReader((tmp_path / "devices.csv").open())}
    assert all(edge_of[d] == e for e, m in enumerate(first["members"]) for d in m)
    aggs = lines(tmp_path, "cloud_aggregate")
    assert [a["t"] for a in aggs] == pytest.approx([EDGE + DOWN + C + UP + EDGE] * 2, abs=1e-9)
    tot = res.summary["totals"]
    # edges: 2 downloads at t = 0, 2 uploads, 1 download after the first aggregation (the second stops the run)
    assert tot["bytes_d2d"] == 0 and tot["bytes_edge_tier"] == 72 * 5 and tot["bytes_device_tier"] == 72 * 8


def test_k_auto_records_the_objective(tmp_path):
    sc = fedch(K="auto", stop={"rounds": 2, "virtual_time_s": 60})
    run_scenario(sc, tmp_path)
    choice = clusters(tmp_path)[0]["k_choice"]
    # N = 4: K ∈ [1, ⌊5/2⌋]; with the §2.4 default constants the noise floor dominates and K* = 1
    assert choice["rule"] == "auto" and sorted(choice["objective"]) == ["1", "2"] and choice["K"] == 1
    assert choice["budget_s"] == 60 and choice["compute_s"] == pytest.approx(C)
    assert clusters(tmp_path)[0]["K"] == 1


@pytest.mark.parametrize("protocol,extra,path,text", [
    ({"K": 0}, {}, "protocol.K", "integer number of clusters in 1..devices.count"),
    ({"K": 5}, {}, "protocol.K", "allowed: 1..4"),
    ({"K": "many"}, {}, "protocol.K", "'auto' or an integer"),
    ({"K": "auto"}, {"devices": {"count": 2}}, "protocol.K", "at least 3 devices"),
    ({"K": "auto"}, {"stop": {"rounds": 3}}, "protocol.kstar.budget_s", "time budget"),
    ({"a": -1}, {}, "protocol.a", "greater than or equal to 0"),
    ({"b": -0.5}, {}, "protocol.b", "greater than or equal to 0"),
    ({"recluster": {"name": "adaptive", "gamma": 1.0}}, {}, "protocol.recluster.gamma", "greater than 1"),
    ({"recluster": {"name": "adaptive", "k_tilde": 3}}, {}, "protocol.recluster.k_tilde", "allowed: 1..2"),
    ({"recluster": {"name": "sometimes"}}, {}, "protocol.recluster", "adaptive"),
    ({"K": 3}, {"topology": {"edge_servers": 2}}, "protocol.K", "allowed: 2 or auto"),
    ({"K": 1, "alpha_init": "fraction"}, {}, "protocol.alpha_init", "one_minus"),
    ({"slowdowns": [{"at_s": 1, "devices": [3], "factor": 2}]}, {}, "protocol.slowdowns", "unknown key"),
    ({"a": 2, "staleness": {"name": "constant"}}, {}, "protocol.staleness", "not both"),
    ({"staleness": {"name": "sometimes"}}, {}, "protocol.staleness", "polynomial"),
])
def test_bad_input_exit_2_with_key_path(tmp_path, capsys, protocol, extra, path, text):
    raw = {**TINY, "protocol": {"name": "fedch", "K": 2, **protocol}, "stop": {"rounds": 3, "virtual_time_s": 50}}
    for key, value in extra.items():
        raw[key] = {**raw.get(key, {}), **value} if key != "stop" else value
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert main(["run", str(scen), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert path in err and text in err and "Traceback" not in err, err
    assert not out.exists()


def test_topology_grouping_fedch_is_a_balanced_optimal_edge_assignment():
    import itertools

    sc = tiny(devices={"count": 6}, topology={"edge_servers": 3, "grouping": "fedch",
                                             "edge_latency_ms": {"dist": "uniform", "low": 1, "high": 80}})
    world = build(sc).world
    assert np.bincount(world.edge_of, minlength=3).tolist() == [2, 2, 2]
    # compute and access-link terms are the same for every edge, so only the pair latency decides
    lat = world.edge_latency_ms
    chosen = sum(lat[i, world.edge_of[i]] for i in range(6))
    best = min(sum(lat[i, e] for i, e in enumerate(labels))
               for labels in itertools.product(range(3), repeat=6) if sorted(labels) == [0, 0, 1, 1, 2, 2])
    assert chosen == pytest.approx(best) and best < sum(lat[i, i % 3] for i in range(6))
