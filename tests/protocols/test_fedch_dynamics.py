"""FedCH in a changing world: straggler policies inside cluster rounds, slowdown and link events seen
by re-clustering, FedCH's own device → edge map, churn (members and leaders), determinism.

Hand-timed world (as in tests/protocols/test_fedch.py): 4 devices of 60 samples, links alike, uncontended
(``network.contention: false``); jobs of H = 3 steps of 10 samples. With speeds 400, 200, 100, 50
samples/s device d computes 0.075, 0.15, 0.3, 0.6 s. K = 1 puts all four in one cluster whose
leader is the medoid under ``abs_diff``: Σ_i |C_i + D2D − C_j| is smallest for j = 2 (0.634 s
against 0.948, 0.716, 1.152), so the round starts when device 2 has the global model (t = DOWN);
device 2 trains at once, the others after a D2D hop, and send their models back over D2D:
arrivals at 2·D2D + 0.075 (device 0), 2·D2D + 0.15 (1), 0.3 (2, its own), 2·D2D + 0.6 (3).
"""

import csv
import json

import numpy as np
import pytest
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.core.aggregate import weighted_average
from hierfl.core.rng import stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from hierfl.protocols import PROTOCOLS
from tests.conftest import TINY, tiny
from tests.core.test_dynamics import DYN as _DYN_BASE
from tests.protocols.test_fedch import C, D2D, DOWN, EDGE, ROUND, UP, clusters, fedch, lines

SPEEDS = [400.0, 200.0, 100.0, 50.0]
COMPUTE = [30 / s for s in SPEEDS]                       # 0.075, 0.15, 0.3, 0.6
ARRIVE = [2 * D2D + COMPUTE[0], 2 * D2D + COMPUTE[1], COMPUTE[2], 2 * D2D + COMPUTE[3]]  # after round start


def four_speeds(tmp_path, straggler, rounds=1, **protocol):
    extra = protocol.pop("extra", {})
    sc = fedch(K=protocol.pop("K", 1), stop={"rounds": rounds}, extra={"straggler": straggler, **extra}, **protocol)
    built = build(sc)
    built.world.speed_sps[:] = SPEEDS
    return sc, built, run_scenario(sc, tmp_path, built=built)


def closes(out):
    return lines(out, "round_close")


def member_models(sc, built, devices, job=0):
    """The models the devices' first jobs produce from the initial model (H = 3, lr = 0.1)."""
    trainer = LocalTrainer(sc.model, tuple(built.dataset.input_shape), built.dataset.num_classes)
    out = []
    for d in devices:
        idx = built.parts[d]
        y, _ = trainer.train(built.init_params, built.dataset.x_train[idx], built.dataset.y_train[idx],
                             TrainSpec(epochs=None, steps=3, batch_size=10, lr=0.1), stream_seed(sc.seed, "train", d, job))
        out.append(y)
    return out


# -- straggler policies inside a cluster round ------------------------------------------------------
def test_deadline_drops_exactly_the_late_members_and_averages_the_on_time_ones(tmp_path):
    sc, built, res = four_speeds(tmp_path, {"name": "deadline", "seconds": 0.45})
    first = clusters(tmp_path)[0]
    assert first["members"] == [[0, 1, 2, 3]] and first["leaders"] == [2]
    assert [a < 0.45 for a in ARRIVE] == [True, True, True, False]
    close = closes(tmp_path)[0]
    assert close["server"] == "device" and close["id"] == 2 and close["cluster"] == 0
    assert close["dropped_ids"] == [3] and close["arrived"] == 3 and close["policy"] == "deadline"
    assert close["t"] == pytest.approx(DOWN + 0.45, abs=1e-12) and close["round_s"] == pytest.approx(0.45)
    # device 3 computed from DOWN + D2D until the deadline: all of it wasted
    assert close["wasted_compute_s"] == pytest.approx(0.45 - D2D, abs=1e-12)
    tot = res.summary["totals"]
    assert tot["stragglers_dropped"] == 1 and tot["wasted_compute_s"] == pytest.approx(0.45 - D2D, abs=1e-12)
    assert tot["train_jobs"] == 3 and tot["compute_s"] == pytest.approx(sum(COMPUTE[:3]))
    edge = lines(tmp_path, "edge_aggregate")[0]
    assert edge["ids"] == [0, 1, 2] and edge["missing"] == 1 and edge["round_s"] == pytest.approx(0.45)
    # K = 1: α = 1, so the global model is the cluster model: the sample-weighted average of exactly
    # the three on-time members, summed in arrival order
    expect = weighted_average(member_models(sc, built, [0, 1, 2]), [60.0, 60.0, 60.0])
    np.testing.assert_array_equal(res.final_params, expect)


