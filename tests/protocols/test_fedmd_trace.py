"""FedMD against the fake environment: the exact event trace, and its update rules by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.core.public import PublicData
from hierfl.core.work import PublicTask, TrainSpec
from hierfl.learn.local import LocalTrainer
from hierfl.learn.outputs import class_scores, run_public_task, subset_rows
from hierfl.models import LogRegConfig
from hierfl.methods.fedmd.protocol import FedMDConfig
from tests.fakeenv import FakeEnv, FakeWorld

# 3 parties; a job on device d lasts (1 + 0.5·d) s per epoch and its result is the number start + d + 1;
# transfers take 0.25 s. Every phase runs 1 epoch, so: transfer learning 0 → d+1 → 2d+2 (ready at 2, 3, 4);
# round 0 from t = 4: scores 3d+3 (3, 6, 9) arrive at 5.25, 5.75, 6.25 → consensus mean 6 at 6.25, downloaded
# by 6.5; digest from 2d+2 → 3d+3, revisit → 4d+4, done at 8.5, 9.5, 10.5; round 1 from 10.5: scores 5d+5
# (5, 10, 15) arrive at 11.75, 12.25, 12.75 → consensus 10, the second cloud aggregation: the run stops.
EXPECTED = [
    (1.0, "transfer_public_done", "device=0 round=-1"),
    (1.5, "transfer_public_done", "device=1 round=-1"),
    (2.0, "transfer_public_done", "device=2 round=-1"),     # (queued at t = 0, before device 0's private job)
    (2.0, "transfer_private_done", "device=0 round=-1"),
    (3.0, "transfer_private_done", "device=1 round=-1"),
    (4.0, "transfer_private_done", "device=2 round=-1"),
    (5.0, "scores_done", "device=0 round=0"),
    (5.25, "scores_arrived", "device=0 round=0"),
    (5.25, "tier", "cloud", 0, "add", 3.0, 1.0),
    (5.5, "scores_done", "device=1 round=0"),
    (5.75, "scores_arrived", "device=1 round=0"),
    (5.75, "tier", "cloud", 0, "add", 6.0, 1.0),
    (6.0, "scores_done", "device=2 round=0"),
    (6.25, "scores_arrived", "device=2 round=0"),
    (6.25, "tier", "cloud", 0, "add", 9.0, 1.0),
    (6.25, "tier", "cloud", 0, "commit", [0, 1, 2], 6.0),
    (6.5, "consensus_arrived", "device=0 round=0"),
    (6.5, "consensus_arrived", "device=1 round=0"),
    (6.5, "consensus_arrived", "device=2 round=0"),
    (7.5, "digest_done", "device=0 round=0"),
    (8.0, "digest_done", "device=1 round=0"),
    (8.5, "digest_done", "device=2 round=0"),               # (queued at 6.5, before device 0's revisit)
    (8.5, "revisit_done", "device=0 round=0"),
    (9.5, "revisit_done", "device=1 round=0"),
    (10.5, "revisit_done", "device=2 round=0"),
    (11.5, "scores_done", "device=0 round=1"),
    (11.75, "scores_arrived", "device=0 round=1"),
    (11.75, "tier", "cloud", 0, "add", 5.0, 1.0),
    (12.0, "scores_done", "device=1 round=1"),
    (12.25, "scores_arrived", "device=1 round=1"),
    (12.25, "tier", "cloud", 0, "add", 10.0, 1.0),
    (12.5, "scores_done", "device=2 round=1"),
    (12.75, "scores_arrived", "device=2 round=1"),
    (12.75, "tier", "cloud", 0, "add", 15.0, 1.0),
    (12.75, "tier", "cloud", 0, "commit", [0, 1, 2], 10.0),
]


def _env(**public):
    world = FakeWorld([10, 10, 10])
    world.public = PublicData((30, 50), np.zeros(20, dtype=np.int64), True, "preinstalled", 480, **public)
    world.num_classes = 3
    return FakeEnv(world, spec=TrainSpec(epochs=1), rounds=2)


def _cfg(**knobs):
    return FedMDConfig(**{"align_size": 8, "digest_epochs": 1, "revisit_epochs": 1, "transfer_public_epochs": 1,
                          "transfer_private_epochs": 1, **knobs})


def test_fedmd_trace():
    env = _env()
    protocol = _cfg().create(env)
    assert env.run(protocol) == EXPECTED
    assert protocol.model == {0: 4.0, 1: 8.0, 2: 12.0}  # the models after round 0's revisit: 4d + 4
    assert protocol.party_models() == protocol.model
    # the score messages are 4 · |A_t| · C bytes: |A_t| = min(align_size, public size 20) = 8
    assert protocol.score_bytes == 4 * 8 * 3


def test_fedmd_trace_follows_its_knobs():
    env = _env()
    assert env.run(_cfg(revisit_epochs=2).create(env)) != EXPECTED
    env = _env()
    log = env.run(_cfg(charge_setup_phases=False).create(env))
    assert log[0][:2] == (0.0, "transfer_public_done")  # the transfer-learning phase takes no virtual time


def test_scores_are_the_logits_and_the_digest_is_an_sgd_step_on_the_mae():
    """Logistic regression, 2 features, 3 classes, one sample x = (1, 2), from zero parameters: the logits
    are 0; toward targets t = (1, −2, 0.5) the MAE's gradient at z is sign(z − t)/3 = (−1, 1, −1)/3, so one SGD
    step of lr 0.3 gives W = 0.1·[(1, 2), (−1, −2), (1, 2)] and b = (0.1, −0.1, 0.1)."""
    trainer = LocalTrainer(LogRegConfig(), (2,), 3)
    x = np.array([[9.0, 9.0], [1.0, 2.0]], dtype=np.float32)  # row 1 is the public sample
    y = np.array([0, 1])
    params = np.arange(1, 10, dtype=np.float32) / 10  # W = [[.1, .2], [.3, .4], [.5, .6]], b = (.7, .8, .9)
    # z = W·(1, 2) + b = (0.1 + 0.4 + 0.7, 0.3 + 0.8 + 0.8, 0.5 + 1.2 + 0.9)
    assert class_scores(trainer, params, x, np.array([1])).tolist() == pytest.approx([1.2, 1.9, 2.6])
    task = PublicTask("digest", (1, 2), 1, loss="mae_logits")
    spec = TrainSpec(epochs=1, batch_size=1, lr=0.3, method=task)
    new, stats = run_public_task(trainer, np.zeros(9, dtype=np.float32), x, y, spec, 0,
                                 np.array([1.0, -2.0, 0.5], dtype=np.float32))
    assert new.tolist() == pytest.approx([0.1, 0.2, -0.1, -0.2, 0.1, 0.2, 0.1, -0.1, 0.1], abs=1e-7)
    assert stats["loss"] == pytest.approx(3.5 / 3)  # the MAE before the step: (1 + 2 + 0.5) / 3
    scores = run_public_task(trainer, params, x, y, TrainSpec(epochs=1, method=PublicTask("scores", (1, 2), 1)), 0,
                             None)[0]
    assert scores.tolist() == pytest.approx([1.2, 1.9, 2.6])


def test_the_alignment_set_is_a_seeded_subset_of_the_public_rows():
    y = np.array([5, 5, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1])  # public rows 2..12: labels 0/1 alternating
    task = PublicTask("scores", (2, 12), 4, subset_seed=123)
    rows = subset_rows(task, y)
    assert rows.tolist() == subset_rows(task, y).tolist()
    assert rows.min() >= 2 and rows.max() < 12 and len(set(rows.tolist())) == 4
    assert sorted(y[rows].tolist()) == [0, 0, 1, 1]  # stratified: two of each label
    assert subset_rows(PublicTask("pretrain", (2, 12), 10), y).tolist() == list(range(2, 12))


# At a tier of a hierarchy: devices 0 and 1 under edge 0, device 2 under edge 1; device ↔ edge 0.25 s,
# edge ↔ cloud 0.5 s. Transfer learning as above (ready at 2, 3, 4). Round 0: scores 3, 6, 9 reach their
# edges at 5.25, 5.75, 6.25; edge 0's mean (3 + 6)/2 = 4.5 leaves at 5.75 and reaches the cloud at 6.25,
# edge 1's (9) at 6.75, when the cloud weighs them by member count: (2·4.5 + 9)/3 = 6, the global mean.
# The consensus is back at the edges at 7.25 and at the devices at 7.5.
EXPECTED_EDGES = [
    *EXPECTED[:6],
    (5.0, "scores_done", "device=0 round=0"),
    (5.25, "scores_arrived", "device=0 round=0"),
    (5.25, "tier", "edge", 0, "add", 3.0, 1.0),
    (5.5, "scores_done", "device=1 round=0"),
    (5.75, "scores_arrived", "device=1 round=0"),
    (5.75, "tier", "edge", 0, "add", 6.0, 1.0),
    (5.75, "tier", "edge", 0, "commit", [0, 1], 4.5),
    (6.0, "scores_done", "device=2 round=0"),
    (6.25, "edge_scores_arrived", "edge=0 round=0"),   # (sent at 5.75, before device 2's upload)
    (6.25, "tier", "cloud", 0, "add", 4.5, 2.0),
    (6.25, "scores_arrived", "device=2 round=0"),
    (6.25, "tier", "edge", 1, "add", 9.0, 1.0),
    (6.25, "tier", "edge", 1, "commit", [2], 9.0),
    (6.75, "edge_scores_arrived", "edge=1 round=0"),
    (6.75, "tier", "cloud", 0, "add", 9.0, 1.0),
    (6.75, "tier", "cloud", 0, "commit", [0, 1], 6.0),
    (7.25, "edge_consensus_arrived", "edge=0 round=0"),
    (7.25, "edge_consensus_arrived", "edge=1 round=0"),
    (7.5, "consensus_arrived", "device=0 round=0"),
    (7.5, "consensus_arrived", "device=1 round=0"),
    (7.5, "consensus_arrived", "device=2 round=0"),
    (8.5, "digest_done", "device=0 round=0"),
    (9.0, "digest_done", "device=1 round=0"),
    (9.5, "digest_done", "device=2 round=0"),
    (9.5, "revisit_done", "device=0 round=0"),
    (10.5, "revisit_done", "device=1 round=0"),
    (11.5, "revisit_done", "device=2 round=0"),
    # round 1 from 11.5: scores 5, 10, 15 → edge means 7.5 (sent at 13.25) and 15 (at 13.75); at 14.25 the
    # cloud's (2·7.5 + 15)/3 = 10 is the second cloud aggregation: the run stops
    (12.5, "scores_done", "device=0 round=1"),
    (12.75, "scores_arrived", "device=0 round=1"),
    (12.75, "tier", "edge", 0, "add", 5.0, 1.0),
    (13.0, "scores_done", "device=1 round=1"),
    (13.25, "scores_arrived", "device=1 round=1"),
    (13.25, "tier", "edge", 0, "add", 10.0, 1.0),
    (13.25, "tier", "edge", 0, "commit", [0, 1], 7.5),
    (13.5, "scores_done", "device=2 round=1"),
    (13.75, "edge_scores_arrived", "edge=0 round=1"),
    (13.75, "tier", "cloud", 0, "add", 7.5, 2.0),
    (13.75, "scores_arrived", "device=2 round=1"),
    (13.75, "tier", "edge", 1, "add", 15.0, 1.0),
    (13.75, "tier", "edge", 1, "commit", [2], 15.0),
    (14.25, "edge_scores_arrived", "edge=1 round=1"),
    (14.25, "tier", "cloud", 0, "add", 15.0, 1.0),
    (14.25, "tier", "cloud", 0, "commit", [0, 1], 10.0),
]


def test_fedmd_at_the_edge_tier_composes_the_global_consensus():
    world = FakeWorld([10, 10, 10], edge_of=[0, 0, 1])
    world.public = PublicData((30, 50), np.zeros(20, dtype=np.int64), True, "preinstalled", 480)
    world.num_classes = 3
    env = FakeEnv(world, spec=TrainSpec(epochs=1), rounds=2)
    assert env.run(_cfg().create(env)) == EXPECTED_EDGES


def test_without_collaboration_parties_only_revisit():
    env = _env()
    env.rounds = None
    log = env.run(_cfg(collaborate=False).create(env), until=8.75)
    # ready at 2, 3, 4; then revisits only (1, 1.5, 2 s each), rounds when every party is done
    assert [e for e in log[6:] if e[1] != "tier"] == [
        (5.0, "revisit_done", "device=0 round=0"), (5.5, "revisit_done", "device=1 round=0"),
        (6.0, "revisit_done", "device=2 round=0"), (7.0, "revisit_done", "device=0 round=1"),
        (7.5, "revisit_done", "device=1 round=1"), (8.0, "revisit_done", "device=2 round=1")]
    assert not [e for e in log if e[1] == "tier"]  # nothing is exchanged


def test_revisit_batch_size_is_its_own_knob():
    """``revisit_batch_size`` sets the revisit epochs' batch alone; unset, the revisit uses training.batch_size."""
    env = FakeEnv(FakeWorld([10, 10, 10]), spec=TrainSpec(epochs=1, batch_size=16), rounds=2)
    env.world.public = _env().world.public
    env.world.num_classes = 3
    assert _cfg().create(env).revisit_spec.batch_size == 16
    protocol = _cfg(revisit_batch_size=5).create(env)
    assert protocol.revisit_spec.batch_size == 5 and protocol.revisit_spec.epochs == 1
    assert protocol.private_spec.batch_size == 16  # (transfer learning's private epochs keep training.batch_size)
