"""HierFAVG with straggler policies at its device→edge rounds: exact times against hand calculations."""

import pytest

from hierfl.core.work import TrainSpec
from hierfl.policies.straggler import Deadline, FirstK
from hierfl.methods.hierfavg.protocol import HierFAVGConfig
from tests.fakeenv import FakeEnv, FakeWorld

# edge 0 = {0, 1}, edge 1 = {2, 3}; κ1 = 1 step of 1, 1.5, 2, 2.5 s; device ↔ edge 0.25 s, edge ↔ cloud
# 0.5 s; a job's model = start + d + 1; n_ℓ = 64 for both edges; κ2 = 2 edge rounds per cloud round
SAMPLES, EDGE_OF = [16, 48, 32, 32], [0, 0, 1, 1]


def _run(policy):
    env = FakeEnv(FakeWorld(SAMPLES, EDGE_OF), straggler=policy, rounds=1)
    log = env.run(HierFAVGConfig(kappa1=1, kappa2=2).create(env))
    return env, [x for x in log if x[1] == "tier" and x[4] == "commit"]


def test_edge_deadline_drops_the_late_device_of_each_edge_round():
    # a 2.6 s deadline per edge round: edge 0's devices arrive at 1.5 and 2.0 (round closes at 2.0, all in),
    # then at 3.5 and 4.0 (of 2.0 + 2.6 = 4.6); edge 1's device 2 arrives at 2.5, device 3 would at 3.0 > 2.6:
    # dropped at 2.6; from 2.6 device 2 arrives at 2.6 + 0.25 + 2 + 0.25 = 5.1, device 3 is cut at 5.2
    env, commits = _run(Deadline(seconds=2.6))
    assert commits == [
        (2.0, "tier", "edge", 0, "commit", [0, 1], 1.75),   # (16·1 + 48·2) / 64
        (2.6, "tier", "edge", 1, "commit", [2], 3.0),       # device 2 alone: 0 + 2 + 1
        (4.0, "tier", "edge", 0, "commit", [0, 1], 3.5),
        (5.2, "tier", "edge", 1, "commit", [2], 6.0),       # 3 + 2 + 1
        (5.7, "tier", "cloud", 0, "commit", [0, 1], 4.75),  # (64·3.5 + 64·6) / 128, edge 1 uploaded at 5.2
    ]
    # device 3 computed from 0.25 to 2.6 and from 2.85 to 5.2
    assert env.telemetry.counts["stragglers_dropped"] == 2
    assert env.telemetry.counts["wasted_compute_s"] == pytest.approx(2 * 2.35)


def test_edge_first_k_closes_on_the_first_arrival_of_each_edge():
    # k = 1: edge 0 closes at device 0's arrivals (1.5; then 1.5 + 0.25 + 1 + 0.25 = 3.0), edge 1 at
    # device 2's (2.5; then 5.0); devices 1 and 3 are abandoned twice each
    env, commits = _run(FirstK(k=1))
    assert commits == [
        (1.5, "tier", "edge", 0, "commit", [0], 1.0),
        (2.5, "tier", "edge", 1, "commit", [2], 3.0),
        (3.0, "tier", "edge", 0, "commit", [0], 2.0),
        (5.0, "tier", "edge", 1, "commit", [2], 6.0),
        (5.5, "tier", "cloud", 0, "commit", [0, 1], 4.0),   # (64·2 + 64·6) / 128
    ]
    # device 1 trained 0.25 → 1.5 and 1.75 → 3.0; device 3 0.25 → 2.5 and 2.75 → 5.0
    assert env.telemetry.counts["stragglers_dropped"] == 4
    assert env.telemetry.counts["wasted_compute_s"] == pytest.approx(2 * 1.25 + 2 * 2.25)


def _partial_cloud(cloud, kappa1=2, until=None):
    env = FakeEnv(FakeWorld(SAMPLES, EDGE_OF), spec=TrainSpec(epochs=None, steps=kappa1), cloud_straggler=cloud,
                  rounds=1)
    log = env.run(HierFAVGConfig(kappa1=kappa1, kappa2=2).create(env), until=until)
    marks = [(args[0], args[2], kwargs) for name, args, kwargs in env.telemetry.calls
             if name == "instant" and args[1] == "partial_work"]
    return env, [x for x in log if x[1] == "tier" and x[4] == "commit"], marks


def test_cloud_partial_work_runs_the_edge_rounds_that_fit():
    # κ1 = 2 steps: jobs of 2, 3, 4, 5 s. The cloud round closes 5.5 s after it began and an edge model
    # takes 0.5 s up, so every edge's rounds must be over by 5.0 (and a device's job by 4.75).
    # Edge 0's first round closes at 3.5 (device 1: 0.25 + 3 + 0.25); another as long would end at 7 > 5,
    # so it uploads after 1 of its 2 rounds (in at 4.0). Edge 1: device 3 fits 1 step (0.25 + 2.5 = 2.75,
    # in at 3.0), device 2 its whole job (in at 4.5); the round closes at 4.5, and 9 > 5: it uploads (in at 5.0)
    env, commits, marks = _partial_cloud(Deadline(seconds=5.5, partial=True, partial_weight="work"))
    assert commits == [
        (3.5, "tier", "edge", 0, "commit", [0, 1], 1.75),    # (16·1 + 48·2) / 64
        (4.5, "tier", "edge", 1, "commit", [2, 3], 3.5),     # (32·3 + 32·4) / 64
        (5.0, "tier", "cloud", 0, "commit", [0, 1], 2.625),  # (32·1.75 + 32·3.5) / 64: each did half its rounds
    ]
    assert marks == [(("device", 3), 0.25, {"steps": 1, "of": 2, "samples": 32, "weight": 32.0}),
                     (("edge", 0), 3.5, {"edge_rounds": 1, "of": 2, "weight": 32.0}),
                     (("edge", 1), 4.5, {"edge_rounds": 1, "of": 2, "weight": 32.0})]
    assert env.telemetry.counts.get("stragglers_dropped", 0) == 0


def test_cloud_deadline_without_partial_work_loses_both_edges():
    # a 5.4 s cloud deadline without partial work: edge 0 would send after its second round (7.0, in at 7.5),
    # edge 1's first round waits for device 3 (in at 5.5); at 5.4 the cloud round closes with neither edge,
    # and their rounds in flight are withdrawn: edge 0's two devices (training since 3.75) and device 3
    # (uploading since 5.25: all its 5 s of compute is wasted)
    env, commits, marks = _partial_cloud(Deadline(seconds=5.4), until=6.0)
    assert commits == [(3.5, "tier", "edge", 0, "commit", [0, 1], 1.75)]
    assert marks == []
    cloud = [r for r in env.telemetry.records if getattr(r, "server", None) == "cloud"]
    assert [(r.arrived, r.dropped, r.dropped_ids) for r in cloud] == [(0, 2, [0, 1])]
    assert env.telemetry.counts["stragglers_dropped"] == 2 + 3
    assert env.telemetry.counts["wasted_compute_s"] == pytest.approx(2 * (5.4 - 3.75) + 5.0)