def test_deadline_applies_per_cluster(tmp_path):
    _, _, res = four_speeds(tmp_path, {"name": "deadline", "seconds": 0.45}, K=2, rounds=3)
    first = clusters(tmp_path)[0]
    # abs_diff groups 0 with 3 and 1 with 2; the medoids (leaders) are 3 and 2
    assert first["members"] == [[0, 3], [1, 2]] and first["leaders"] == [3, 2]
    by_cluster = {c["cluster"]: c for c in reversed(closes(tmp_path))}  # first close of each cluster
    # cluster 1 (devices 1, 2): all in time, closed by the last arrival (leader 2's own job, 0.3 s)
    assert by_cluster[1]["dropped_ids"] == [] and by_cluster[1]["round_s"] == pytest.approx(COMPUTE[2])
    # cluster 0: the leader's own job (0.6 s) is cut at the deadline; device 0's model is kept
    assert by_cluster[0]["dropped_ids"] == [3] and by_cluster[0]["round_s"] == pytest.approx(0.45)
    assert by_cluster[0]["wasted_compute_s"] == pytest.approx(0.45, abs=1e-12)
    assert [e["ids"] for e in lines(tmp_path, "edge_aggregate")] == [[1, 2], [0], [1, 2]]
    assert res.summary["totals"]["stragglers_dropped"] == 1


def test_over_select_keeps_exactly_the_first_k(tmp_path):
    # fraction 0.5: a round wants 2 of the 4 members; over_select (factor 2) selects 4, keeps the first 2
    sc, built, res = four_speeds(tmp_path, {"name": "over_select", "factor": 2.0}, fraction=0.5)
    close = closes(tmp_path)[0]
    assert close["selected"] == 4 and close["arrived"] == 2 and close["dropped_ids"] == [2, 3]
    assert close["round_s"] == pytest.approx(ARRIVE[1], abs=1e-12)
    # leader 2 computed since the round start, device 3 since one D2D hop later
    assert close["wasted_compute_s"] == pytest.approx(ARRIVE[1] + (ARRIVE[1] - D2D), abs=1e-12)
    assert res.summary["totals"]["wasted_compute_s"] == pytest.approx(close["wasted_compute_s"])
    expect = weighted_average(member_models(sc, built, [0, 1]), [60.0, 60.0])
    np.testing.assert_array_equal(res.final_params, expect)


def test_first_k_closes_on_the_kth_arrival(tmp_path):
    four_speeds(tmp_path, {"name": "first_k", "k": 3})
    close = closes(tmp_path)[0]
    assert close["dropped_ids"] == [3] and close["t"] == pytest.approx(DOWN + ARRIVE[2], abs=1e-12)


def test_partial_deadline_plans_with_the_device_to_leader_hop(tmp_path):
    # device 3 steps 0.2 s each; before 0.47 s it has 0.47 − D2D (download) − D2D (to the leader) for
    # 1 step (with its cloud upload UP instead of D2D it would plan 2 and miss the deadline)
    assert int((0.47 - 2 * D2D) / 0.2) == 1 and int((0.47 - D2D - UP) / 0.2) == 2
    _, _, res = four_speeds(tmp_path, {"name": "deadline", "seconds": 0.47, "partial": True})
    close = closes(tmp_path)[0]
    assert close["dropped_ids"] == [] and close["arrived"] == 4
    assert close["round_s"] == pytest.approx(COMPUTE[2])  # device 3 is back at 2·D2D + 0.2 < 0.3
    assert res.summary["totals"]["compute_s"] == pytest.approx(sum(COMPUTE[:3]) + 0.2)
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert [e["args"]["steps"] for e in trace if e["name"] == "partial_work"] == [1]


