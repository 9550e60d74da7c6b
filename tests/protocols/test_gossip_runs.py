"""Serverless protocols through the real driver: bad input, per-link values, resume, the observer's line."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from hierfl.driver import resume_run, run_scenario
from hierfl.scenario.loader import deep_merge, load_scenario
from tests.badinput import assert_refused
from tests.conftest import TINY, tiny
from tests.driver.test_recovery import assert_same_run

ROOT = Path(__file__).resolve().parents[2]
RING = {"topology": {"device_graph": {"name": "ring"}}, "stop": {"virtual_time_s": 3.0}}


def _raw(**override: Any) -> dict[str, Any]:
    return deep_merge(copy.deepcopy(TINY), override)


@pytest.mark.parametrize("override,key", [
    ({"protocol": {"name": "dpsgd"}, "stop": {"virtual_time_s": 3.0}}, "topology.device_graph"),
    ({"protocol": {"name": "adpsgd"}, "topology": {"device_graph": {"name": "ring"}}}, "stop.virtual_time_s"),
    ({"protocol": {"name": "p2p"}, **RING, "topology": {"device_graph": {"name": "torus", "rows": 3}}},
     "topology.device_graph.rows"),
    ({"protocol": {"name": "dpsgd"}, **RING, "topology": {"device_graph": {"name": "k_regular", "k": 3}}},
     "topology.device_graph.k"),
    ({"protocol": {"name": "dpsgd"}, **RING,
      "topology": {"device_graph": {"name": "edges", "edges": [{"a": 0, "b": 7}]}}}, "topology.device_graph.edges.0"),
    ({"protocol": {"name": "dpsgd", "local_epochs": 1}, **RING}, "protocol.local_steps"),
    ({"protocol": {"name": "p2p", "belief": "gaussian"}, **RING}, "protocol.belief"),
    ({"protocol": {"name": "dpsgd"}, **RING, "topology": {"device_graph": {"name": "hypercube"}}},
     "topology.device_graph"),
])
def test_bad_serverless_input_exits_2(tmp_path, capsys, override, key) -> None:
    assert_refused(tmp_path, capsys, _raw(**override), key)


def test_graph_links_set_the_hop_time(tmp_path) -> None:
    """A per-link bandwidth and latency replace min(up_i, down_j) and the access latencies."""
    sc = tiny(protocol={"name": "dpsgd"}, stop={"virtual_time_s": 1.0},
              topology={"device_graph": {"name": "edges", "link": {"latency_ms": 7.0},
                                         "edges": [{"a": 0, "b": 1, "bandwidth_mbps": 0.25}, {"a": 1, "b": 2},
                                                   {"a": 2, "b": 3, "latency_ms": 1.0}]}})
    from hierfl.assemble import build
    world = build(sc).world
    assert world.d2d_bandwidth_mbps(0, 1) == 0.25 and world.d2d_bandwidth_mbps(1, 0) == 0.25
    assert world.d2d_bandwidth_mbps(1, 2) == min(0.5, 1.0)       # no bandwidth of its own: min(up_1, down_2)
    assert world.d2d_latency_ms(1, 2) == 7.0 and world.d2d_latency_ms(2, 3) == 1.0
    world.model_bytes = 1000
    # 1000 bytes at 0.25 Mbit/s = 0.032 s, plus 7 ms
    assert world.d2d_s(0, 1) == pytest.approx(8000 / 0.25e6 + 0.007)


def test_eval_lines_carry_the_observer_fields(tmp_path) -> None:
    res = run_scenario(tiny(protocol={"name": "dpsgd", "local_steps": 2}, **RING), tmp_path)
    evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["event"] == "eval"]
    assert evals[0]["consensus_distance"] == 0.0 and evals[0]["mixings"] == 0  # everyone starts from one model
    assert evals[-1]["mixings"] > 0 and evals[-1]["consensus_distance"] > 0
    assert evals[-1]["node_steps_max"] - evals[-1]["node_steps_min"] <= 2  # a ring of 4: neighbours wait
    assert res.summary["rounds"] == 0 and res.summary["final_accuracy"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["p2p_rgg", "adpsgd_torus", "coop"])
def test_resume_ends_as_the_uninterrupted_run(tmp_path, stem) -> None:
    """Interrupted at 8 virtual seconds, with a checkpoint taken after 4 (checkpoints every wall second; the
    progress callback waits one wall second at 4 s, so one is taken mid-run on a fast machine too), and resumed
    from it: the same files as the uninterrupted run of 12 virtual seconds."""
    path = ROOT / "scenarios" / f"{stem}.yaml"
    sets = ["runtime.executor=local", "runtime.checkpoint.every_s=1", "stop.virtual_time_s=12"]
    if stem == "coop":
        sets.append("runtime.checkpoint.every_cloud_aggregations=50")
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, sets), ref, source=str(path))
    waited: list[float] = []

    def stop(t: float, rounds: int, acc: float | None) -> None:
        if t >= 4 and not waited:
            waited.append(t)
            time.sleep(1.05)  # (wall time only: the emulation never reads the clock)
        if t >= 8:
            raise KeyboardInterrupt

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, sets), out, progress=stop, source=str(path))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert 4 <= summary["checkpoint_t"] < 8  # resumed from mid-run, not from the start
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_adpsgd_with_churn_runs_and_repeats_bit_for_bit(tmp_path) -> None:
    """Pairwise gossip while devices come and go: exchanges go on, and a second run is identical."""
    sc = tiny(protocol={"name": "adpsgd", "local_steps": 2}, stop={"virtual_time_s": 8.0},
              devices={"count": 6, "availability": {"name": "markov", "mean_up_s": 2, "mean_down_s": 1}},
              topology={"device_graph": {"name": "k_regular", "k": 2}})
    a = run_scenario(sc, tmp_path / "a")
    b = run_scenario(sc, tmp_path / "b")
    evals = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    last = [e for e in evals if e["event"] == "eval"][-1]
    assert last["gossip_exchanges"] > 0 and a.summary["totals"]["devices_lost"] > 0
    strip = lambda text: [{k: v for k, v in json.loads(x).items() if k not in ("wall_s", "startup_s")}
                            for x in text.splitlines()]
    assert strip((tmp_path / "a" / "metrics.jsonl").read_text()) == strip((tmp_path / "b" / "metrics.jsonl").read_text())
    assert (a.final_params == b.final_params).all()


def test_neighbour_messages_share_links_in_the_network_model(tmp_path) -> None:
    """Star 0 – {1, 2, 3}: node 0's three messages share its 0.5 Mbit/s uplink; the three messages to
    node 0 share its 1 Mbit/s downlink. 72-byte models, 20 + 20 ms latency."""
    sc = tiny(protocol={"name": "dpsgd", "local_steps": None, "local_epochs": 1}, stop={"virtual_time_s": 1.3},
              topology={"device_graph": {"name": "edges", "edges": [{"a": 0, "b": k} for k in (1, 2, 3)]}})
    run_scenario(sc, tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    sends = [e for e in (trace if isinstance(trace, list) else trace["traceEvents"]) if e.get("name") == "gossip_send"]
    out_of_0 = [e["dur"] / 1e6 for e in sends if e["tid"] == 0][:3]
    into_0 = [e["dur"] / 1e6 for e in sends if e["tid"] != 0][:3]
    bits = 72 * 8
    assert out_of_0 == pytest.approx([0.040 + 3 * bits / 0.5e6] * 3)   # a third of the uplink each
    assert into_0 == pytest.approx([0.040 + bits / (1.0e6 / 3)] * 3)   # a third of node 0's downlink each


def test_node_accuracies_with_local_test_sets(tmp_path) -> None:
    """Each node is tested on the devices' own test data with its own model."""
    sc = tiny(protocol={"name": "dpsgd", "local_steps": 2}, data={"local_test_fraction": 0.2}, **RING)
    run_scenario(sc, tmp_path)
    evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = [e for e in evals if e["event"] == "eval"][-1]
    assert 0 < last["device_accuracy_mean"] <= 1 and "device_accuracy_p10" in last


