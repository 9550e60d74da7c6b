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