def test_sync_timeout_and_the_policy_whichever_closes_first(tmp_path):
    _, _, res = four_speeds(tmp_path, {"name": "deadline", "seconds": 0.45}, sync_timeout=0.2)
    close = closes(tmp_path)[0]
    # at 0.2 s only device 0 is in (0.157 s): FedCH's timeout closes before the 0.45 s deadline
    assert close["closed_by"] == "sync_timeout" and close["round_s"] == pytest.approx(0.2)
    assert close["dropped_ids"] == [1, 2, 3] and res.summary["totals"]["stragglers_dropped"] == 3


@pytest.mark.parametrize("seconds,fires", [(0.5, False), (0.6, True)])
def test_adaptive_reclustering_reads_the_round_time_as_the_policy_closed_it(tmp_path, seconds, fires):
    # all devices at 100 samples/s (round 2·D2D + C = 0.382 s); device 3 is 10× slower from 2·ROUND on,
    # so its rounds are cut at the deadline: flagged only when the deadline exceeds 1.5 × 0.382 = 0.573 s
    sc = fedch(K=1, recluster={"name": "adaptive"}, stop={"rounds": 4},
               extra={"straggler": {"name": "deadline", "seconds": seconds},
                      "events": [{"at_s": 2 * ROUND, "slowdown": {"select": {"ids": [3]}, "factor": 10}}]})
    run_scenario(sc, tmp_path)
    edges = lines(tmp_path, "edge_aggregate")
    assert [e["round_s"] for e in edges] == pytest.approx([2 * D2D + C] * 2 + [seconds] * 2)
    assert [e["straggler"] for e in edges] == [False, False, fires, False]
    assert len(lines(tmp_path, "recluster")) == int(fires)


def test_straggler_policies_are_accepted_for_fedch_and_the_error_lists_it(tmp_path, capsys):
    assert tiny(protocol={"name": "fedch", "K": 2}, straggler={"name": "first_k", "fraction": 0.5}).straggler.name == "first_k"
    raw = {**TINY, "protocol": {"name": "fedasync"}, "straggler": {"name": "deadline", "seconds": 1}}
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    # the protocols listed are those whose declared points take a policy at `straggler` (FedCH among them)
    takers = sorted(name for name in PROTOCOLS.names()
                    if any(p.key == "straggler" and p.closable for p in PROTOCOLS.get(name).aggregation_points))
    assert "fedch" in takers and "fedasync" not in takers
    assert "straggler.name" in err and ", ".join(takers) in err and "Traceback" not in err


@pytest.mark.parametrize("protocol,path,text", [
    ({"on_leader_lost": "panic"}, "protocol.on_leader_lost", "recluster"),
    ({"fraction": 0}, "protocol.fraction", "greater than 0"),
    ({"fraction": 1.5}, "protocol.fraction", "less than or equal to 1"),
])
def test_bad_new_keys_exit_2(tmp_path, capsys, protocol, path, text):
    raw = {**TINY, "protocol": {"name": "fedch", "K": 2, **protocol}}
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert path in err and text in err and "Traceback" not in err, err


# -- the world as re-clustering sees it -------------------------------------------------------------
def test_reclustering_sees_link_events(tmp_path):
    d2d_slow = 0.040 + 72 * 8 / 0.05e6  # device 3's uplink drops to 0.05 Mbit/s at t = 0.1
    sc = fedch(recluster={"name": "periodic", "rho": 1}, stop={"rounds": 3},
               extra={"events": [{"at_s": 0.1, "link": {"select": {"ids": [3]}, "uplink_mbps": 0.05}}]})
    built = build(sc)
    run_scenario(sc, tmp_path, built=built)
    first, second = clusters(tmp_path)[:2]
    # re-clustered at the second aggregation: the cluster of device 3, whose hop to its leader is slower now
    assert second["t"] == pytest.approx(ROUND + d2d_slow - D2D) and second["reason"] == "periodic"
    assert first["upload_s"] == pytest.approx([UP] * 4)
    assert second["upload_s"] == pytest.approx([UP] * 3 + [0.020 + 72 * 8 / 0.05e6])
    # the construction's device-to-device times use the new uplink: from the initial leaders 0 and 1,
    # device 3 costs its slow hop; the medoid update then makes it a leader (its model no longer
    # crosses its uplink inside the cluster) and the cost is back to two ordinary hops
    assert first["iteration_costs"] == pytest.approx([2 * D2D])
    assert second["iteration_costs"] == pytest.approx([D2D + d2d_slow, 2 * D2D])
    assert 3 in second["leaders"] and 3 not in first["leaders"]
    assert built.world.uplink_mbps[3] == 0.5  # the run changed a copy, not the Built world


