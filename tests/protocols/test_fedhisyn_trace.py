"""FedHiSyn against the fake environment: the exact event trace of one round."""

from hierfl.methods.fedhisyn.protocol import FedHiSynConfig
from tests.fakeenv import FakeEnv, FakeWorld

# one capacity class: the ring 0 → 1 → 2 → 0 (fastest first); unit_s = 1, 1.5, 2 s; T = 2.5 s;
# device ↔ cloud 0.25 s, device ↔ device 0.125 s; a unit's model = start + d + 1; weights: samples

EXPECTED = [
    # the window of T = 2.5 s starts at each device's download: every deadline is at 2.75
    (0.25, "train_start", "device=0 round=0"),
    (0.25, "train_start", "device=1 round=0"),
    (0.25, "train_start", "device=2 round=0"),
    # device 0's unit (0 + 1 = 1.0) goes to device 1; nothing arrived for 0, so it goes on from its own
    (1.25, "unit_done", "device=0 round=0"),
    (1.375, "ring_arrival", "device=1 sender=0 round=0 hop=0 sent=1.25"),
    # device 1 (2.0) forwards it; its next unit would end at 3.25 > 2.75: discarded, never run
    (1.75, "unit_done", "device=1 round=0"),
    (1.875, "ring_arrival", "device=2 sender=1 round=0 hop=1 sent=1.75"),
    (2.25, "unit_done", "device=2 round=0"),   # 3.0; the next would end at 4.25
    (2.25, "unit_done", "device=0 round=0"),   # its second unit: 1.0 + 1 = 2.0; a third would end at 3.25
    # these arrive after the receivers' last units: never used
    (2.375, "ring_arrival", "device=0 sender=2 round=0 hop=2 sent=2.25"),
    (2.375, "ring_arrival", "device=1 sender=0 round=0 hop=3 sent=2.25"),
    (2.75, "deadline", "device=0 round=0"),
    (2.75, "deadline", "device=1 round=0"),
    (2.75, "deadline", "device=2 round=0"),
    # the last trained models 2.0, 2.0, 3.0 reach the cloud: (16·2 + 16·2 + 32·3) / 64 = 2.5
    (3.0, "upload_done", "device=0 round=0"),
    (3.0, "tier", "cloud", 0, "add", 2.0, 16.0),
    (3.0, "upload_done", "device=1 round=0"),
    (3.0, "tier", "cloud", 0, "add", 2.0, 16.0),
    (3.0, "upload_done", "device=2 round=0"),
    (3.0, "tier", "cloud", 0, "add", 3.0, 32.0),
    (3.0, "tier", "cloud", 0, "commit", [0, 1, 2], 2.5),
]


def _run(**knobs):
    env = FakeEnv(FakeWorld([16, 16, 32]), rounds=1)
    return env, env.run(FedHiSynConfig(**{"k": 1, "T": 2.5, "weighting": "data", **knobs}).create(env))


def test_fedhisyn_trace():
    env, log = _run()
    assert log == EXPECTED
    assert env.global_model == 2.5


def test_fedhisyn_trace_follows_its_knobs():
    assert _run(T=3.0)[1] != EXPECTED
    assert _run(weighting="uniform")[1] != EXPECTED
    assert _run(k=3)[1] != EXPECTED   # three classes of one: no ring
