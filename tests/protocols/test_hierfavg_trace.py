"""HierFAVG against the fake environment: the exact event trace of one cloud round (κ2 = 2 edge rounds)."""

from hierfl.methods.hierfavg.protocol import HierFAVGConfig
from tests.fakeenv import FakeEnv, FakeWorld

# edge 0 = {0, 1}, edge 1 = {2, 3}; unit_s = 1 + 0.5·d per local step (κ1 = 1), device ↔ edge 0.25 s,
# edge ↔ cloud 0.5 s; a job's model = start + d + 1; n_ℓ = 64 for both edges
SAMPLES, EDGE_OF = [16, 48, 32, 32], [0, 0, 1, 1]

EXPECTED = [
    # every edge starts its first round from w = 0 at t = 0 (fraction 1: all members)
    (0.25, "train_start", "device=0 edge=0"),
    (0.25, "train_start", "device=1 edge=0"),
    (0.25, "train_start", "device=2 edge=1"),
    (0.25, "train_start", "device=3 edge=1"),
    (1.25, "train_done", "device=0 edge=0"),
    (1.5, "upload_done", "device=0 edge=0"),
    (1.5, "tier", "edge", 0, "add", 1.0, 16.0),
    (1.75, "train_done", "device=1 edge=0"),
    (2.0, "upload_done", "device=1 edge=0"),
    (2.0, "tier", "edge", 0, "add", 2.0, 48.0),
    # edge 0 closes its round when both members arrived: (16·1 + 48·2) / 64 = 1.75; round 1 of 2 < κ2,
    # so no upload: its next edge round begins at once
    (2.0, "tier", "edge", 0, "commit", [0, 1], 1.75),
    (2.25, "train_done", "device=2 edge=1"),
    (2.25, "train_start", "device=0 edge=0"),
    (2.25, "train_start", "device=1 edge=0"),
    (2.5, "upload_done", "device=2 edge=1"),
    (2.5, "tier", "edge", 1, "add", 3.0, 32.0),
    (2.75, "train_done", "device=3 edge=1"),
    (3.0, "upload_done", "device=3 edge=1"),
    (3.0, "tier", "edge", 1, "add", 4.0, 32.0),
    (3.0, "tier", "edge", 1, "commit", [2, 3], 3.5),   # (3 + 4) / 2
    (3.25, "train_done", "device=0 edge=0"),
    (3.25, "train_start", "device=2 edge=1"),
    (3.25, "train_start", "device=3 edge=1"),
    (3.5, "upload_done", "device=0 edge=0"),
    (3.5, "tier", "edge", 0, "add", 2.75, 16.0),   # 1.75 + 0 + 1
    (3.75, "train_done", "device=1 edge=0"),
    (4.0, "upload_done", "device=1 edge=0"),
    (4.0, "tier", "edge", 0, "add", 3.75, 48.0),
    # edge 0's second round (κ2 = 2): (16·2.75 + 48·3.75) / 64 = 3.5, and its model goes to the cloud (0.5 s)
    (4.0, "tier", "edge", 0, "commit", [0, 1], 3.5),
    (4.5, "edge_upload_done", "edge=0 cloud_round=0"),
    (4.5, "tier", "cloud", 0, "add", 3.5, 64.0),
    (5.25, "train_done", "device=2 edge=1"),
    (5.5, "upload_done", "device=2 edge=1"),
    (5.5, "tier", "edge", 1, "add", 6.5, 32.0),
    (5.75, "train_done", "device=3 edge=1"),
    (6.0, "upload_done", "device=3 edge=1"),
    (6.0, "tier", "edge", 1, "add", 7.5, 32.0),
    (6.0, "tier", "edge", 1, "commit", [2, 3], 7.0),
    # the cloud round closes when both edges arrived: (64·3.5 + 64·7.0) / 128 = 5.25; rounds = 1 ends the run
    (6.5, "edge_upload_done", "edge=1 cloud_round=0"),
    (6.5, "tier", "cloud", 0, "add", 7.0, 64.0),
    (6.5, "tier", "cloud", 0, "commit", [0, 1], 5.25),
]


def _run(**knobs):
    env = FakeEnv(FakeWorld(SAMPLES, EDGE_OF), rounds=1)
    return env, env.run(HierFAVGConfig(**{"kappa1": 1, "kappa2": 2, **knobs}).create(env))


def test_hierfavg_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 5.25


def test_hierfavg_trace_follows_its_knobs():
    assert _run(kappa1=2)[1] != EXPECTED   # jobs twice as long
    assert _run(kappa2=1)[1] != EXPECTED   # every edge round goes to the cloud
