"""FedAsync against the fake environment: the exact event trace of a few virtual seconds."""

from hierfl.policies.staleness import PolynomialStaleness
from hierfl.methods.fedasync.protocol import FedAsyncConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 3 devices, 2 training at once; α = 0.5, s(τ) = 1/(τ + 1); unit_s = 1 + 0.5·d, transfers 0.25 s

EXPECTED = [
    (0.0, "tier", "cloud", 0, "track_staleness"),
    # the stream ("async.select", 0) starts devices {0, 1} on version 0
    (0.25, "train_start", "device=0 version=0"),
    (0.25, "train_start", "device=1 version=0"),
    (1.25, "train_done", "device=0 version=0"),
    # τ = 0: α_t = 0.5·1, x ← 0 + 0.5·(1 − 0) = 0.5, version 1; device 0 (drawn again) gets it
    (1.5, "upload_done", "device=0 version=0"),
    (1.5, "tier", "cloud", 0, "step", [0], [(0.5, 1.0, 0.0)], [0], 1, 0.5),
    (1.75, "train_done", "device=1 version=0"),
    (1.75, "train_start", "device=0 version=1"),
    # device 1 trained from version 0, now 1: τ = 1, α_t = 0.25, x ← 0.5 + 0.25·(2 − 0.5) = 0.875
    (2.0, "upload_done", "device=1 version=0"),
    (2.0, "tier", "cloud", 0, "step", [1], [(0.25, 2.0, 0.5)], [1], 2, 0.875),
    (2.25, "train_start", "device=2 version=2"),
    (2.75, "train_done", "device=0 version=1"),   # 1.75 + 1.0
    # device 0 trained from version 1 (0.5 + 1 = 1.5), now 2: τ = 1, x ← 0.875 + 0.25·(1.5 − 0.875)
    (3.0, "upload_done", "device=0 version=1"),
    (3.0, "tier", "cloud", 0, "step", [0], [(0.25, 1.5, 0.875)], [1], 3, 1.03125),
    (3.25, "train_start", "device=0 version=3"),
    # the run stops at t = 4
]


def _run(**knobs):
    env = FakeEnv(FakeWorld([10, 10, 10]))
    cfg = FedAsyncConfig(**{"alpha": 0.5, "staleness": PolynomialStaleness(a=1.0), "concurrency": 2, **knobs})
    return env, env.run(cfg.create(env), until=4.0)


def test_fedasync_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 1.03125


def test_fedasync_trace_follows_its_knobs():
    assert _run(alpha=0.25)[1] != EXPECTED
    assert _run(max_staleness=0)[1] != EXPECTED   # the τ = 1 updates are dropped
