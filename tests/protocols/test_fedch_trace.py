"""FedCH against the fake environment: the exact event trace of two cloud aggregations (edge-server leaders)."""

from hierfl.methods.fedch import FedCHConfig
from tests.fakeenv import FakeEnv, FakeWorld

# edge-server leaders: K = 2 edges, members by balanced assignment = {0, 1} and {2, 3}; H = 1 local step
# (unit_s = 1 + 0.5·d); device ↔ edge 0.25 s, edge ↔ cloud 0.5 s; α = 1 − (K − 1)/N = 0.75, σ(τ) = 1 for
# τ ≤ a = 5; the cloud mixes w ← (1 − α)·w + α·w_cluster as each cluster model arrives
SAMPLES, EDGE_OF = [16, 48, 32, 32], [0, 0, 1, 1]

EXPECTED = [
    # the cloud sends (w = 0, t = 0) to both leaders; each starts a cluster round on arrival
    (0.5, "leader_download_done", "cluster=0 gen=0"),
    (0.5, "leader_download_done", "cluster=1 gen=0"),
    (0.75, "train_start", "device=0 cluster=0 gen=0 round=1 leg='member_down'"),
    (0.75, "train_start", "device=1 cluster=0 gen=0 round=1 leg='member_down'"),
    (0.75, "train_start", "device=2 cluster=1 gen=0 round=1 leg='member_down'"),
    (0.75, "train_start", "device=3 cluster=1 gen=0 round=1 leg='member_down'"),
    (1.75, "train_done", "device=0 cluster=0 gen=0 round=1 leg='member_down'"),
    (2.0, "member_upload_done", "device=0 cluster=0 gen=0 round=1 leg='member_up'"),
    (2.25, "train_done", "device=1 cluster=0 gen=0 round=1 leg='member_down'"),
    # cluster 0's barrier closes: (16·1 + 48·2) / 64 = 1.75, uploaded to the cloud (0.5 s)
    (2.5, "member_upload_done", "device=1 cluster=0 gen=0 round=1 leg='member_up'"),
    (2.5, "tier", "edge", 0, "average", [1.0, 2.0], [16.0, 48.0], 1.75),
    (2.5, "tier", "edge", 0, "aggregated", [0, 1]),
    (2.75, "train_done", "device=2 cluster=1 gen=0 round=1 leg='member_down'"),
    (3.0, "cluster_upload_done", "cluster=0 gen=0 round=1"),
    (3.0, "member_upload_done", "device=2 cluster=1 gen=0 round=1 leg='member_up'"),
    # applied after every arrival of the instant: w = 0.25·0 + 0.75·1.75, t = 1; (w, t) goes back to leader 0
    (3.0, "cloud_apply", ""),
    (3.0, "tier", "cloud", 0, "combine", [(0.25, 0.0, None), (0.75, 1.75, None)], 1.3125),
    (3.0, "tier", "cloud", 0, "applied", [0], [0.75], [0], 1),
    (3.25, "train_done", "device=3 cluster=1 gen=0 round=1 leg='member_down'"),
    (3.5, "leader_download_done", "cluster=0 gen=0"),
    (3.5, "member_upload_done", "device=3 cluster=1 gen=0 round=1 leg='member_up'"),
    (3.5, "tier", "edge", 1, "average", [3.0, 4.0], [32.0, 32.0], 3.5),
    (3.5, "tier", "edge", 1, "aggregated", [2, 3]),
    (3.75, "train_start", "device=0 cluster=0 gen=0 round=2 leg='member_down'"),
    (3.75, "train_start", "device=1 cluster=0 gen=0 round=2 leg='member_down'"),
    # cluster 1 started from t = 0, the cloud is at 1 (τ = 1, σ = 1): w = 0.25·1.3125 + 0.75·3.5; rounds = 2
    (4.0, "cluster_upload_done", "cluster=1 gen=0 round=1"),
    (4.0, "cloud_apply", ""),
    (4.0, "tier", "cloud", 0, "combine", [(0.25, 1.3125, None), (0.75, 3.5, None)], 2.953125),
    (4.0, "tier", "cloud", 0, "applied", [1], [0.75], [1], 2),
]


def _run(**knobs):
    env = FakeEnv(FakeWorld(SAMPLES, EDGE_OF), rounds=2)
    return env, env.run(FedCHConfig(**{"H": 1, **knobs}).create(env))


def test_fedch_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 2.953125


def test_fedch_trace_follows_its_knobs():
    assert _run(H=2)[1] != EXPECTED
    assert _run(alpha_init="fraction")[1] != EXPECTED
    assert _run(fraction=0.5)[1] != EXPECTED   # one member per cluster round
