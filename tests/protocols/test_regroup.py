"""Re-grouping (``protocol.recluster:``) in each hierarchical protocol, against the fake environment.

Each test runs a tiny world where a slowdown makes one device slow, and checks by hand which devices
moved, when, and the bytes of their migration transfers (one model from the new edge server each).
Grouping: k-means on compute time now (the default of edge-server protocols), on a world where the
compute times take only two values, so its clusters are plain to see.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hierfl.config.errors import ConfigError
from hierfl.driver import resume_run, run_scenario
from hierfl.env import Regroup
from hierfl.protocols import PROTOCOLS
from hierfl.methods.ahfl.protocol import AHFLConfig
from hierfl.methods.hierfavg.protocol import HierFAVGConfig
from hierfl.methods.fedat.protocol import FedATConfig
from hierfl.methods.fedch import FedCHConfig
from hierfl.methods.fedhisyn.protocol import FedHiSynConfig
from hierfl.methods.wscc.protocol import WSCCConfig
from hierfl.scenario.loader import deep_merge, load_scenario
from tests.badinput import assert_refused
from tests.conftest import TINY, tiny
from tests.driver.test_recovery import _stop_at, assert_same_run
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
    assert _at(log, 5.25) == [(5.25, "migrate_done", "device=0 group=1 from_group=0")]
    assert _at(log, 5.75) == [(5.75, "train_start", "device=1 edge=0"), (5.75, "train_start", "device=0 edge=1"),
                              (5.75, "train_start", "device=2 edge=1"), (5.75, "train_start", "device=3 edge=1")]
    [rec] = _regroups(env)
    assert (rec.reason, rec.generation, rec.grouping, rec.moved, rec.from_group, rec.to_group) == \
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
    assert (rec.reason, rec.moved, rec.from_group, rec.to_group) == ("adaptive", [0], [0], [1])
    assert rec.extra == {"flagged": [0], "gamma": 1.5, "k_tilde": 1}
    assert _at(log, 10.75)[0] == (10.75, "migrate_done", "device=0 group=1 from_group=0")


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
        assert not _regroups(env) and env.telemetry.counts.get("devices_migrated", 0) == 0
        assert not any(line[1] == "migrate_done" for line in log)


def test_hierfavg_without_migration_transfer():
    env = _env(rounds=2)
    cfg = HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "on_event", "migration": {"transfer": False}})
    log = env.run(cfg.create(env))
    [rec] = _regroups(env)
    assert rec.moved == [0] and rec.migration_bytes == 0
    assert not any(line[1] == "migrate_done" for line in log)


# -- AHFL ----------------------------------------------------------------------------------------------------
# leader periods (auto): median of compute + upload over the members, 1.25 s (edge 0) and 4.25 s (edge 1);
# cloud period: 2 × median(1.25, 4.25) = 5.5 s. Device 0's second job starts at 1.75 at 4× (4 s): it is
# still training for edge 0 when the cloud tick at 5.5 re-forms the groups.

def _ahfl(recluster, until=12.0):
    env = _env(rounds=None)
    log = env.run(AHFLConfig(recluster=recluster).create(env), until=until)
    return env, [line for line in log if not (line[1] == "tier" and line[4] == "queue")]


def test_ahfl_on_event_finish_delivers_the_job_in_flight_to_the_old_leader():
    env, log = _ahfl({"name": "on_event"})
    [rec] = _regroups(env)
    assert (rec.moved, rec.from_group, rec.to_group, rec.migration_bytes) == ([0], [0], [1], MODEL_BYTES)
    assert _at(log, 5.75)[-1] == (5.75, "migrate_done", "device=0 group=1 from_group=0")
    # its update still goes to edge 0 (arrives 6.0, applied at edge 0's tick at 6.25); its next job comes
    # from edge 1 (download 6.0 → 6.25) and its update goes there (6.25 + 4 + 0.25 = 10.5)
    assert (6.0, "upload_done", "device=0 edge=0 version=0") in log
    assert (6.25, "train_start", "device=0 edge=1 version=0") in log
    assert (10.5, "upload_done", "device=0 edge=1 version=0") in log
    assert env.telemetry.counts.get("wasted_compute_s", 0) == 0
    # the cloud weights follow the data served now: α·σ(0)·n_k/N = 0.6 · 48/128 and 0.6 · 80/128
    [cloud] = [line for line in log if line[0] == 11.0 and line[1] == "tier"]
    assert [round(c, 12) for c, _, _ in cloud[6]] == [0.225, 0.225, 0.375, 0.225]


def test_ahfl_on_event_abort_withdraws_the_job_and_restarts_from_the_new_leader():
    env, log = _ahfl({"name": "on_event", "migration": {"in_flight": "abort"}})
    # the job started at 1.75 is withdrawn at 5.5: 3.75 s of compute wasted; the restart's download and
    # the migration transfer both leave edge 1 at 5.5
    assert env.telemetry.counts["wasted_compute_s"] == 3.75
    assert _at(log, 5.75)[-2:] == [(5.75, "migrate_done", "device=0 group=1 from_group=0"),
                                   (5.75, "train_start", "device=0 edge=1 version=0")]
    assert not any(line[1] == "upload_done" and line[2].startswith("device=0 edge=0") and line[0] > 5.5
                   for line in log)


def test_ahfl_adaptive_flags_the_leader_round_with_the_slow_round_trip():
    env, log = _ahfl({"name": "adaptive"}, until=11.5)
    # edge 0's aggregations apply round trips of 1.5, 1.5, 1.25 s, then at 6.25 device 0's 1.75 → 6.0 (4.25 s,
    # > 1.5 × median 1.5 s): flagged; that push reaches the cloud queue at 6.75, applied at the tick of 11.0
    [rec] = _regroups(env)
    assert (rec.reason, rec.moved, rec.to_group) == ("adaptive", [0], [1])
    assert rec.extra["flagged"] == [0]
    assert (11.25, "migrate_done", "device=0 group=1 from_group=0") in log


# -- FedCH ---------------------------------------------------------------------------------------------------

def test_fedch_on_event_rebuilds_at_the_first_cloud_update_after_the_slowdown():
    env = _env(rounds=3)
    log = env.run(FedCHConfig(K=2, H=1, recluster={"name": "on_event"}).create(env))
    # cluster 0's first model is applied at 2.5 (> 1.0, the slowdown): the cloud re-clusters there. FedCH's
    # own migration: cluster 1's round in flight is withdrawn (devices 2 and 3 trained 0.75 → 2.5: 3.5 s
    # wasted) and the cloud sends (w, t) to both leaders again (0.5 s each)
    [rec] = [r for r in env.telemetry.records if type(r).__name__ == "Recluster"]
    assert (rec.reason, rec.generation, rec.version, rec.extra) == ("on_event", 1, 1, {"wasted_compute_s": 3.5})
    assert _at(log, 3.0) == [(3.0, "leader_download_done", "cluster=0 gen=1"),
                             (3.0, "leader_download_done", "cluster=1 gen=1")]
    [clusters] = [c[1][0] for c in env.telemetry.calls if c[0] == "clusters"]
    # measured now: device 0 computes 4 s; the balanced assignment (two per edge) keeps {0, 1} and {2, 3}
    assert clusters.tail["compute_s"] == [4.0, 1.0, 4.0, 4.0] and clusters.members == [[0, 1], [2, 3]]
    assert clusters.tail["trigger"]["changes"] == ["slowdown"]


def test_fedch_refuses_a_grouping_or_migration_of_its_own():
    with pytest.raises(ConfigError) as err:
        tiny(protocol={"name": "fedch", "recluster": {"name": "on_event", "grouping": "kmeans"}},
             topology={"edge_servers": 2})
    assert "protocol.recluster.grouping" in str(err.value)


# -- WSCC ----------------------------------------------------------------------------------------------------
# 4 devices at the cloud, the cloud's similarity fixed ({0, 1} alike, {2, 3} alike); device 0 slows down 4× at
# t = 5. Warm-up 0 → 4.5; round 1 4.5 → 9.0 (cluster 0's last update arrives at 6.0); round 2 begins at 9.0
WSCC_SIM = np.array([[1, 1, -1, -1], [1, 1, -1, -1], [-1, -1, 1, 1], [-1, -1, 1, 1]], dtype=float)


def _wscc(recluster):
    env = FakeEnv(FakeWorld(SAMPLES, unit_s=UNIT_S), rounds=4, similarity=WSCC_SIM,
                  slow={0: [(5.0, math.inf, 4.0)]})
    log = env.run(WSCCConfig(recluster=recluster).create(env))
    clusters = [c[1][0] for c in env.telemetry.calls if c[0] == "clusters"]
    return env, log, clusters


def test_wscc_on_event_makes_the_next_round_a_reclustering_round():
    _, log, clusters = _wscc({"name": "on_event"})
    # round 2 begins at 9.0 after the slowdown: it relays every update to the cloud and re-clusters at its close
    # (13.5: device 0's 4 s job from 9.25 and its upload)
    assert [(c.t, c.reason) for c in clusters] == [(4.5, "warmup"), (13.5, "recluster")]
    assert clusters[1].tail["trigger"] == {"reason": "on_event", "changes": ["slowdown"]}
    assert (13.5, "tier", "cloud", 0, "similarity", [1.0, 2.0, 3.0, 4.0]) in log


def test_wscc_adaptive_flags_the_slow_cluster_round_and_reclusters_the_round_after():
    _, _, clusters = _wscc({"name": "adaptive"})
    # cluster 0's round time (round begin → its last update): round 1 4.5 → 6.0 = 1.5 s (the baseline), round 2
    # 9.0 → 13.5 = 4.5 s > 1.5 × 1.5 s → flagged at its close; round 3 is the re-clustering round (closes 18.0)
    assert [(c.t, c.reason) for c in clusters] == [(4.5, "warmup"), (18.0, "recluster")]
    assert clusters[1].tail["trigger"] == {"reason": "adaptive", "flagged": [0], "gamma": 1.5, "k_tilde": 1}


def test_wscc_recluster_every_is_periodic():
    cfg = WSCCConfig(recluster_every=2)
    assert cfg.recluster.name == "periodic" and cfg.recluster.rho == 2
    assert WSCCConfig.model_validate(cfg.model_dump()).recluster == cfg.recluster  # a resolved config reloads
    with pytest.raises(ValueError, match="not both"):
        WSCCConfig(recluster_every=2, recluster="adaptive")


# -- FedAT ---------------------------------------------------------------------------------------------------
# devices at the cloud; response times 0.25 + unit_s + 0.25 = 1.5, 1.5, 4.5, 4.5 s: k-means tiers {0, 1} and
# {2, 3}; fraction 1 (every member per tier round). Device 0 becomes 4× slower at t = 1.

def _fedat(recluster):
    world = FakeWorld(SAMPLES, unit_s=UNIT_S)
    world.model_bytes = MODEL_BYTES
    env = FakeEnv(world, rounds=6, slow=SLOW)
    cfg = FedATConfig(tiers=2, tiering="kmeans", fraction=1.0, recluster=recluster)
    return env, env.run(cfg.create(env))


def test_fedat_on_event_retiers_when_the_fast_tier_round_closes():
    env, log = _fedat({"name": "on_event"})
    # tier 0's first round closes at 1.5 (after the slowdown): response times now 4.5, 1.5, 4.5, 4.5 s → tiers
    # {1} and {0, 2, 3}; device 0's migration transfer is the global model from the cloud (0.25 s)
    [rec] = _regroups(env)
    assert (rec.grouping, rec.moved, rec.from_group, rec.to_group) == ("fedat_tiers", [0], [0], [1])
    assert rec.migration_bytes == MODEL_BYTES
    assert _at(log, 1.75) == [(1.75, "migrate_done", "device=0 group=1 from_group=0"),
                              (1.75, "train_start", "device=1 tier=0 round=1")]
    # tier 1's second round (after its first closes at 4.5) has device 0
    assert (4.75, "train_start", "device=0 tier=1 round=1") in log


def test_fedat_adaptive_flags_the_tier_round_slowed_by_device_0():
    env, log = _fedat({"name": "adaptive"})
    # tier 0: round 0 lasts 1.5 s; round 1 (1.5 → 6.0: device 0 computes 4 s) 4.5 s > 1.5 × 1.5 → re-tiered at 6.0
    [rec] = _regroups(env)
    assert (rec.reason, rec.moved, rec.to_group) == ("adaptive", [0], [1])
    assert (6.25, "migrate_done", "device=0 group=1 from_group=0") in log


def test_fedat_refuses_an_edge_grouping():
    with pytest.raises(ConfigError) as err:
        tiny(protocol={"name": "fedat", "tiers": 2, "recluster": {"name": "on_event", "grouping": "kmeans"}})
    assert "protocol.recluster.grouping" in str(err.value)


# -- FedHiSyn ------------------------------------------------------------------------------------------------
# devices at the cloud; unit times 1, 1, 4, 4 s: k-means classes {0, 1} and {2, 3}, rings of two; T = auto =
# max(unit + ring hop 0.125 s) = 4.125 s. Device 0 becomes 4× slower at t = 1.

def _fedhisyn(recluster):
    world = FakeWorld(SAMPLES, unit_s=UNIT_S)
    world.model_bytes = MODEL_BYTES
    env = FakeEnv(world, rounds=3, slow=SLOW)
    return env, env.run(FedHiSynConfig(k=2, recluster=recluster).create(env))


def test_fedhisyn_on_event_reclasses_between_rounds():
    env, log = _fedhisyn({"name": "on_event"})
    # round 0: windows 0.25 → 4.375, uploads arrive 4.625, where the round closes: device 0's unit time is 4 s
    # now → classes {1} and {0, 2, 3}; its migration transfer (the global model from the cloud) arrives with
    # the round's download at 4.875
    [rec] = _regroups(env)
    assert (rec.grouping, rec.moved, rec.from_group, rec.to_group) == ("capacity_classes", [0], [0], [1])
    assert rec.migration_bytes == MODEL_BYTES and env.telemetry.counts["bytes_migration"] == MODEL_BYTES
    assert _at(log, 4.875)[0] == (4.875, "migrate_done", "device=0 group=1 from_group=0")
    [clusters] = [c[1][0] for c in env.telemetry.calls if c[0] == "clusters"]
    assert (clusters.t, clusters.members) == (4.625, [[1], [0, 2, 3]])


def test_fedhisyn_adaptive_flags_the_class_whose_unit_time_grew():
    env, log = _fedhisyn({"name": "adaptive"})
    # class 0's longest mean unit time: round 0 1 s (device 0's second unit, 4 s, would overrun the window and is
    # discarded); round 1 4 s > 1.5 × 1 s → flagged; re-classed when round 1 closes (9.25)
    [rec] = _regroups(env)
    assert (rec.reason, rec.moved, rec.to_group, rec.extra["flagged"]) == ("adaptive", [0], [1], [0])
    assert (9.5, "migrate_done", "device=0 group=1 from_group=0") in log


# -- which protocols take it ---------------------------------------------------------------------------------

def test_every_hierarchical_protocol_takes_a_recluster_policy():
    takes = {n for n in PROTOCOLS.names() if "recluster" in PROTOCOLS.get(n).model_fields}
    assert takes == {"hierfavg", "ahfl", "fedat", "fedhisyn", "fedch", "wscc", "fedftg_hier"}
    with pytest.raises(ConfigError) as err:  # a protocol without groups refuses the key
        tiny(protocol={"name": "fedavg", "recluster": "periodic"})
    assert "recluster" in err.value.report()


# -- bad input: exit 2, the key path, the allowed values ------------------------------------------------------

@pytest.mark.parametrize(("protocol", "extra", "key"), [
    ({"name": "hierfavg", "recluster": "bogus"}, {"topology": {"edge_servers": 2}}, "protocol.recluster"),
    ({"name": "hierfavg", "recluster": {"name": "on_event", "grouping": "topology"}},
     {"topology": {"edge_servers": 2}}, "protocol.recluster"),
    ({"name": "hierfavg", "recluster": {"name": "on_event", "watch": ["weather"]}},
     {"topology": {"edge_servers": 2}}, "protocol.recluster"),
    ({"name": "hierfavg", "recluster": {"name": "periodic", "migration": {"in_flight": "abort"}}},
     {"topology": {"edge_servers": 2}}, "protocol.recluster.migration.in_flight"),
    ({"name": "ahfl", "recluster": {"name": "adaptive", "k_tilde": 2, "share": 0.5}},
     {"topology": {"edge_servers": 2}}, "protocol.recluster"),
    ({"name": "fedhisyn", "k": 2, "recluster": {"name": "periodic", "grouping": "nearest"}}, {},
     "protocol.recluster.grouping"),
    ({"name": "wscc", "recluster_every": 2, "recluster": "on_event"}, {}, "protocol"),
])
def test_bad_recluster_input_exits_2_with_the_key_path(tmp_path, capsys, protocol, extra, key):
    assert_refused(tmp_path, capsys, deep_merge(copy.deepcopy(TINY), {"protocol": protocol, **extra}), key)


# -- a checkpoint keeps the re-grouping state ------------------------------------------------------------------

@pytest.mark.parametrize("stop_at", [1, 3])
def test_resume_gives_the_uninterrupted_run_with_its_regroupings(tmp_path, stop_at):
    path = Path(__file__).resolve().parents[2] / "scenarios" / "ahfl_recluster.yaml"
    overrides = ["stop.rounds=6", "stop.target_accuracy=null", "runtime.executor=local",
                 "runtime.checkpoint.every_cloud_aggregations=1", "devices.count=20"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(str(path), overrides), ref)
    lines = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    assert any(x["event"] == "regroup" for x in lines)  # at the first cloud tick: before one stop, after the other
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(str(path), overrides), out, progress=_stop_at(stop_at))
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_hierfavg_on_event_churn_fires_but_a_speed_grouping_moves_nobody():
    # device 3 goes offline at 4.75, after its update arrived (4.5): at the first cloud boundary (5.0) the world
    # differs in who is online; k-means on speeds gives the same groups, so nobody moves: a trace instant only
    world = FakeWorld(SAMPLES, EDGE_OF, unit_s=UNIT_S)
    env = FakeEnv(world, rounds=2, away={3: [(4.75, math.inf)]})
    cfg = HierFAVGConfig(kappa1=1, kappa2=1, recluster={"name": "on_event", "watch": ["churn"]})
    env.run(cfg.create(env))
    instants = [c for c in env.telemetry.calls if c[0] == "instant" and c[1][1] == "regroup"]
    assert [(c[1][2], c[2]["moved"], c[2]["changes"]) for c in instants] == [(5.0, [], ["churn"])]
    assert not _regroups(env)


def test_fedat_a_device_finishing_its_old_tier_round_joins_the_new_tier_after():
    # device 2 becomes 4× faster at t = 1 (unit 1 s): at 1.5 (tier 0's close) it moves to tier 0 while its tier-1
    # job (0.25 → 4.25, started before the speed-up) is in flight. `finish`: that job still goes to tier 1
    # (arrives 4.5); tier 0's rounds at 1.5 and 3.0 leave it out (one job at a time); the round at 4.5 has it
    world = FakeWorld(SAMPLES, unit_s=UNIT_S)
    world.model_bytes = MODEL_BYTES
    env = FakeEnv(world, rounds=8, slow={2: [(1.0, math.inf, 0.25)]})
    cfg = FedATConfig(tiers=2, tiering="kmeans", fraction=1.0, recluster={"name": "on_event"})
    log = env.run(cfg.create(env))
    [rec] = _regroups(env)
    assert (rec.moved, rec.from_group, rec.to_group) == ([2], [1], [0])
    starts = [(t, p) for t, kind, p, *_ in log if kind == "train_start" and p.startswith("device=2")]
    assert starts[:2] == [(0.25, "device=2 tier=1 round=0"), (4.75, "device=2 tier=0 round=3")]
    assert (4.5, "upload_done", "device=2 tier=1 round=0") in log
    assert (1.75, "train_start", "device=0 tier=0 round=1") in log and \
        not any(p == "device=2 tier=0 round=1" or p == "device=2 tier=0 round=2" for _, _, p, *_ in log)