def test_edge_leaders_keep_their_own_map_and_route_to_their_edge(tmp_path):
    # topology round robin: devices 0, 2 on edge 0 and 1, 3 on edge 1. Device ↔ edge latencies make
    # FedCH's balanced assignment {0, 1} → edge 0 and {2, 3} → edge 1 (the others cost 50 ms more)
    sc = fedch(K="auto", recluster={"name": "periodic", "rho": 1}, stop={"rounds": 4},
               extra={"topology": {"edge_servers": 2, "grouping": "round_robin"}})
    built = build(sc)
    assert built.world.edge_of.tolist() == [0, 1, 0, 1]
    built.world.edge_latency_ms[:] = [[0, 50], [0, 50], [50, 0], [50, 0]]
    run_scenario(sc, tmp_path, built=built)
    lines_ = clusters(tmp_path)
    # re-clustered after aggregation 2 (the one after 4 is not reached: the run stops there)
    assert [c["members"] for c in lines_] == [[[0, 1], [2, 3]]] * 2 and lines_[1]["reason"] == "periodic"
    # every upload reaches the FedCH edge with no extra latency: both clusters aggregate together, before
    # and after the re-clusterings (at 2 and 4 aggregations)
    cycle = EDGE + DOWN + C + UP + EDGE
    assert [a["t"] for a in lines(tmp_path, "cloud_aggregate")] == pytest.approx([cycle] * 2 + [2 * cycle] * 2,
                                                                                  abs=1e-9)
    assert built.world.edge_of.tolist() == [0, 1, 0, 1]  # the shared Built world is untouched
    rows = list(csv.DictReader((tmp_path / "devices.csv").open()))
    assert [int(r["edge"]) for r in rows] == [0, 0, 1, 1]
    assert [float(r["upload_s"]) for r in rows] == pytest.approx([UP] * 4, abs=1e-6)
    assert lines_[0]["upload_s"] == pytest.approx([UP] * 4)  # measured to the edge each device got
    # the same Built again gives the same run (nothing of it was mutated)
    from tests.determinism.test_determinism import metrics_without_wall

    run_scenario(sc, tmp_path / "again", built=built)
    assert metrics_without_wall(tmp_path / "again") == metrics_without_wall(tmp_path)


# -- churn ----------------------------------------------------------------------------------------------
def test_member_leaving_mid_round_is_not_waited_for(tmp_path):
    _, _, res = four_speeds(tmp_path, {"name": "wait_all"}, rounds=2,
                            extra={"events": [{"at_s": 0.3, "leave": {"select": {"ids": [3]}}}]})
    lost = lines(tmp_path, "device_lost")
    assert [(r["device"], r["stage"], r["reason"], r["t"]) for r in lost] == [(3, "train", "offline", 0.3)]
    first, second = closes(tmp_path)[:2]
    # the leader's own job (0.3 s after DOWN) is the last to arrive once device 3 is gone
    assert first["lost"] == 1 and first["arrived"] == 3 and first["dropped"] == 0
    assert first["t"] == pytest.approx(DOWN + COMPUTE[2], abs=1e-12)
    assert second["selected"] == 3  # device 3 is offline: not selected any more
    assert res.summary["totals"]["wasted_compute_s"] == pytest.approx(0.3 - DOWN - D2D, abs=1e-12)
    assert res.summary["totals"]["stragglers_dropped"] == 0


def leader_leaves(tmp_path, on_leader_lost, for_s):
    leave = {"select": {"ids": [2]}, **({"for_s": for_s} if for_s else {})}
    return four_speeds(tmp_path, {"name": "wait_all"}, K=2, rounds=4, on_leader_lost=on_leader_lost,
                       extra={"events": [{"at_s": 0.2, "leave": leave}]})


