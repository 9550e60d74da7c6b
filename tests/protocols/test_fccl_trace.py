"""FCCL against the fake environment at the edge tier: the exact event trace, checked by hand.

Devices 0 and 1 under edge 0, device 2 under edge 1; a job on device d lasts (1 + 0.5·d) s per epoch and its
result is the number start + d + 1; device ↔ edge 0.25 s, edge ↔ cloud 0.5 s. Every job runs 1 epoch.
Pre-training: 0 → d + 1 (ready at 1, 1.5, 2). Round 0 from t = 2 over A_t = 4 public samples in 2 batches:

* batch 0: logits 2, 4, 6 (done 3, 3.5, 4) reach their edges at 3.25, 3.75, 4.25; edge 0 averages (2 + 4)/2 = 3
  at 3.75, edge 1 has 6 at 4.25; the cloud weighs the edge means by members, (2·3 + 6)/3 = 4, at 4.75 — an
  average that is not counted (not the round's last exchange); the mean is at the edges at 5.25, at the devices
  at 5.5; the collaboration steps give 2, 4, 6 (done 6.5, 7, 7.5);
* batch 1: logits 3, 6, 9 (done 7.5, 8.5, 9.5); edge 0's mean 4.5 is the round's counted edge aggregation at
  8.75 (reaching the cloud at 9.25), edge 1's 9 at 9.75 (at the cloud at 10.25); the cloud's (2·4.5 + 9)/3 = 6
  is its counted aggregation, the first round's: the run (rounds = 1) stops there.
"""

from __future__ import annotations

import numpy as np

from hierfl.core.public import PublicData
from hierfl.core.work import TrainSpec
from hierfl.methods.fccl.protocol import FCCLConfig
from tests.fakeenv import FakeEnv, FakeWorld

EXPECTED = [
    (1.0, 'pretrain_done', 'device=0 round=-1 batch=-1'),
    (1.5, 'pretrain_done', 'device=1 round=-1 batch=-1'),
    (2.0, 'pretrain_done', 'device=2 round=-1 batch=-1'),
    (3.0, 'logits_done', 'device=0 round=0 batch=0'),
    (3.25, 'logits_arrived', 'device=0 round=0 batch=0'),
    (3.5, 'logits_done', 'device=1 round=0 batch=0'),
    (3.75, 'logits_arrived', 'device=1 round=0 batch=0'),
    (3.75, 'tier', 'edge', 0, 'average', [2.0, 4.0], [1.0, 1.0], 3.0),
    (4.0, 'logits_done', 'device=2 round=0 batch=0'),
    (4.25, 'edge_logits_arrived', 'edge=0 round=0 batch=0'),
    (4.25, 'logits_arrived', 'device=2 round=0 batch=0'),
    (4.25, 'tier', 'edge', 1, 'average', [6.0], [1.0], 6.0),
    (4.75, 'edge_logits_arrived', 'edge=1 round=0 batch=0'),
    (4.75, 'tier', 'cloud', 0, 'average', [3.0, 6.0], [2.0, 1.0], 4.0),
    (5.25, 'edge_mean_arrived', 'edge=0 round=0 batch=0'),
    (5.25, 'edge_mean_arrived', 'edge=1 round=0 batch=0'),
    (5.5, 'mean_arrived', 'device=0 round=0 batch=0'),
    (5.5, 'mean_arrived', 'device=1 round=0 batch=0'),
    (5.5, 'mean_arrived', 'device=2 round=0 batch=0'),
    (6.5, 'collab_done', 'device=0 round=0 batch=0'),
    (7.0, 'collab_done', 'device=1 round=0 batch=0'),
    (7.5, 'collab_done', 'device=2 round=0 batch=0'),
    (7.5, 'logits_done', 'device=0 round=0 batch=1'),
    (7.75, 'logits_arrived', 'device=0 round=0 batch=1'),
    (8.5, 'logits_done', 'device=1 round=0 batch=1'),
    (8.75, 'logits_arrived', 'device=1 round=0 batch=1'),
    (8.75, 'tier', 'edge', 0, 'add', 3.0, 1.0),
    (8.75, 'tier', 'edge', 0, 'add', 6.0, 1.0),
    (8.75, 'tier', 'edge', 0, 'commit', [0, 1], 4.5),
    (9.25, 'edge_logits_arrived', 'edge=0 round=0 batch=1'),
    (9.5, 'logits_done', 'device=2 round=0 batch=1'),
    (9.75, 'logits_arrived', 'device=2 round=0 batch=1'),
    (9.75, 'tier', 'edge', 1, 'add', 9.0, 1.0),
    (9.75, 'tier', 'edge', 1, 'commit', [2], 9.0),
    (10.25, 'edge_logits_arrived', 'edge=1 round=0 batch=1'),
    (10.25, 'tier', 'cloud', 0, 'add', 4.5, 2.0),
    (10.25, 'tier', 'cloud', 0, 'add', 9.0, 1.0),
    (10.25, 'tier', 'cloud', 0, 'commit', [0, 1], 6.0),
]


def _env(edge_of=(0, 0, 1)):
    world = FakeWorld([10, 10, 10], edge_of=list(edge_of))
    world.public = PublicData((30, 50), np.zeros(20, dtype=np.int64), False, "preinstalled", 400)
    world.num_classes = 3
    return FakeEnv(world, spec=TrainSpec(epochs=1), rounds=1)


def _cfg(**knobs):
    return FCCLConfig(**{"public_size": 4, "public_batch_size": 2, "pretrain_epochs": 1, "local_epochs": 1, **knobs})


def test_fccl_at_the_edge_tier_composes_the_mean_on_every_batch():
    env = _env()
    protocol = _cfg().create(env)
    assert env.run(protocol) == EXPECTED
    assert protocol.mean == 6.0  # the parties' mean of batch 1: (3 + 6 + 9)/3
    assert protocol.model == {0: 2.0, 1: 4.0, 2: 6.0}  # after batch 0's collaboration step
    assert protocol.party_models() == protocol.model


def test_per_round_exchanges_once_and_counts_it():
    env = _env()
    log = env.run(_cfg(exchange="per_round").create(env))
    # one exchange: the logits of all of A_t, folded and counted at once (no uncounted average)
    assert [e[4] for e in log if e[1] == "tier"] == ["add", "add", "commit", "add", "commit", "add", "add", "commit"]
    assert log[-1] == (4.75, "tier", "cloud", 0, "commit", [0, 1], 4.0)
