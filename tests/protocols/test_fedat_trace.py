"""FedAT against the fake environment: the exact event trace of a few virtual seconds."""

from hierfl.methods.fedat.protocol import FedATConfig
from tests.fakeenv import FakeEnv, FakeWorld

# response times 0.25 + (1 + 0.5·d) + 0.25 split into M = 2 tiers: tier 0 = {0, 1}, tier 1 = {2, 3};
# fraction 1 (every member each tier round); a job's model = start + d + 1

EXPECTED = [
    (0.0, "tier", "cloud", 0, "track_staleness"),
    (0.25, "train_start", "device=0 tier=0 round=0"),
    (0.25, "train_start", "device=1 tier=0 round=0"),
    (0.25, "train_start", "device=2 tier=1 round=0"),
    (0.25, "train_start", "device=3 tier=1 round=0"),
    (1.25, "train_done", "device=0 tier=0 round=0"),
    (1.5, "upload_done", "device=0 tier=0 round=0"),
    (1.75, "train_done", "device=1 tier=0 round=0"),
    (2.0, "upload_done", "device=1 tier=0 round=0"),
    # tier 0's round closes: its model (16·1 + 48·2) / 64 = 1.75; counts T = [1, 0], so tier 0 weighs
    # T_1/T = 0 and tier 1 (not reported: the initial model 0) T_0/T = 1 — the global model stays 0
    (2.0, "tier", "edge", 0, "average", [1.0, 2.0], [16.0, 48.0], 1.75),
    (2.0, "tier", "edge", 0, "aggregated", [0, 1]),
    (2.0, "tier", "cloud", 0, "combine", [(1.0, 0.0, None)], 0.0),
    (2.0, "tier", "cloud", 0, "applied", [0], [0.0], [0], 1),
    (2.25, "train_done", "device=2 tier=1 round=0"),
    (2.25, "train_start", "device=0 tier=0 round=1"),   # tier 0's next round, from the new global model
    (2.25, "train_start", "device=1 tier=0 round=1"),
    (2.5, "upload_done", "device=2 tier=1 round=0"),
    (2.75, "train_done", "device=3 tier=1 round=0"),
    (3.0, "upload_done", "device=3 tier=1 round=0"),
    # tier 1 closes: model 3.5; T = [1, 1], weights ½, ½: w = 0.5·1.75 + 0.5·3.5; it started at version 0,
    # the global model is at version 1 now (τ = 1)
    (3.0, "tier", "edge", 1, "average", [3.0, 4.0], [32.0, 32.0], 3.5),
    (3.0, "tier", "edge", 1, "aggregated", [2, 3]),
    (3.0, "tier", "cloud", 0, "combine", [(0.5, 1.75, None), (0.5, 3.5, None)], 2.625),
    (3.0, "tier", "cloud", 0, "applied", [1], [0.5], [1], 2),
    (3.25, "train_done", "device=0 tier=0 round=1"),
    (3.25, "train_start", "device=2 tier=1 round=1"),
    (3.25, "train_start", "device=3 tier=1 round=1"),
    (3.5, "upload_done", "device=0 tier=0 round=1"),   # the run stops at t = 3.5
]


def _run(**knobs):
    env = FakeEnv(FakeWorld([16, 48, 32, 32]))
    return env, env.run(FedATConfig(**{"tiers": 2, "fraction": 1.0, **knobs}).create(env), until=3.5)


def test_fedat_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 2.625


def test_fedat_trace_follows_its_knobs():
    assert _run(weighting="uniform")[1] != EXPECTED
    assert _run(tiers=1)[1] != EXPECTED
    assert _run(fraction=0.5)[1] != EXPECTED
