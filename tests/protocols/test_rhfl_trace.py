"""RHFL against the fake environment: the exact event trace, the alignment targets and the confidence
weights by hand, flat and at the edge tier of a hierarchy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierfl.core.public import PublicData
from hierfl.core.work import TrainSpec
from hierfl.methods.rhfl.protocol import RHFLConfig
from tests.fakeenv import FakeEnv, FakeWorld


class LossEnv(FakeEnv):
    """The fake environment, whose jobs also report a made-up private loss ``12 / (model + device)``."""

    def finish_training(self, job):
        return {"ccr_loss": 12.0 / (job.params + job.device)}


def _env(samples=(10, 10, 10), edge_of=None):
    world = FakeWorld(list(samples), edge_of=edge_of)
    world.public = PublicData((30, 50), np.zeros(20, dtype=np.int64), False, "preinstalled", 480)
    world.num_classes = 3
    return LossEnv(world, spec=TrainSpec(epochs=1))


def _cfg(**knobs):
    # 20 public samples in batches of 10: 2 exchanges per round; every job is 1 unit of work
    return RHFLConfig(**{"public_batch_size": 10, "local_epochs": 1, "pretrain_epochs": 1, **knobs})


# 3 parties; a job on device d lasts (1 + 0.5·d) s and its result is the number start + d + 1; transfers
# take 0.25 s. Pre-training: models 1, 2, 3 at t = 1, 1.5, 2 (reported losses 12/(m + d) = 12, 4, 2.4).
# Round 0, weights 1/(K−1) = ½: batch 0's probabilities 2, 4, 6 (done 2, 3, 4; arrived + 0.25); the cloud's
# weighted mean is 4 over a weight of 3/2, and party k's target Σ_{j≠k} W_j p_j = 3/2·4 − ½·p_k = 5, 4, 3.
# The alignment steps give models 2, 4, 6; batch 1 (probabilities 3, 6, 9, mean 6) targets 7.5, 6, 4.5;
# models 3, 6, 9; local epochs → 4, 8, 12 at 11, 12, 13 (losses 3, 4/3, 6/7). Round 1: each party reports
# F_k = (L^{t−1} − L^t)/L^t = 3, 2, 1.8 (arrived 11.25, 12.25, 13.25) and goes on with its batch 0 at once;
# the cloud has the weights at 13.25 and closes batch 0 when the last probabilities arrive (15.25).
F = [3.0, 2.0, 1.8]
A = [0.5 + 0.5 * f / sum(F) for f in F]
W = [math.exp(a) / sum(math.exp(x) for x in A) for a in A]
P1 = [5.0, 10.0, 15.0]  # round 1, batch 0: models 4, 8, 12 + d + 1
MEAN1 = sum(w * p for w, p in zip(W, P1)) / sum(W)
EXPECTED = [
    (1.0, "local_done", "device=0 round=-1 batch=-1"),
    (1.5, "local_done", "device=1 round=-1 batch=-1"),
    (2.0, "local_done", "device=2 round=-1 batch=-1"),
    (2.0, "probs_done", "device=0 round=0 batch=0"),
    (2.25, "probs_arrived", "device=0 round=0 batch=0"),
    (3.0, "probs_done", "device=1 round=0 batch=0"),
    (3.25, "probs_arrived", "device=1 round=0 batch=0"),
    (4.0, "probs_done", "device=2 round=0 batch=0"),
    (4.25, "probs_arrived", "device=2 round=0 batch=0"),
    (4.25, "tier", "cloud", 0, "add", 2.0, 0.5),
    (4.25, "tier", "cloud", 0, "add", 4.0, 0.5),
    (4.25, "tier", "cloud", 0, "add", 6.0, 0.5),
    (4.25, "tier", "cloud", 0, "commit", [0, 1, 2], 4.0),
    (4.25, "tier", "cloud", 0, "combine", [(1.5, 4.0, None), (-0.5, 2.0, None)], 5.0),
    (4.25, "tier", "cloud", 0, "combine", [(1.5, 4.0, None), (-0.5, 4.0, None)], 4.0),
    (4.25, "tier", "cloud", 0, "combine", [(1.5, 4.0, None), (-0.5, 6.0, None)], 3.0),
    (4.5, "target_arrived", "device=0 round=0 batch=0"),
    (4.5, "target_arrived", "device=1 round=0 batch=0"),
    (4.5, "target_arrived", "device=2 round=0 batch=0"),
    (5.5, "align_done", "device=0 round=0 batch=0"),
    (6.0, "align_done", "device=1 round=0 batch=0"),
    (6.5, "align_done", "device=2 round=0 batch=0"),
    (6.5, "probs_done", "device=0 round=0 batch=1"),
    (6.75, "probs_arrived", "device=0 round=0 batch=1"),
    (7.5, "probs_done", "device=1 round=0 batch=1"),
    (7.75, "probs_arrived", "device=1 round=0 batch=1"),
    (8.5, "probs_done", "device=2 round=0 batch=1"),
    (8.75, "probs_arrived", "device=2 round=0 batch=1"),
    (8.75, "tier", "cloud", 0, "add", 3.0, 0.5),
    (8.75, "tier", "cloud", 0, "add", 6.0, 0.5),
    (8.75, "tier", "cloud", 0, "add", 9.0, 0.5),
    (8.75, "tier", "cloud", 0, "commit", [0, 1, 2], 6.0),
    (8.75, "tier", "cloud", 0, "combine", [(1.5, 6.0, None), (-0.5, 3.0, None)], 7.5),
    (8.75, "tier", "cloud", 0, "combine", [(1.5, 6.0, None), (-0.5, 6.0, None)], 6.0),
    (8.75, "tier", "cloud", 0, "combine", [(1.5, 6.0, None), (-0.5, 9.0, None)], 4.5),
    (9.0, "target_arrived", "device=0 round=0 batch=1"),
    (9.0, "target_arrived", "device=1 round=0 batch=1"),
    (9.0, "target_arrived", "device=2 round=0 batch=1"),
    (10.0, "align_done", "device=0 round=0 batch=1"),
    (10.5, "align_done", "device=1 round=0 batch=1"),
    (11.0, "align_done", "device=2 round=0 batch=1"),
    (11.0, "local_done", "device=0 round=0 batch=-1"),
    (11.25, "report_arrived", "device=0 round=1 batch=-1"),
    (12.0, "local_done", "device=1 round=0 batch=-1"),
    (12.0, "probs_done", "device=0 round=1 batch=0"),
    (12.25, "report_arrived", "device=1 round=1 batch=-1"),
    (12.25, "probs_arrived", "device=0 round=1 batch=0"),
    (13.0, "local_done", "device=2 round=0 batch=-1"),
    (13.25, "report_arrived", "device=2 round=1 batch=-1"),
    (13.5, "probs_done", "device=1 round=1 batch=0"),
    (13.75, "probs_arrived", "device=1 round=1 batch=0"),
    (15.0, "probs_done", "device=2 round=1 batch=0"),
    (15.25, "probs_arrived", "device=2 round=1 batch=0"),
    (15.25, "tier", "cloud", 0, "add", 5.0, pytest.approx(W[0], rel=1e-12)),
    (15.25, "tier", "cloud", 0, "add", 10.0, pytest.approx(W[1], rel=1e-12)),
    (15.25, "tier", "cloud", 0, "add", 15.0, pytest.approx(W[2], rel=1e-12)),
    (15.25, "tier", "cloud", 0, "commit", [0, 1, 2], pytest.approx(MEAN1, rel=1e-12)),
    *[(15.25, "tier", "cloud", 0, "combine",
       [(pytest.approx(1.0, rel=1e-12), pytest.approx(MEAN1, rel=1e-12), None),
        (pytest.approx(-W[k], rel=1e-12), P1[k], None)],
       pytest.approx(MEAN1 - W[k] * P1[k], rel=1e-12)) for k in range(3)],
    (15.5, "target_arrived", "device=0 round=1 batch=0"),
    (15.5, "target_arrived", "device=1 round=1 batch=0"),
    (15.5, "target_arrived", "device=2 round=1 batch=0"),
]


def test_rhfl_trace_flat():
    env = _env()
    protocol = _cfg().create(env)
    assert env.run(protocol, until=15.5) == EXPECTED
    weights = [c for c in env.telemetry.calls if c[0] == "instant"]
    assert len(weights) == 1 and weights[0][1] == (("cloud", 0), "ccr_weights", 13.25)
    assert weights[0][2]["weights"] == pytest.approx(W, abs=1e-6)
    # the device keeps its last two losses (per-device state): 12/(m + d) after pre-training and round 0
    assert protocol.loss == {0: [12.0, 3.0], 1: [4.0, 4 / 3], 2: [2.4, 6 / 7]}
    # every exchange carries 4 · B · C bytes: B = 10 public samples, C = 3 classes
    assert protocol.batch_bytes(0) == 4 * 10 * 3 and protocol.windows == [(0, 10), (10, 20)]


def test_rhfl_per_round_exchanges_once():
    env = _env()
    protocol = _cfg(exchange="per_round").create(env)
    log = env.run(protocol, until=9.0)
    assert protocol.windows == [(0, 20)]
    # one exchange on all 20 samples, the targets as in batch 0 above; then the local epochs directly
    commits = [x for x in log if x[1] == "tier" and x[4] == "commit"]
    assert commits == [(4.25, "tier", "cloud", 0, "commit", [0, 1, 2], 4.0)]
    # (aligned at 4.5 + 1 + 0.5·d, then one local epoch of 1 + 0.5·d)
    assert [x[:2] for x in log if x[1] == "local_done" and x[0] > 2] == [(6.5, "local_done"), (7.5, "local_done"),
                                                                         (8.5, "local_done")]


def test_rhfl_relays_through_edge_servers():
    # 4 parties behind 2 edge servers; round 0 weights 1/3. Probabilities 2, 4 (edge 0) and 6, 8 (edge 1):
    # each edge's weighted mean (3, 7; weight 2/3 each) goes up, the cloud's mean is 5 over a weight of 4/3,
    # and each edge forms its members' targets 4/3·5 − ⅓·p_k
    env = _env(samples=(10, 10, 10, 10), edge_of=[0, 0, 1, 1])
    protocol = _cfg().create(env)
    log = env.run(protocol, until=7.0)
    tiers = [x[2:] for x in log if x[1] == "tier" and x[0] <= 6.5]
    third = 1 / 3
    assert [t[:3] for t in tiers] == [("edge", 0, "add"), ("edge", 0, "add"), ("edge", 0, "commit"),
                                      ("edge", 1, "add"), ("edge", 1, "add"), ("edge", 1, "commit"),
                                      ("cloud", 0, "add"), ("cloud", 0, "add"), ("cloud", 0, "commit"),
                                      ("edge", 0, "combine"), ("edge", 0, "combine"),
                                      ("edge", 1, "combine"), ("edge", 1, "combine")]
    assert tiers[2][4] == pytest.approx(3.0) and tiers[5][4] == pytest.approx(7.0)
    assert tiers[6][3:] == (pytest.approx(3.0), pytest.approx(2 * third))
    assert tiers[8][3:] == ([0, 1], pytest.approx(5.0))
    targets = [t[4] for t in tiers[9:]]
    assert targets == pytest.approx([4 * third * 5 - third * p for p in (2.0, 4.0, 6.0, 8.0)])
    # the timing: probabilities done at 2, 3, 4, 5 reach the edges 0.25 s later; edge 0 sums at 3.25 (its sum
    # reaches the cloud at 3.75), edge 1 at 5.25 (at the cloud 5.75); the total reaches both edges at 6.25 and
    # the targets the devices at 6.5
    arrivals = [x for x in log if x[1] in ("sum_arrived", "total_arrived", "target_arrived")]
    assert arrivals[0][:2] == (3.75, "sum_arrived") and arrivals[1][:2] == (5.75, "sum_arrived")
    assert {x[0] for x in arrivals if x[1] == "total_arrived"} == {6.25}
    assert {x[0] for x in arrivals if x[1] == "target_arrived"} == {6.5}


def test_rhfl_edge_scope_closes_at_the_edges():
    env = _env(samples=(10, 10, 10, 10), edge_of=[0, 0, 1, 1])
    protocol = _cfg(ccr_scope="edge").create(env)
    log = env.run(protocol, until=7.0)
    tiers = [x for x in log if x[1] == "tier"]
    assert not [x for x in tiers if x[2] == "cloud"]  # nothing reaches the cloud
    # round 0 weights 1/(K_e − 1) = 1 within each edge of 2: party k's target is the other member's p
    edge0 = [x for x in tiers if x[2] == "edge" and x[3] == 0 and x[4] == "combine"][:2]
    assert [x[-1] for x in edge0] == pytest.approx([4.0, 2.0])


def test_rhfl_refuses_a_single_party_exchange():
    env = _env(samples=(10, 10, 10), edge_of=[0, 0, 1])
    from hierfl.config.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        _cfg(ccr_scope="edge").create(env)
    assert [p.path for p in info.value.problems] == ["protocol.ccr_scope"]
    assert "edge 1 would close an exchange over a single party" in info.value.problems[0].message
