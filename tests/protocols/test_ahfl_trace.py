"""AHFL against the fake environment: the exact event trace of four virtual seconds."""

from hierfl.policies.staleness import ConstantStaleness
from hierfl.methods.ahfl.protocol import AHFLConfig
from tests.fakeenv import FakeEnv, FakeWorld

# leaders = edge 0 {0, 1} and edge 1 {2, 3}; α = 0.5, σ ≡ 1, leader period 2 s, cloud period 3 s;
# unit_s = 1 + 0.5·d, device ↔ edge 0.25 s, edge ↔ cloud 0.5 s; a job's model = start + d + 1
SAMPLES, EDGE_OF = [16, 48, 32, 32], [0, 0, 1, 1]

EXPECTED = [
    (0.0, "tier", "edge", 0, "track_staleness"),
    (0.0, "tier", "cloud", 0, "track_staleness"),
    (0.0, "tier", "edge", 0, "queue", 0),
    (0.0, "tier", "edge", 1, "queue", 0),
    (0.0, "tier", "cloud", 0, "queue", 0),
    # every device pulls its leader's model (w = 0, version 0)
    (0.25, "train_start", "device=0 edge=0 version=0"),
    (0.25, "train_start", "device=1 edge=0 version=0"),
    (0.25, "train_start", "device=2 edge=1 version=0"),
    (0.25, "train_start", "device=3 edge=1 version=0"),
    (1.25, "train_done", "device=0 edge=0 version=0"),
    # an update joins the leader's queue; the device pulls the leader's model again at once
    (1.5, "upload_done", "device=0 edge=0 version=0"),
    (1.5, "tier", "edge", 0, "queue", 1),
    (1.75, "train_done", "device=1 edge=0 version=0"),
    (1.75, "train_start", "device=0 edge=0 version=0"),
    (2.0, "upload_done", "device=1 edge=0 version=0"),   # an arrival goes before the tick of the same instant
    (2.0, "tier", "edge", 0, "queue", 2),
    # leader 0's period: w_0 += (16/64)·0.5·(1 − 0) + (48/64)·0.5·(2 − 0) = 0.875, version 1, pushed to the cloud
    (2.0, "leader_tick", "edge=0"),
    (2.0, "tier", "edge", 0, "queue", 0),
    (2.0, "tier", "edge", 0, "step", [0, 1], [(0.125, 1.0, 0.0), (0.375, 2.0, 0.0)], [0, 0], 1, 0.875),
    (2.0, "leader_tick", "edge=1"),   # leader 1's queue is empty: nothing to apply
    (2.0, "tier", "edge", 1, "queue", 0),
    (2.25, "train_done", "device=2 edge=1 version=0"),
    (2.25, "train_start", "device=1 edge=0 version=0"),
    (2.5, "leader_upload_done", "edge=0 push=0"),
    (2.5, "tier", "cloud", 0, "queue", 1),
    (2.5, "upload_done", "device=2 edge=1 version=0"),
    (2.5, "tier", "edge", 1, "queue", 1),
    (2.75, "train_done", "device=3 edge=1 version=0"),
    (2.75, "train_done", "device=0 edge=0 version=0"),
    (2.75, "train_start", "device=2 edge=1 version=0"),
    (3.0, "upload_done", "device=3 edge=1 version=0"),
    (3.0, "tier", "edge", 1, "queue", 2),
    (3.0, "upload_done", "device=0 edge=0 version=0"),
    (3.0, "tier", "edge", 0, "queue", 1),
    # the cloud's period: w += 0.5·σ(0)·(64/128)·(0.875 − 0) = 0.21875, g = 1, sent to both leaders
    (3.0, "cloud_tick", ""),
    (3.0, "tier", "cloud", 0, "queue", 0),
    (3.0, "tier", "cloud", 0, "step", [0], [(0.25, 0.875, 0.0)], [0], 1, 0.21875),
    (3.25, "train_start", "device=3 edge=1 version=0"),
    (3.25, "train_start", "device=0 edge=0 version=1"),
    # no unpushed progress at either leader: both simply take w = 0.21875
    (3.5, "leader_download_done", "edge=0 version=1"),
    (3.5, "leader_download_done", "edge=1 version=1"),
    (3.75, "train_done", "device=1 edge=0 version=0"),
    (4.0, "upload_done", "device=1 edge=0 version=0"),
    (4.0, "tier", "edge", 0, "queue", 2),
    # both updates trained from leader version 0, now 1 (τ = 1, σ ≡ 1): 0.21875 + 0.125·1 + 0.375·2
    (4.0, "leader_tick", "edge=0"),
    (4.0, "tier", "edge", 0, "queue", 0),
    (4.0, "tier", "edge", 0, "step", [0, 1], [(0.125, 1.0, 0.0), (0.375, 2.0, 0.0)], [1, 1], 2, 1.09375),
    # leader 1: 0.21875 + (32/64)·0.5·3 + (32/64)·0.5·4 = 1.96875; the run stops at t = 4
    (4.0, "leader_tick", "edge=1"),
    (4.0, "tier", "edge", 1, "queue", 0),
    (4.0, "tier", "edge", 1, "step", [2, 3], [(0.25, 3.0, 0.0), (0.25, 4.0, 0.0)], [0, 0], 1, 1.96875),
]


def _run(**knobs):
    env = FakeEnv(FakeWorld(SAMPLES, EDGE_OF))
    cfg = AHFLConfig(**{"alpha": 0.5, "staleness": ConstantStaleness(), "leader_period": 2.0, "cloud_period": 3.0,
                        **knobs})
    return env, env.run(cfg.create(env), until=4.0)


def test_ahfl_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 0.21875


def test_ahfl_trace_follows_its_knobs():
    assert _run(alpha=0.25)[1] != EXPECTED
    assert _run(cloud_period=2.5)[1] != EXPECTED
    assert _run(cloud_weight="devices", leader_period=1.5)[1] != EXPECTED
