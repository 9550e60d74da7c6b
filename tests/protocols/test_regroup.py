"""Re-grouping (``protocol.recluster:``) in each hierarchical protocol, against the fake environment.

Each test runs a tiny world where a slowdown makes one device slow, and checks by hand which devices
moved, when, and the bytes of their migration transfers (one model from the new edge server each).
Grouping: k-means on compute time now (the default of edge-server protocols), on a world where the
compute times take only two values, so its clusters are plain to see.
"""

from __future__ import annotations

import math

import pytest

from hierfl.env import Regroup
from hierfl.protocols import HierFAVGConfig
from tests.fakeenv import FakeEnv, FakeWorld

MODEL_BYTES = 1000
# edge 0 = {0, 1} (1 s per step), edge 1 = {2, 3} (4 s per step); device 0 becomes 4× slower at t = 1:
# k-means on compute time then puts device 1 alone at edge 0 (the fastest group) and 0, 2, 3 at edge 1
SAMPLES, EDGE_OF, UNIT_S = [16, 48, 32, 32], [0, 0, 1, 1], [1.0, 1.0, 4.0, 4.0]
SLOW = {0: [(1.0, math.inf, 4.0)]}


def _env(rounds: int, slow=SLOW) -> FakeEnv:
    world = FakeWorld(SAMPLES, EDGE_OF, unit_s=UNIT_S)
    world.model_bytes = MODEL_BYTES
    return FakeEnv(world, rounds=rounds, slow=slow)


def _regroups(env: FakeEnv) -> list[Regroup]:
    return [r for r in env.telemetry.records if isinstance(r, Regroup)]


def _at(log, t):
    return [line for line in log if line[0] == t]


# -- HierFAVG ------------------------------------------------------------------------------------------------

def test_hierfavg_on_event_regroups_after_the_slowdown_between_cloud_rounds():
    env = _env(rounds=2)
    log = env.run(HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "on_event"}).create(env))
    # cloud round 0 closes at 5.0 (edge 1: download 0.25 + 4 s + upload 0.25, then 0.5 s to the cloud): the
    # first decision point after the slowdown (t = 1). Device 0 moves to edge 1; its migration transfer
    # (edge 1 → device 0, 0.25 s) arrives at 5.25, before the global model reaches the edges (5.5)
    assert _at(log, 5.25) == [(5.25, "migrate_done", "device=0 edge=1 from_edge=0")]
    assert _at(log, 5.75) == [(5.75, "train_start", "device=1 edge=0"), (5.75, "train_start", "device=0 edge=1"),
                              (5.75, "train_start", "device=2 edge=1"), (5.75, "train_start", "device=3 edge=1")]
    [rec] = _regroups(env)
    assert (rec.reason, rec.generation, rec.grouping, rec.moved, rec.from_edge, rec.to_edge) == \
        ("on_event", 1, "kmeans", [0], [0], [1])
    assert rec.migration_bytes == MODEL_BYTES and rec.extra == {"changes": ["slowdown"]}
    assert env.telemetry.counts["devices_migrated"] == 1 and env.telemetry.counts["bytes_migration"] == MODEL_BYTES
    [clusters] = [c[1][0] for c in env.telemetry.calls if c[0] == "clusters"]
    assert (clusters.t, clusters.members) == (5.0, [[1], [0, 2, 3]])
    # cloud round 1 weighs the edges by the data they serve now: 48 and 16 + 32 + 32 = 80;
    # device 0 computes 4 s from 5.75 (slowed): edge 1 closes at 10.0 with (16·3.625 + 32·5.625 + 32·6.625)/80
    assert (10.0, "tier", "edge", 1, "commit", [0, 2, 3], 5.625) in log
    assert log[-2:] == [(10.5, "tier", "cloud", 0, "add", 5.625, 80.0),
                        (10.5, "tier", "cloud", 0, "commit", [0, 1], 5.25)]   # (48·4.625 + 80·5.625) / 128


def test_hierfavg_adaptive_flags_the_slow_edge_round():
    env = _env(rounds=3)
    log = env.run(HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "adaptive", "gamma": 1.5}).create(env))
    # edge 0's rounds: 0 → 1.5 (1.5 s, the baseline); 5.5 (the global model is back) → 10.0: 0.25 s to the
    # devices, device 0 now 4 s, 0.25 s up: 4.5 s > 1.5 × 1.5 s → flagged, carried by its upload (arrives
    # 10.5); the cloud round closes at 10.5 and the groups are re-formed there
    [rec] = _regroups(env)
    assert (rec.reason, rec.moved, rec.from_edge, rec.to_edge) == ("adaptive", [0], [0], [1])
    assert rec.extra == {"flagged": [0], "gamma": 1.5, "k_tilde": 1}
    assert _at(log, 10.75)[0] == (10.75, "migrate_done", "device=0 edge=1 from_edge=0")


def test_hierfavg_periodic_regroups_every_rho_cloud_rounds():
    env = _env(rounds=2)
    env.run(HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "periodic", "rho": 1}).create(env))
    # ϱ·K = 2 edge models applied: every cloud round; after round 0 (t = 5.0) device 0 moves, after round 1
    # (t = 10.5: the run ends there) the groups are already right
    assert [(r.generation, r.moved) for r in _regroups(env)] == [(1, [0])]


def test_hierfavg_never_and_no_change_move_nobody():
    for recluster, slow in (({"name": "never"}, SLOW), ({"name": "on_event"}, {})):
        env = _env(rounds=2, slow=slow)
        log = env.run(HierFAVGConfig(kappa1=1, kappa2=1, recluster=recluster).create(env))
        assert not _regroups(env) and "devices_migrated" not in env.telemetry.counts
        assert not any(line[1] == "migrate_done" for line in log)


def test_hierfavg_without_migration_transfer():
    env = _env(rounds=2)
    cfg = HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "on_event", "migration": {"transfer": False}})
    log = env.run(cfg.create(env))
    [rec] = _regroups(env)
    assert rec.moved == [0] and rec.migration_bytes == 0
    assert not any(line[1] == "migrate_done" for line in log)
