"""Edge-server and cloud faults (``edge_fail`` / ``cloud_fail`` events, issue 14 part 3).

Hand-timed world (tests/conftest.py TINY, as in tests/test_protocols.py): 4 devices of 60 samples
behind 2 edge servers by ``round_robin`` (devices 0, 2 → edge 0; 1, 3 → edge 1), device ↔ edge
latency 20 + 5 ms, edge ↔ cloud 100 Mbps / 10 ms, a 72-byte model, κ1 = 5 steps of 10 samples
at 100 samples/s (0.5 s; device 3 is made twice as slow: 1.0 s). One HierFAVG edge round is
``DN + 0.5 + UPL`` (device 3's: ``DN + 1.0 + UPL``) and an edge ↔ cloud hop ``LINK``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hierfl.build import build
from hierfl.cli import main
from hierfl.core.faults import FaultWindow, nearest_edge, outages
from hierfl.driver import run_scenario
from tests.conftest import tiny
from tests.test_determinism import metrics_without_wall

DN = 0.025 + 72 * 8 / 1.0e6                # edge → device: 20 + 5 ms, 72 bytes at 1 Mbps
UPL = 0.025 + 72 * 8 / 0.5e6               # device → edge at 0.5 Mbps
LINK = 0.010 + 72 * 8 / 100e6              # edge ↔ cloud
ROUND = DN + 0.5 + UPL                     # an edge round of devices at 100 samples/s
SLOW = DN + 1.0 + UPL                      # ... with device 3 (50 samples/s) in it
TOPO = {"edge_servers": 2, "grouping": "round_robin", "edge_latency_ms": 5,
        "edge_cloud": {"uplink_mbps": 100, "downlink_mbps": 100, "latency_ms": 10}}


def scenario(protocol, events, rounds=4, **extra):
    return tiny(protocol=protocol, training={"epochs": None, "batch_size": 10, "steps": 5}, topology=TOPO,
                stop={"rounds": rounds}, events=events, **extra)


def run(tmp_path, sc, speeds=(100.0, 100.0, 100.0, 50.0)):
    built = build(sc)
    built.world.speed_sps[:] = speeds
    return run_scenario(sc, tmp_path, built=built)


def lines(out, kind):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if f'"event": "{kind}"' in x]


HIERFAVG = {"name": "hierfavg", "kappa1": 5, "kappa2": 1}


# -- pure parts -----------------------------------------------------------------------------------
def test_outages_merge_per_server_and_nearest_edge_breaks_ties_by_id():
    ws = [FaultWindow(5, 10, ("edge", 1), "wait"), FaultWindow(8, 12, ("edge", 1), "reattach"),
          FaultWindow(12, 13, ("edge", 1)), FaultWindow(1, 2, ("cloud", 0)), FaultWindow(20, 21, ("edge", 1))]
    got = [(o.target, o.start, o.end, o.on_edge_fail) for o in outages(ws)]
    assert got == [(("cloud", 0), 1, 2, "reattach"), (("edge", 1), 5, 13, "wait"), (("edge", 1), 20, 21, "reattach")]
    lat = np.array([[9.0, 3.0, 3.0, 1.0]])
    assert nearest_edge(lat, 0, [0, 1, 2]) == 1          # 3 ms to edges 1 and 2: the lower id
    assert nearest_edge(lat, 0, [0, 3]) == 3
    assert nearest_edge(np.zeros((1, 0)), 0, [2, 1]) == 1 and nearest_edge(lat, 0, []) is None


# -- HierFAVG -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["wait", "reattach"])
def test_hierfavg_edge_fail_closes_the_cloud_round_and_loses_the_edge_round(tmp_path, mode):
    # edge 1 fails at 0.8 s: device 1's update reached it at ROUND (lost with its partial aggregation),
    # device 3 trains since DN (withdrawn: 0.8 − DN of wasted compute); the cloud round, which had edge
    # 0's model since ROUND + LINK, closes at once without edge 1
    sc = scenario(HIERFAVG, [{"at_s": 0.8, "edge_fail": {"edges": [1], "for_s": 1.0, "on_edge_fail": mode}}])
    res = run(tmp_path, sc)
    fail, = lines(tmp_path, "server_fail")
    assert (fail["t"], fail["server"], fail["id"], fail["for_s"], fail["transfers_lost"]) == (0.8, "edge", 1, 1.0, 0)
    loss, = lines(tmp_path, "fault_loss")
    assert loss["updates_lost"] == 1 and loss["wasted_compute_s"] == pytest.approx(0.8 - DN, abs=1e-12)
    clouds = lines(tmp_path, "cloud_aggregate")
    t1 = 0.8
    if mode == "wait":  # edge 0 goes on with its two devices; edge 1 is back at 1.8 < t3 and rejoins at t3
        t2 = t1 + LINK + ROUND + LINK
        t3 = t2 + LINK + ROUND + LINK
        back_at = t3
        edge0 = [2, 2, 2, 2]
        participants = [1, 1, 1, 2]
    else:  # devices 1 and 3 join edge 0 (3 is slow: a longer round) until edge 1 rejoins at t2 > 1.8
        t2 = t1 + LINK + SLOW + LINK
        t3 = t2 + LINK + SLOW + LINK
        back_at = t2
        edge0 = [2, 4, 2, 2]
        participants = [1, 1, 2, 2]
    t4 = t3 + LINK + SLOW + LINK
    assert [c["t"] for c in clouds] == pytest.approx([t1, t2, t3, t4], abs=1e-9)
    assert [c["participants"] for c in clouds] == participants
    assert [e["participants"] for e in lines(tmp_path, "edge_aggregate") if e["edge"] == 0] == edge0
    moves = [(m["t"], m["devices"], m["from_edge"], m["to_edge"], m["reason"]) for m in lines(tmp_path, "reattach")]
    if mode == "wait":
        assert moves == []
        # edge 1 never closed a round before it failed (device 3 was still training); its first is the
        # round started by t3's broadcast
        assert [e["t"] for e in lines(tmp_path, "edge_aggregate") if e["edge"] == 1] == pytest.approx(
            [back_at + LINK + SLOW], abs=1e-9)
    else:
        assert moves == [(0.8, [1, 3], 1, 0, "edge_fail"), (pytest.approx(back_at, abs=1e-9), [1, 3], 0, 1, "edge_back")]
    back, = lines(tmp_path, "server_recover")
    assert back["t"] == pytest.approx(1.8) and back["down_s"] == pytest.approx(1.0)
    tot = res.summary["totals"]
    assert tot["edge_failures"] == 1 and tot["edge_down_s"] == pytest.approx(1.0)
    assert tot["fault_updates_lost"] == 1 and tot["fault_transfers_lost"] == 0
    assert tot["devices_reattached"] == (0 if mode == "wait" else 4)
    assert tot["wasted_compute_s"] == pytest.approx(0.8 - DN, abs=1e-12)
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    down = [e for e in events if e.get("name") == "down" and e.get("ph") == "X"]
    assert len(down) == 1 and down[0]["dur"] == pytest.approx(1.0e6)


def test_hierfavg_edge_model_on_its_way_is_lost(tmp_path):
    # equal devices: both edges close at ROUND; edge 1 fails while its model is on its way to the cloud
    sc = scenario(HIERFAVG, [{"at_s": ROUND + LINK / 2, "edge_fail": {"edges": [1], "for_s": 5.0}}], rounds=2)
    res = run(tmp_path, sc, speeds=(100.0,) * 4)
    fail, = lines(tmp_path, "server_fail")
    loss, = lines(tmp_path, "fault_loss")
    assert fail["transfers_lost"] == 1 and loss["updates_lost"] == 1 and loss["wasted_compute_s"] == 0.0
    clouds = lines(tmp_path, "cloud_aggregate")
    assert [c["t"] for c in clouds] == pytest.approx([ROUND + LINK, ROUND + LINK + LINK + ROUND + LINK],
                                                     abs=1e-9)
    assert [c["participants"] for c in clouds] == [1, 1]
    assert res.summary["totals"]["fault_transfers_lost"] == 1


def test_hierfavg_cloud_fail_edges_keep_aggregating_and_push_when_back(tmp_path):
    # the cloud is away during [0.3, 2.0): the edge rounds closing at ROUND, 2·ROUND and 3·ROUND (1.655 s)
    # are aggregated locally (κ2 = 1 would have pushed each); the first to close after 2.0 (4·ROUND) pushes
    sc = scenario(HIERFAVG, [{"at_s": 0.3, "cloud_fail": {"for_s": 1.7}}], rounds=2)
    res = run(tmp_path, sc, speeds=(100.0,) * 4)
    clouds = lines(tmp_path, "cloud_aggregate")
    k = int(np.ceil(2.0 / ROUND))  # the first edge round to close after the cloud is back
    assert k == 4
    t1 = k * ROUND + LINK
    assert [c["t"] for c in clouds] == pytest.approx([t1, t1 + LINK + ROUND + LINK], abs=1e-9)
    assert [c["participants"] for c in clouds] == [2, 2]
    assert [e["t"] for e in lines(tmp_path, "edge_aggregate") if e["edge"] == 0][:4] == pytest.approx(
        [ROUND * i for i in range(1, 5)], abs=1e-9)
    tot = res.summary["totals"]
    assert tot["cloud_failures"] == 1 and tot["cloud_down_s"] == pytest.approx(1.7) and tot["edge_aggregations"] == 10


# -- AHFL -----------------------------------------------------------------------------------------
AHFL = {"name": "ahfl", "leader_period": 1.0, "cloud_period": 2.0}


def ahfl(events, end=3.0):
    return tiny(protocol=AHFL, training={"epochs": None, "batch_size": 10, "steps": 5}, topology=TOPO,
                stop={"rounds": None, "virtual_time_s": end}, events=events)


@pytest.mark.parametrize("mode", ["wait", "reattach"])
def test_ahfl_edge_fail_loses_the_queue_and_devices_reattach_or_wait(tmp_path, mode):
    # every device loops download → 0.5 s → upload, one update per ROUND at its leader; at 0.9 s leader 1
    # holds devices 1 and 3's first updates (queued at ROUND, its first tick is at 1.0) and both are
    # training their second job since ROUND + DN
    sc = ahfl([{"at_s": 0.9, "edge_fail": {"edges": [1], "for_s": 1.0, "on_edge_fail": mode}}])
    res = run(tmp_path, sc, speeds=(100.0,) * 4)
    loss, = lines(tmp_path, "fault_loss")
    assert loss["updates_lost"] == 2 and loss["wasted_compute_s"] == pytest.approx(2 * (0.9 - ROUND - DN), abs=1e-12)
    aggs = [(a["t"], a["edge"], a["ids"]) for a in lines(tmp_path, "edge_aggregate")]
    at2 = [ids for t, e, ids in aggs if e == 0 and t == pytest.approx(2.0)]
    if mode == "reattach":
        # 1 and 3 start over from leader 0 at 0.9 and reach it at 0.9 + ROUND, between 0 and 2's 2nd and 3rd
        assert at2 == [[0, 2, 1, 3, 0, 2]]
        moves = [(m["devices"], m["from_edge"], m["to_edge"], m["reason"]) for m in lines(tmp_path, "reattach")]
        # leader 1 is back at 1.9 and has the global model at 1.9 + LINK: its devices go home after their
        # update in flight reaches leader 0
        assert moves == [([1, 3], 1, 0, "edge_fail"), ([1, 3], 0, 1, "edge_back")]
        assert lines(tmp_path, "reattach")[1]["t"] == pytest.approx(1.9 + LINK, abs=1e-12)
    else:
        assert at2 == [[0, 2, 0, 2]]
        assert lines(tmp_path, "reattach") == []
    # leader 1 restarts once it has the global model (1.9 + LINK) and ticks a period later: wait — 1 and 3
    # resume at once; reattach — they come home after their update in flight reached leader 0 (at 2.003)
    assert [(t, ids) for t, e, ids in aggs if e == 1] == [(pytest.approx(1.9 + LINK + 1.0, abs=1e-12), [1, 3])]
    tot = res.summary["totals"]
    assert tot["edge_failures"] == 1 and tot["fault_updates_lost"] == 2


def test_ahfl_cloud_fail_leaders_push_their_progress_when_back(tmp_path):
    # the cloud is away during [0.5, 3.5): leader ticks at 1, 2, 3 aggregate locally without pushing; at 3.5
    # each leader pushes its progress since its last push once, and the cloud applies both at its tick at 4.0
    sc = ahfl([{"at_s": 0.5, "cloud_fail": {"for_s": 3.0}}], end=4.5)
    run(tmp_path, sc, speeds=(100.0,) * 4)
    clouds = lines(tmp_path, "cloud_aggregate")
    assert [(c["t"], c["participants"], c["ids"]) for c in clouds] == [(4.0, 2, [0, 1])]
    assert clouds[0]["staleness"] == [0, 0]
    pushes = [e for e in lines(tmp_path, "edge_aggregate")]
    assert [p["t"] for p in pushes if p["edge"] == 0] == [1.0, 2.0, 3.0, 4.0]


# -- FedCH with edge-server leaders ---------------------------------------------------------------
FEDCH = {"name": "fedch", "K": "auto", "H": 5}


def fedch(events, rounds):
    return tiny(protocol=FEDCH, training={"epochs": None, "batch_size": 10, "steps": 5}, topology=TOPO,
                stop={"rounds": rounds}, events=events)


def test_fedch_edge_fail_reattaches_members_to_the_live_cluster_and_brings_them_back(tmp_path):
    # the balanced assignment gives clusters [0, 1] (edge 0) and [2, 3] (edge 1); each round starts LINK
    # after the cloud sends (w, t). Edge 1 fails at 0.8: device 2's model reached it at LINK + ROUND
    # (lost), device 3 (slow) trains since LINK + DN (withdrawn); 2 and 3 join cluster 0's next round
    sc = fedch([{"at_s": 0.8, "edge_fail": {"edges": [1], "for_s": 1.0}}], rounds=5)
    res = run(tmp_path, sc)
    first = json.loads((tmp_path / "clusters.jsonl").read_text().splitlines()[0])
    assert first["members"] == [[0, 1], [2, 3]]
    loss, = lines(tmp_path, "fault_loss")
    assert loss["updates_lost"] == 1 and loss["wasted_compute_s"] == pytest.approx(0.8 - LINK - DN, abs=1e-12)
    c1 = LINK + ROUND + LINK                  # cluster 0's rounds: cloud applies, sends back, H steps, uploads
    c2 = c1 + LINK + ROUND + LINK
    # cluster 0's third round (from c2 + LINK) has all four; at 1.8 edge 1 is back: device 2 had arrived
    # (c2 + LINK + ROUND), slow device 3 is withdrawn and the round closes with 0, 1, 2
    closes = [(c["t"], c["ids"]) for c in lines(tmp_path, "edge_aggregate") if c["edge"] == 0]
    assert closes[2] == (pytest.approx(1.8), [0, 1, 2])
    moves = [(m["t"], m["devices"], m["from_edge"], m["to_edge"], m["reason"]) for m in lines(tmp_path, "reattach")]
    assert moves == [(0.8, [2, 3], 1, 0, "edge_fail"), (1.8, [2, 3], 0, 1, "edge_back")]
    clouds = [(c["t"], c["ids"], c["staleness"]) for c in lines(tmp_path, "cloud_aggregate")]
    # edge 1 gets (w, t = 2) at 1.8 and closes its first round after the outage LINK + SLOW later
    assert clouds[:5] == [(pytest.approx(c1), [0], [0]), (pytest.approx(c2), [0], [0]),
                          (pytest.approx(1.8 + LINK), [0], [0]),
                          (pytest.approx(1.8 + LINK + LINK + ROUND + LINK), [0], [0]),
                          (pytest.approx(1.8 + LINK + SLOW + LINK), [1], [2])]  # from version 2; 4 applied since
    tot = res.summary["totals"]
    assert tot["devices_reattached"] == 4 and tot["fault_updates_lost"] == 1
    # the withdrawn jobs: device 3 twice (at the failure and at the return)
    assert tot["wasted_compute_s"] == pytest.approx((0.8 - LINK - DN) + (1.8 - c2 - LINK - DN), abs=1e-12)


def test_fedch_cloud_fail_clusters_keep_aggregating_and_upload_when_back(tmp_path):
    # the cloud is away during [0.3, 2.0): both clusters run rounds from their own cluster model (closing
    # at LINK + k·ROUND), the first to close after 2.0 is uploaded, with the staleness it gathered
    sc = fedch([{"at_s": 0.3, "cloud_fail": {"for_s": 1.7}}], rounds=4)
    run(tmp_path, sc, speeds=(100.0,) * 4)
    aggs = [e["t"] for e in lines(tmp_path, "edge_aggregate") if e["edge"] == 0]
    assert aggs[:4] == pytest.approx([LINK + k * ROUND for k in range(1, 5)], abs=1e-9)
    clouds = [(c["t"], c["ids"], c["staleness"]) for c in lines(tmp_path, "cloud_aggregate")]
    up = LINK + 4 * ROUND + LINK
    assert clouds[:2] == [(pytest.approx(up), [0], [0]), (pytest.approx(up), [1], [1])]


# -- determinism, input errors ---------------------------------------------------------------------
def test_faults_local_and_ray_give_identical_metrics_and_model(tmp_path, ray_session):
    events = [{"at_s": 0.8, "edge_fail": {"edges": [1], "for_s": 1.0}}, {"at_s": 2.0, "cloud_fail": {"for_s": 0.5}}]
    local = run(tmp_path / "local", scenario(HIERFAVG, events, rounds=5))
    ray = run(tmp_path / "ray", scenario(HIERFAVG, events, rounds=5, runtime={"executor": "ray", "workers": 2}))
    assert metrics_without_wall(tmp_path / "ray") == metrics_without_wall(tmp_path / "local")
    assert np.array_equal(ray.final_params, local.final_params)
    assert local.summary["totals"]["edge_failures"] == 1 and local.summary["totals"]["cloud_failures"] == 1


@pytest.mark.parametrize("events, extra, path, text", [
    ([{"at_s": 1, "edge_fail": {"edges": [7], "for_s": 5}}], {}, "events.0.edge_fail.edges", "allowed: 0..1"),
    ([{"at_s": 1, "edge_fail": {"edges": [0], "for_s": -5}}], {}, "events.0.edge_fail.for_s", "greater than 0"),
    ([{"at_s": 1, "edge_fail": {"edges": [0], "for_s": ".inf"}}], {}, "events.0.edge_fail.for_s", "finite"),
    ([{"at_s": 1, "cloud_fail": {"for_s": 0}}], {}, "events.0.cloud_fail.for_s", "greater than 0"),
    ([{"at_s": 1, "edge_fail": {"edges": [0], "for_s": 5, "on_edge_fail": "retry"}}], {},
     "events.0.edge_fail.on_edge_fail", "reattach"),
    ([{"at_s": 1, "edge_fail": {"edges": [0], "for_s": 5}}], {"protocol": {"name": "fedavg"}, "topology": None},
     "events.0.edge_fail", "no edge servers"),
    ([{"at_s": 1, "edge_fail": {"edges": [0], "for_s": 5}}], {"protocol": {"name": "fedavg"}},
     "events.0.edge_fail", "protocol fedavg has no edge servers to fail"),
    ([{"at_s": 1, "cloud_fail": {"for_s": 5}}], {"protocol": {"name": "fedbuff", "K": 2}},
     "events.0.cloud_fail", "allowed with: ahfl, fedch, hierfavg"),
])
def test_bad_fault_events_exit_2_with_the_key_path(tmp_path, capsys, events, extra, path, text):
    import yaml

    from tests.conftest import TINY

    raw = {**TINY, "protocol": HIERFAVG, "training": {"epochs": None, "batch_size": 10, "steps": 5},
           "topology": TOPO, "stop": {"rounds": 2}, "events": events, **extra}
    if raw["topology"] is None:
        del raw["topology"]
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw).replace("'.inf'", ".inf"))
    out = tmp_path / "out"
    assert main(["run", str(scen), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert path in err and text in err and "Traceback" not in err, err
    assert not out.exists()
