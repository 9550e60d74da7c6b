"""Edge-server and cloud faults (``edge_fail`` / ``cloud_fail`` events, reliability part 3).

Hand-timed world (tests/conftest.py TINY, as in tests/protocols/test_protocols.py): 4 devices of 60 samples
behind 2 edge servers by ``round_robin`` (devices 0, 2 → edge 0; 1, 3 → edge 1), device ↔ edge
latency 20 + 5 ms, edge ↔ cloud 100 Mbps / 10 ms, a 72-byte model, κ1 = 5 steps of 10 samples
at 100 samples/s (0.5 s; device 3 is made twice as slow: 1.0 s). One HierFAVG edge round is
``DN + 0.5 + UPL`` (device 3's: ``DN + 1.0 + UPL``) and an edge ↔ cloud hop ``LINK``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.driver import run_scenario
from hierfl.faults.math import FaultWindow, nearest_edge, outages
from tests.conftest import tiny
from tests.determinism.test_determinism import metrics_without_wall

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
     "events.0.edge_fail", "protocol fedavg does not emulate edge-server or cloud outages"),
    ([{"at_s": 1, "cloud_fail": {"for_s": 5}}], {"protocol": {"name": "fedbuff", "K": 2}},
     "events.0.cloud_fail", "allowed with: ahfl, fedch, hierfavg"),
    ([{"at_s": 1, "cloud_fail": {"for_s": 5}}],
     {"training": {"epochs": None, "batch_size": 10, "steps": 5, "trainer": "scaffold"}},
     "events.0.cloud_fail", "a failed server loses updates"),
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


# -- many random outages: every protocol survives them, and the downtime totals add up -------------------
_RANDOM_PROTOCOLS = [
    ({"name": "hierfavg", "kappa1": 5, "kappa2": 2},
     {"straggler": {"name": "deadline", "seconds": 0.8, "cloud": {"name": "deadline", "seconds": 2.5}}}),
    ({"name": "hierfavg", "kappa1": 5, "kappa2": 1, "fraction": 0.5}, {}),
    ({"name": "ahfl", "leader_period": 0.3, "cloud_period": 0.5, "max_staleness": 2}, {}),
    ({"name": "fedch", "K": "auto", "H": 5, "recluster": {"name": "periodic", "rho": 1}},
     {"straggler": {"name": "deadline", "seconds": 0.8}}),
]


@pytest.mark.parametrize("case", range(12))
def test_random_outages_complete_and_downtime_adds_up(tmp_path, case):
    import random

    rng = random.Random(case)
    protocol, extra = _RANDOM_PROTOCOLS[case % len(_RANDOM_PROTOCOLS)]
    end, n_edges = 16.0, 3
    events = []
    for _ in range(rng.randint(2, 8)):
        at = round(rng.uniform(0, 12), 2)
        if rng.random() < 0.3:
            events.append({"at_s": at, "cloud_fail": {"for_s": round(rng.uniform(0.1, 3), 2)}})
        else:
            events.append({"at_s": at, "edge_fail": {"edges": rng.sample(range(n_edges), rng.randint(1, n_edges)),
                                                     "for_s": round(rng.uniform(0.1, 3), 2),
                                                     "on_edge_fail": rng.choice(["wait", "reattach"])}})
    devices = {"count": 8, "speed_sps": {"dist": "uniform", "low": 50, "high": 200}}
    if case % 3 == 0:  # and devices that come and go
        devices.update(availability={"name": "markov", "mean_up_s": 5, "mean_down_s": 1}, dropout=0.05)
    sc = tiny(protocol=protocol, training={"epochs": None, "batch_size": 10, "steps": 5, "trainer": "none"},
              topology={"edge_servers": n_edges, "grouping": "round_robin",
                        "edge_latency_ms": {"dist": "uniform", "low": 1, "high": 30}},
              devices=devices, stop={"rounds": None, "virtual_time_s": end}, events=events,
              evaluation={"every_s": None}, **extra)
    res = run_scenario(sc, tmp_path)
    assert res.summary["status"] == "completed" and res.summary["virtual_time_s"] == end
    windows = [FaultWindow(e["at_s"], e["at_s"] + spec["for_s"], target)
               for e in events for kind, spec in e.items() if kind != "at_s"
               for target in ([("edge", x) for x in spec["edges"]] if kind == "edge_fail" else [("cloud", 0)])]
    merged = outages(windows)
    tot = res.summary["totals"]
    for kind in ("edge", "cloud"):
        mine = [o for o in merged if o.target[0] == kind]
        assert tot[f"{kind}_failures"] == len(mine)
        assert tot[f"{kind}_down_s"] == pytest.approx(sum(min(o.end, end) - o.start for o in mine), abs=1e-9)
    assert len(lines(tmp_path, "server_fail")) == len(merged) == len(lines(tmp_path, "fault_loss"))
    assert tot["fault_updates_lost"] == sum(x["updates_lost"] for x in lines(tmp_path, "fault_loss"))
    assert tot["devices_reattached"] == sum(len(x["devices"]) for x in lines(tmp_path, "reattach"))


def test_a_fault_changes_nothing_before_it_happens(tmp_path):
    # the same world without and with an outage of edge 1 at 0.8 s: every line before 0.8 s is the same
    # (evaluations aside: runs with faults carry the fault totals in them, at 0 until the first failure)
    run(tmp_path / "plain", scenario(HIERFAVG, []))
    run(tmp_path / "fault", scenario(HIERFAVG, [{"at_s": 0.8, "edge_fail": {"edges": [1], "for_s": 1.0}}]))

    def before(out):
        return [{k: v for k, v in x.items() if not k.startswith("wall")} for x in
                (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
                if x["t"] < 0.8 and x["event"] not in ("eval", "run_start")]

    plain, fault = before(tmp_path / "plain"), before(tmp_path / "fault")
    assert plain == fault and [x["event"] for x in plain] == ["round_close", "edge_aggregate"]  # edge 0, round 1
