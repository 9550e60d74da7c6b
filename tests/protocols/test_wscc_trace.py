"""WSCC against the fake environment: the exact event trace of the warm-up and one cluster round."""

import numpy as np

from hierfl.methods.wscc.protocol import WSCCConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 4 devices talking to the cloud; the cloud's similarity matrix is fixed: {0, 1} alike, {2, 3} alike
SIMILARITY = np.array([[1, 1, -1, -1], [1, 1, -1, -1], [-1, -1, 1, 1], [-1, -1, 1, 1]], dtype=float)
SAMPLES = [16, 48, 32, 32]

EXPECTED = [
    # warm-up: every device trains one epoch from w0 = 0
    (0.25, "train_start", "device=0 round=0 cluster=-1"),
    (0.25, "train_start", "device=1 round=0 cluster=-1"),
    (0.25, "train_start", "device=2 round=0 cluster=-1"),
    (0.25, "train_start", "device=3 round=0 cluster=-1"),
    (1.25, "train_done", "device=0 round=0 cluster=-1"),
    (1.5, "upload_done", "device=0 round=0 cluster=-1"),
    (1.75, "train_done", "device=1 round=0 cluster=-1"),
    (2.0, "upload_done", "device=1 round=0 cluster=-1"),
    (2.25, "train_done", "device=2 round=0 cluster=-1"),
    (2.5, "upload_done", "device=2 round=0 cluster=-1"),
    (2.75, "train_done", "device=3 round=0 cluster=-1"),
    (3.0, "upload_done", "device=3 round=0 cluster=-1"),
    # everyone is in: affinity propagation on the matrix finds {0, 1} and {2, 3}; each cluster's model is
    # its members' sample-weighted average, the cloud's the clusters' (64·1.75 + 64·3.5) / 128 = 2.625
    (3.0, "tier", "cloud", 0, "similarity", [1.0, 2.0, 3.0, 4.0]),
    (3.0, "tier", "cloud", 0, "average", [1.0, 2.0], [16.0, 48.0], 1.75),
    (3.0, "tier", "cloud", 0, "average", [3.0, 4.0], [32.0, 32.0], 3.5),
    (3.0, "tier", "cloud", 0, "add", 1.75, 64.0),
    (3.0, "tier", "cloud", 0, "add", 3.5, 64.0),
    (3.0, "tier", "cloud", 0, "commit", [0, 1, 2, 3], 2.625),
    # round 1: each device trains from its cluster's model (1.75 or 3.5)
    (3.25, "train_start", "device=0 round=1 cluster=0"),
    (3.25, "train_start", "device=1 round=1 cluster=0"),
    (3.25, "train_start", "device=2 round=1 cluster=1"),
    (3.25, "train_start", "device=3 round=1 cluster=1"),
    (4.25, "train_done", "device=0 round=1 cluster=0"),
    (4.5, "upload_done", "device=0 round=1 cluster=0"),
    (4.75, "train_done", "device=1 round=1 cluster=0"),
    (5.0, "upload_done", "device=1 round=1 cluster=0"),
    (5.25, "train_done", "device=2 round=1 cluster=1"),
    (5.5, "upload_done", "device=2 round=1 cluster=1"),
    (5.75, "train_done", "device=3 round=1 cluster=1"),
    (6.0, "upload_done", "device=3 round=1 cluster=1"),
    # cluster 0: (16·2.75 + 48·3.75) / 64 = 3.5; cluster 1: (6.5 + 7.5) / 2 = 7.0; cloud (3.5 + 7) / 2
    (6.0, "tier", "cloud", 0, "average", [2.75, 3.75], [16.0, 48.0], 3.5),
    (6.0, "tier", "cloud", 0, "average", [6.5, 7.5], [32.0, 32.0], 7.0),
    (6.0, "tier", "cloud", 0, "add", 3.5, 64.0),
    (6.0, "tier", "cloud", 0, "add", 7.0, 64.0),
    (6.0, "tier", "cloud", 0, "commit", [0, 1, 2, 3], 5.25),
]


def _run(similarity=SIMILARITY, **knobs):
    env = FakeEnv(FakeWorld(SAMPLES), rounds=2, similarity=similarity)
    return env, env.run(WSCCConfig(**knobs).create(env))


def test_wscc_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 5.25


def test_wscc_trace_follows_its_knobs():
    assert _run(warmup_epochs=2)[1] != EXPECTED
    assert _run(fraction=0.5)[1] != EXPECTED
    assert _run(similarity=np.ones((4, 4)))[1] != EXPECTED   # one cluster
