"""FedBuff against the fake environment: the exact event trace of a few virtual seconds."""

from hierfl.policies.staleness import ConstantStaleness
from hierfl.methods.fedbuff.protocol import FedBuffConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 3 devices, 2 training at once, a buffer of K = 2, s(τ) = 1, η_g = 1; unit_s = 1 + 0.5·d, transfers 0.25 s

EXPECTED = [
    (0.0, "tier", "cloud", 0, "track_staleness"),
    (0.0, "tier", "cloud", 0, "queue", 0),
    (0.25, "train_start", "device=0 version=0"),
    (0.25, "train_start", "device=1 version=0"),
    (1.25, "train_done", "device=0 version=0"),
    # device 0's Δ waits in the buffer; the stream draws device 0 again, still on version 0
    (1.5, "upload_done", "device=0 version=0"),
    (1.5, "tier", "cloud", 0, "queue", 1),
    (1.75, "train_done", "device=1 version=0"),
    (1.75, "train_start", "device=0 version=0"),
    # the K-th update: x ← 0 + (1/2)·(1 − 0) + (1/2)·(2 − 0) = 1.5, version 1, the buffer empties
    (2.0, "upload_done", "device=1 version=0"),
    (2.0, "tier", "cloud", 0, "queue", 2),
    (2.0, "tier", "cloud", 0, "step", [0, 1], [(0.5, 1.0, 0.0), (0.5, 2.0, 0.0)], [0, 0], 1, 1.5),
    (2.0, "tier", "cloud", 0, "queue", 0),
    (2.25, "train_start", "device=2 version=1"),
    (2.75, "train_done", "device=0 version=0"),
    (3.0, "upload_done", "device=0 version=0"),
    (3.0, "tier", "cloud", 0, "queue", 1),
    (3.25, "train_start", "device=0 version=1"),
    # the run stops at t = 4 with one update buffered
]


def _run(**knobs):
    env = FakeEnv(FakeWorld([10, 10, 10]))
    cfg = FedBuffConfig(**{"K": 2, "concurrency": 2, "staleness": ConstantStaleness(), **knobs})
    return env, env.run(cfg.create(env), until=4.0)


def test_fedbuff_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 1.5


def test_fedbuff_trace_follows_its_knobs():
    assert _run(K=1)[1] != EXPECTED
    assert _run(server_lr=0.5)[1] != EXPECTED