def test_leader_lost_waits_for_it_by_default(tmp_path):
    # clusters {0, 3} (leader 3) and {1, 2} (leader 2); leader 2 goes offline at 0.2 s for 1 s, during
    # its own job: its round is withdrawn, the cluster stalls, and when 2 is back the cloud sends it w
    _, _, res = leader_leaves(tmp_path, "wait", 1.0)
    lost = lines(tmp_path, "leader_lost")
    assert [(r["cluster"], r["leader"], r["t"], r["online"]) for r in lost] == [(1, 2, 0.2, False)]
    # device 1 was computing since DOWN + D2D (its 0.15 s job would end at 0.212 s): withdrawn
    assert lost[0]["wasted_compute_s"] == pytest.approx(0.2 - DOWN - D2D, abs=1e-12)
    # with the leader's own job, lost when it went offline (computing since DOWN)
    assert res.summary["totals"]["wasted_compute_s"] == pytest.approx(2 * (0.2 - DOWN) - D2D, abs=1e-12)
    # cluster 0's rounds last its leader's own job (0.6 s): it aggregates at DOWN + 0.6 + k·(DOWN + 0.6 + UP);
    # cluster 1 is back at 1.2 s: download, a 0.3 s round, upload, download, another round
    edges = lines(tmp_path, "edge_aggregate")
    c1 = [1.2 + DOWN + COMPUTE[2], 1.2 + 2 * DOWN + UP + 2 * COMPUTE[2]]
    assert [(e["cluster"], e["t"]) for e in edges] == [
        (0, pytest.approx(DOWN + 0.6)), (0, pytest.approx(2 * DOWN + UP + 1.2)),
        (1, pytest.approx(c1[0])), (1, pytest.approx(c1[1]))]
    assert lines(tmp_path, "recluster") == [] and len(clusters(tmp_path)) == 1
    assert res.summary["totals"]["devices_lost"] == 1


def test_leader_lost_reclusters_on_demand(tmp_path):
    _, _, res = leader_leaves(tmp_path, "recluster", None)
    rec = lines(tmp_path, "recluster")
    assert [(r["reason"], r["t"], r["cluster"], r["leader"]) for r in rec] == [("leader_lost", 0.2, 1, 2)]
    second = clusters(tmp_path)[1]
    assert second["reason"] == "leader_lost" and second["offline"] == [2] and 2 not in second["leaders"]
    assert second["trigger"]["cluster"] == 1 and second["trigger"]["leader"] == 2
    assert sorted(d for m in second["members"] for d in m) == [0, 1, 2, 3]
    # the offline device is a member, never selected while away: it trains no more
    assert all(2 not in e["ids"] for e in lines(tmp_path, "edge_aggregate") if e["t"] > 0.2)
    assert res.summary["rounds"] == 4


# -- determinism with everything on ---------------------------------------------------------------------
# the world of tests/core/test_dynamics.py's determinism test, plus a deadline on the cluster rounds
DYN = {**_DYN_BASE, "straggler": {"name": "deadline", "seconds": 1.5},
       "stop": {"virtual_time_s": 12, "rounds": 1000}}


def fedch_dyn(**kw):
    return tiny(protocol={"name": "fedch", "K": 2, "H": 3, "lr": 0.1, "recluster": {"name": "periodic", "rho": 2},
                          "on_leader_lost": "recluster"}, **DYN, **kw)


def test_churn_run_exercises_losses_and_is_repeatable(tmp_path):
    from tests.determinism.test_determinism import metrics_without_wall

    a = run_scenario(fedch_dyn(), tmp_path / "a")
    b = run_scenario(fedch_dyn(), tmp_path / "b")
    assert metrics_without_wall(tmp_path / "a") == metrics_without_wall(tmp_path / "b")
    assert np.array_equal(a.final_params, b.final_params)
    t = a.summary["totals"]
    assert t["devices_lost"] > 0 and t["cloud_aggregations"] > 3 and t["stragglers_dropped"] + t["devices_lost"] > 0


@pytest.mark.ray
def test_determinism_local_vs_ray_two_hosts_with_a_policy_and_churn(tmp_path, ray_session):
    from tests.determinism.test_determinism import metrics_without_wall

    local = run_scenario(fedch_dyn(), tmp_path / "local")
    ray = run_scenario(fedch_dyn(runtime={"executor": "ray", "workers": 2}), tmp_path / "ray")
    assert metrics_without_wall(tmp_path / "local") == metrics_without_wall(tmp_path / "ray")
    assert np.array_equal(local.final_params, ray.final_params)
