"""FedAvg against the fake environment: the exact event trace of two rounds."""

from hierfl.core.rng import stream
from hierfl.methods.fedavg.protocol import FedAvgConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 4 devices talking to the cloud; unit_s = 1 + 0.5·d, every transfer 0.25 s, a job's model = start + d + 1
SAMPLES = [16, 32, 16, 48]

EXPECTED = [
    # round 0: m = ⌈0.5·4⌉ = 2 devices, the stream ("fedavg.select", 0) picks {0, 3}; downloads take 0.25 s
    (0.25, "train_start", "device=0 round=0"),
    (0.25, "train_start", "device=3 round=0"),
    (1.25, "train_done", "device=0 round=0"),   # 0.25 + 1.0
    (1.5, "upload_done", "device=0 round=0"),
    (1.5, "tier", "cloud", 0, "add", 1.0, 16.0),  # model 0 + 0 + 1, weight n_0
    (2.75, "train_done", "device=3 round=0"),   # 0.25 + 2.5
    (3.0, "upload_done", "device=3 round=0"),
    (3.0, "tier", "cloud", 0, "add", 4.0, 48.0),
    # both selected devices are in: (16·1 + 48·4) / 64 = 3.25, and round 1 begins at once
    (3.0, "tier", "cloud", 0, "commit", [0, 3], 3.25),
    # round 1: the stream ("fedavg.select", 1) picks {2, 3}
    (3.25, "train_start", "device=2 round=1"),
    (3.25, "train_start", "device=3 round=1"),
    (5.25, "train_done", "device=2 round=1"),   # 3.25 + 2.0
    (5.5, "upload_done", "device=2 round=1"),
    (5.5, "tier", "cloud", 0, "add", 6.25, 16.0),  # 3.25 + 2 + 1
    (5.75, "train_done", "device=3 round=1"),
    (6.0, "upload_done", "device=3 round=1"),
    (6.0, "tier", "cloud", 0, "add", 7.25, 48.0),
    # (16·6.25 + 48·7.25) / 64 = 7.0; the second cloud aggregation ends the run (rounds = 2)
    (6.0, "tier", "cloud", 0, "commit", [2, 3], 7.0),
]


def _run(**knobs):
    env = FakeEnv(FakeWorld(SAMPLES), rounds=2)
    return env, env.run(FedAvgConfig(**{"fraction": 0.5, **knobs}).create(env))


def test_fedavg_trace():
    # the selections the trace relies on come from the seeded streams
    assert sorted(stream(7, "fedavg.select", 0).choice(4, size=2, replace=False).tolist()) == [0, 3]
    assert sorted(stream(7, "fedavg.select", 1).choice(4, size=2, replace=False).tolist()) == [2, 3]
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 7.0
    closes = [r for r in env.telemetry.records if r.EVENT == "round_close"]
    assert [(c.arrived, c.dropped) for c in closes] == [(2, 0), (2, 0)]


def test_fedavg_trace_follows_its_knobs():
    assert _run(fraction=0.75)[1] != EXPECTED
    assert _run(weighting="uniform")[1] != EXPECTED
