"""WSCC (personalisation; docs/explanation/algorithms.md §5.9): cosine similarity, affinity propagation, a planted two-group population."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.core.similarity import cosine_similarity
from hierfl.methods.wscc.math import affinity_clusters, cluster_servers, similarity_summary
from hierfl.driver import run_scenario
from tests.conftest import TINY, tiny
from tests.determinism.test_determinism import metrics_without_wall


def test_cosine_similarity_by_hand():
    s = cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [-2.0, 0.0]]))
    np.testing.assert_allclose(s[0], [1.0, 1 / np.sqrt(2), 0.0, -1.0])
    assert s[2].tolist() == [0.0, 0.0, 0.0, 0.0]  # a zero update is similar to nothing


def test_affinity_propagation_recovers_planted_directions_and_falls_back():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(20), rng.standard_normal(20)
    vecs = np.stack([(a if i % 2 else b) + 0.1 * rng.standard_normal(20) for i in range(10)])
    result = affinity_clusters(cosine_similarity(vecs))  # §5.9 defaults: preference = median(S)
    assert result.fallback is None
    assert result.members == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    summary = similarity_summary(cosine_similarity(vecs), result.labels)
    assert summary["within_mean"] > 0.9 > summary["between_mean"]
    # unbalanced groups (3 and 6): the median preference is a within-group similarity and splits the
    # small group; a lower preference (a knob) gives the two groups
    vecs = np.stack([(a if i % 3 else b) + 0.1 * rng.standard_normal(20) for i in range(9)])
    s = cosine_similarity(vecs)
    assert affinity_clusters(s, preference=float(s.min())).members == [[0, 3, 6], [1, 2, 4, 5, 7, 8]]
    # everyone dissimilar with a high preference: one cluster per client → one cluster (FedAvg)
    s4 = np.array([[1.0, -0.5, -0.4, -0.6], [-0.5, 1.0, -0.55, -0.45], [-0.4, -0.55, 1.0, -0.5],
                   [-0.6, -0.45, -0.5, 1.0]])
    alone = affinity_clusters(s4, preference=1.0)
    assert alone.fallback == "affinity propagation gave every client its own cluster"
    assert alone.members == [[0, 1, 2, 3]]
    same = affinity_clusters(np.ones((3, 3)))  # nobody can be told apart
    assert same.fallback == "all similarities are equal" and same.members == [[0, 1, 2]]


def _planted(over: dict | None = None):
    """8 devices, 60 samples each: even devices hold only labels {0, 1}, odd devices only {2, 3}."""
    over = {"stop": {"rounds": 3}, **(over or {})}
    sc = tiny(protocol={"name": "wscc"}, data={"dataset": {"num_samples": 800, "num_classes": 4},
                                               "local_test_fraction": 0.2},
              devices={"count": 8}, **over)
    b = build(sc)
    y = b.dataset.y_train
    pools = [np.flatnonzero(np.isin(y, [0, 1])), np.flatnonzero(np.isin(y, [2, 3]))]
    b.parts = [pools[d % 2][(d // 2) * 60:(d // 2 + 1) * 60] for d in range(8)]
    b.world.samples[:] = 60
    b.eval_sets = [(d, rows[:48], rows[48:]) for d, rows in enumerate(b.parts)]
    return sc, b


def test_wscc_recovers_a_planted_two_group_population(tmp_path):
    sc, b = _planted()
    res = run_scenario(sc, tmp_path, built=b)
    lines = [json.loads(x) for x in (tmp_path / "clusters.jsonl").read_text().splitlines()]
    warm = lines[1]
    assert warm["reason"] == "warmup" and warm["fallback"] is None
    assert warm["members"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert warm["similarity"]["within_mean"] > 0.9 and warm["similarity"]["between_mean"] < 0.2
    # each device is tested with its own cluster's model: the per-device accuracy is high
    assert res.evals[-1]["device_accuracy_mean"] > 0.9 and res.summary["rounds"] == 3


@pytest.mark.ray
def test_wscc_local_and_ray_identical(tmp_path, ray_session):
    sc, b = _planted({"stop": {"rounds": 2}})
    local = run_scenario(sc, tmp_path / "local", built=b)
    sc_ray, b_ray = _planted({"stop": {"rounds": 2}, "runtime": {"executor": "ray", "workers": 2}})
    ray_res = run_scenario(sc_ray, tmp_path / "ray", built=b_ray)
    assert metrics_without_wall(tmp_path / "ray") == metrics_without_wall(tmp_path / "local")
    assert np.array_equal(ray_res.final_params, local.final_params)
    assert (tmp_path / "ray" / "clusters.jsonl").read_text() == (tmp_path / "local" / "clusters.jsonl").read_text()


def test_wscc_reclustering_writes_a_line_per_reclustering(tmp_path):
    res = run_scenario(tiny(protocol={"name": "wscc", "recluster_every": 2}, stop={"rounds": 5}), tmp_path)
    reasons = [json.loads(x)["reason"] for x in (tmp_path / "clusters.jsonl").read_text().splitlines()]
    assert reasons == ["initial", "warmup", "recluster", "recluster"] and res.summary["rounds"] == 5


# -- clusters on edge servers (docs/explanation/algorithms.md §5.9 step 6) -------------------------------------------------

def test_cluster_server_is_the_home_of_most_members():
    edge_of = np.array([1, 1, 1, 0, 0, 0, 2, -1])
    assert cluster_servers([[0, 1, 3], [3, 4, 5, 6], [0, 3], [6, 7], [7]], edge_of, 3) == [1, 0, 0, 2, 0]
    # [0, 3]: a tie between servers 1 and 0 → the lower id; [7]: no home server → server 0; clusters share 0


def test_wscc_with_edge_servers_aggregates_clusters_at_their_edge(tmp_path):
    # the planted population on 2 edge servers whose homes cross the groups: the even group {0, 2, 4, 6}
    # lives mostly on server 1, the odd group {1, 3, 5, 7} mostly on server 0
    sc, b = _planted({"topology": {"edge_servers": 2}})
    b.world.edge_of = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    res = run_scenario(sc, tmp_path / "edge", built=b)
    warm = [json.loads(x) for x in (tmp_path / "edge" / "clusters.jsonl").read_text().splitlines()][1]
    assert warm["members"] == [[0, 2, 4, 6], [1, 3, 5, 7]] and warm["edges"] == [1, 0]
    lines = [json.loads(x) for x in (tmp_path / "edge" / "metrics.jsonl").read_text().splitlines()]
    aggs = [(x["edge"], x["cluster"], x["participants"]) for x in lines if x["event"] == "edge_aggregate"]
    assert aggs == [(1, 0, 4), (0, 1, 4)] * 2  # rounds 2 and 3, each cluster at its own server
    # devices.csv: each device's server is its cluster's, not its home
    rows = (tmp_path / "edge" / "devices.csv").read_text().splitlines()
    col = rows[0].split(",").index("edge")
    assert [int(r.split(",")[col]) for r in rows[1:]] == [1, 0] * 4
    mb, t = b.world.model_bytes, res.summary["totals"]
    # device tier: 3 rounds × 8 devices × (download + upload); edge tier: 8 warm-up updates relayed to the
    # cloud, 2 cluster models sent down once, 2 × 2 cluster models sent up
    assert t["bytes_device_tier"] == 3 * 8 * 2 * mb
    assert t["bytes_edge_tier"] == t["bytes_cloud"] == (8 + 2 + 4) * mb and t["messages_cloud"] == 14
    assert (t["cloud_aggregations"], t["edge_aggregations"], t["device_updates"]) == (3, 4, 24)
    # the learning is the same as at the cloud (fraction 1: the same members, the same averages); only the
    # transfers moved to the edge tier
    sc0, b0 = _planted()
    flat = run_scenario(sc0, tmp_path / "flat", built=b0)
    assert flat.summary["totals"]["bytes_edge_tier"] == 0
    assert flat.summary["totals"]["bytes_device_tier"] == 3 * 8 * 2 * mb
    assert np.array_equal(res.final_params, flat.final_params)
    assert res.evals[-1]["device_accuracy_mean"] == flat.evals[-1]["device_accuracy_mean"] > 0.9


def test_wscc_with_edge_servers_reclusters_through_relays(tmp_path):
    sc = tiny(protocol={"name": "wscc", "recluster_every": 2}, topology={"edge_servers": 2}, stop={"rounds": 4})
    res = run_scenario(sc, tmp_path)
    lines = [json.loads(x) for x in (tmp_path / "clusters.jsonl").read_text().splitlines()]
    assert [x["reason"] for x in lines] == ["initial", "warmup", "recluster"]
    assert all(len(x["edges"]) == len(x["members"]) for x in lines[1:])
    t = res.summary["totals"]
    # four cloud rounds: 0 the warm-up and 2 (re-clustering) relay every device's update to the cloud; 1 and 3
    # aggregate each cluster at its edge server and send its model up; the cloud sends the cluster models
    # down after the warm-up (k1 clusters) and after re-clustering (k2)
    k1, k2 = len(lines[1]["members"]), len(lines[2]["members"])
    mb = build(sc).world.model_bytes
    assert t["bytes_device_tier"] == 4 * 4 * 2 * mb  # 4 rounds × 4 devices × (download + upload) and res.summary["rounds"] == 4
    assert t["edge_aggregations"] == k1 + k2
    assert t["bytes_edge_tier"] == (4 + 4 + 2 * (k1 + k2)) * mb


@pytest.mark.parametrize(("override", "key"), [
    ({"protocol": {"name": "wscc", "damping": 0.3}}, "protocol.damping"),
    ({"protocol": {"name": "wscc", "fraction": 0.5, "recluster_every": 2}}, "protocol"),
    ({"protocol": {"name": "wscc"}, "server_optimizer": "fedadam"}, "server_optimizer"),
])
def test_bad_wscc_input_exits_2_with_the_key_path(tmp_path, capsys, override, key):
    from hierfl.scenario.loader import deep_merge

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(deep_merge(copy.deepcopy(TINY), override)))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