def test_device_graph_from_files(tmp_path) -> None:
    """A YAML edge list (the shipped one) and the same graph as GraphML give the same graph and links."""
    import networkx as nx

    sc = tiny(protocol={"name": "dpsgd"}, devices={"count": 6}, stop={"virtual_time_s": 1.0},
              topology={"device_graph": {"name": "file", "path": str(ROOT / "topologies" / "ring6-d2d.yaml")}})
    from hierfl.assemble import build
    world = build(sc).world
    g = world.device_graph
    assert g.edges == ((0, 1), (0, 3), (0, 5), (1, 2), (2, 3), (3, 4), (4, 5))
    assert world.d2d_bandwidth_mbps(3, 0) == 1.0 and world.d2d_latency_ms(0, 3) == 80.0
    assert world.d2d_bandwidth_mbps(0, 1) == 0.5 and world.d2d_latency_ms(0, 1) == 40.0  # access links
    graph = nx.Graph()
    graph.add_nodes_from(str(i) for i in range(6))
    graph.add_edges_from((str(a), str(b)) for a, b in g.edges if (a, b) != (0, 3))
    graph.add_edge("0", "3", bandwidth_mbps=1.0, latency_ms=80.0)
    nx.write_graphml(graph, tmp_path / "ring6.graphml")
    sc2 = tiny(protocol={"name": "dpsgd"}, devices={"count": 6}, stop={"virtual_time_s": 1.0},
               topology={"device_graph": {"name": "file", "path": str(tmp_path / "ring6.graphml")}})
    assert build(sc2).world.device_graph == g


@pytest.mark.parametrize("text,needle", [
    ("nodes: 5\nedges: [{a: 0, b: 1}]\n", "5 nodes but devices.count is 4"),
    ("edges: [{a: 0, b: 9}]\n", "ends must be two different devices"),
    ("edges: [{a: 0, b: 1}, {a: 1, b: 0}]\n", "given twice"),
    ("edges: [{a: 0, b: 1, latency_ms: -3}]\n", "finite number >= 0"),
    ("edges: [{a: 0, c: 1}]\n", "an edge is"),
    ("links: []\n", "a list `edges`"),
])
def test_bad_graph_file_exits_2(tmp_path, capsys, text, needle) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text(text)
    raw = _raw(protocol={"name": "dpsgd"}, stop={"virtual_time_s": 1.0},
               topology={"device_graph": {"name": "file", "path": str(bad)}})
    assert_refused(tmp_path, capsys, raw, "topology.device_graph.path")
    raw["topology"]["device_graph"]["path"] = str(tmp_path / "missing.yaml")
    assert_refused(tmp_path, capsys, raw, "file not found")
