"""FedFTG against the fake environment: the exact event trace of two rounds with their server jobs."""

import numpy as np

from hierfl.methods.fedftg.protocol import FedFTGConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 4 devices talking to the cloud; unit_s = 1 + 0.5·d, every transfer 0.25 s, a job's model = start + d + 1.
# The fake fine-tuning (on floats) returns the weighted mean of the teachers plus 100 and takes 2 s.
SAMPLES = [16, 32, 16, 48]
COUNTS = np.array([[16, 0, 0], [0, 32, 0], [8, 8, 0], [0, 0, 48]])


def _finetune(inputs, params):
    w = params["weights"]
    return [sum(wi * x for wi, x in zip(w, inputs)) / sum(w) + 100.0], 2.0


EXPECTED = [
    # round 0: the stream ("fedavg.select", 0) picks {0, 3}, as FedAvg's (same stream, same rule)
    (0.25, "train_start", "device=0 round=0"),
    (0.25, "train_start", "device=3 round=0"),
    (1.25, "train_done", "device=0 round=0"),
    (1.5, "upload_done", "device=0 round=0"),
    (1.5, "tier", "cloud", 0, "add", 1.0, 16.0),
    (2.75, "train_done", "device=3 round=0"),
    (3.0, "upload_done", "device=3 round=0"),
    (3.0, "tier", "cloud", 0, "add", 4.0, 48.0),
    # the round closes: ONE server job on the teachers (device order), 2 s on the cloud
    (3.0, "tier", "cloud", 0, "run", "fedftg", [1.0, 4.0], 3.0, 5.0),
    # its end completes the aggregation (mean 3.25) and the fine-tuned 103.25 goes down
    (5.0, "finetune_done", "task='fedftg' outputs=(103.25,) stats={} start=3.0 end=5.0 "
                           "payload=FinetuneMsg(round=0)"),
    (5.0, "tier", "cloud", 0, "commit", [0, 3], 3.25),
    # round 1: the stream ("fedavg.select", 1) picks {2, 3}; they train from 103.25
    (5.25, "train_start", "device=2 round=1"),
    (5.25, "train_start", "device=3 round=1"),
    (7.25, "train_done", "device=2 round=1"),
    (7.5, "upload_done", "device=2 round=1"),
    (7.5, "tier", "cloud", 0, "add", 106.25, 16.0),
    (7.75, "train_done", "device=3 round=1"),
    (8.0, "upload_done", "device=3 round=1"),
    (8.0, "tier", "cloud", 0, "add", 107.25, 48.0),
    (8.0, "tier", "cloud", 0, "run", "fedftg", [106.25, 107.25], 8.0, 10.0),
    (10.0, "finetune_done", "task='fedftg' outputs=(207.0,) stats={} start=8.0 end=10.0 "
                            "payload=FinetuneMsg(round=1)"),
    # the second cloud aggregation ends the run (rounds = 2), with the fine-tuned model
    (10.0, "tier", "cloud", 0, "commit", [2, 3], 107.0),
]


def _env():
    world = FakeWorld(SAMPLES)
    world.num_classes = 3
    world.label_counts = COUNTS
    env = FakeEnv(world, rounds=2)
    env.server_tasks["fedftg"] = _finetune
    return env


def test_fedftg_trace():
    env = _env()
    proto = FedFTGConfig(fraction=0.5).create(env)
    log = env.run(proto)
    assert log == EXPECTED
    assert env.global_model == 207.0


def test_the_job_gets_the_histograms_weights_and_this_rounds_learning_rates():
    env = _env()
    seen = []

    def spy(inputs, params):
        seen.append(params)
        return _finetune(inputs, params)

    env.server_tasks["fedftg"] = spy
    env.run(FedFTGConfig(fraction=0.5, lr_decay=0.5).create(env))
    assert [p["counts"] for p in seen] == [[[16, 0, 0], [0, 0, 48]], [[8, 8, 0], [0, 0, 48]]]
    assert [p["weights"] for p in seen] == [[16.0, 48.0], [16.0, 48.0]]
    # lr × 0.5^t: round 0 at the configured rates, round 1 at half
    assert [(p["lr_student"], p["lr_gen"]) for p in seen] == [(0.1, 0.01), (0.05, 0.005)]
    assert seen[0]["batch_size"] == 32  # training.batch_size of the fake's spec (TrainSpec default)
    # the generator's draws: one seed per round from the stream ("generator_noise", t)
    from hierfl.core.rng import stream

    assert [p["noise_seed"] for p in seen] == [int(stream(7, "generator_noise", t).integers(2 ** 62)) for t in (0, 1)]
