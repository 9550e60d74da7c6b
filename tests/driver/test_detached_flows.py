"""Detached flows (scale): a transfer that shares no finite link gets its arrival scheduled when it
starts, with no network wake-up at its end — one event per transfer instead of two.

The network level: a detached flow keeps out of ``next_finish``; a flow joining one of its finite
links, or a capacity change on its path, attaches it (``on_attach``) with the end it had, or
removes it if its end has passed. The driver level: runs with and without detaching give the same
outputs, byte for byte, on scenarios with shared finite links, link events, churn, device-to-device
hops and server faults, and detaching really removes events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.kernel.network import FlowNetwork
from hierfl.driver.transfers import Transfers
from tests.golden import PROPERTY_OVERRIDES, bit_differences, contract_outputs, overrides

ROOT = Path(__file__).resolve().parents[2]


def test_a_lone_flow_is_detached_with_its_exact_end_and_stays_out_of_next_finish():
    net = FlowNetwork({"up": 8.0, "in": float("inf")})
    f = net.add(1.0, 0, ["up", "in"], 4.0, detach=True)
    assert f.detached and f.rate == 8.0 and f.end == 1.5
    assert net.next_finish() is None  # its end is the caller's to schedule
    g = net.add(1.0, 1, ["in"], 1.0, detach=True)  # infinite links only: ends at once, detached too
    assert g.detached and g.end == 1.0


def test_a_flow_joining_its_link_attaches_it_with_the_end_it_had_and_both_share():
    attached: list[int] = []
    det, ref = FlowNetwork({"L": 10.0}), FlowNetwork({"L": 10.0})
    det.on_attach = attached.append
    det.add(0.0, 0, ["L"], 10.0, detach=True)      # alone: ends at 1.0 if nothing changes
    ref.add(0.0, 0, ["L"], 10.0)
    assert attached == []
    b = det.add(0.5, 1, ["L"], 10.0, detach=True)  # shares L from 0.5: flow 0 is attached
    ref.add(0.5, 1, ["L"], 10.0)
    assert attached == [0] and not det.flows[0].detached and not b.detached
    # 5 Mbit left at 0.5, 5 Mbps each from then on: flow 0 ends at 1.5, exactly as without detaching
    assert det.next_finish() == ref.next_finish() == (1.5, [0])
    det.remove(1.5, 0)
    ref.remove(1.5, 0)
    assert det.next_finish() == ref.next_finish()
    assert det.flows[1].max_sharing == ref.flows[1].max_sharing == 2


def test_a_detached_flow_whose_end_has_passed_is_removed_not_attached():
    attached: list[int] = []
    net = FlowNetwork({"L": 10.0})
    net.on_attach = attached.append
    net.add(0.0, 0, ["L"], 5.0, detach=True)        # ends at 0.5; its arrival (latency) is still ahead
    b = net.add(0.7, 1, ["L"], 10.0, detach=True)   # joins after that end
    assert attached == [] and 0 not in net.flows
    assert b.detached and b.rate == 10.0 and b.end == pytest.approx(1.7, abs=1e-15)


def test_a_capacity_change_on_its_path_attaches_it():
    attached: list[int] = []
    det, ref = FlowNetwork({"L": 10.0}), FlowNetwork({"L": 10.0})
    det.on_attach = attached.append
    det.add(0.0, 0, ["L"], 10.0, detach=True)
    ref.add(0.0, 0, ["L"], 10.0)
    det.set_capacity(0.25, "L", 5.0)
    ref.set_capacity(0.25, "L", 5.0)
    assert attached == [0]
    assert det.next_finish() == ref.next_finish() == (1.75, [0])  # 7.5 Mbit at 5 Mbps from 0.25


def test_several_finite_links_alone_get_the_progressive_filling_rate():
    det, ref = FlowNetwork({"a": 3.0, "b": 7.0}), FlowNetwork({"a": 3.0, "b": 7.0})
    f = det.add(0.0, 0, ["b", "a"], 6.0, detach=True)
    ref.add(0.0, 0, ["b", "a"], 6.0)
    assert f.detached and f.rate == ref.flows[0].rate == 3.0
    assert f.end == ref.next_finish()[0] == 2.0



@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 1e4), min_size=1, max_size=4), st.floats(0.0, 1e3), st.floats(0.0, 1e3))
def test_a_detached_flow_gets_exactly_the_rate_and_end_of_progressive_filling(caps, size, now):
    """A flow alone on its finite links: progressive filling runs one round, its share is the
    smallest capacity; detaching it changes neither its rate nor its end, by a single bit."""
    links = {f"l{i}": c for i, c in enumerate(caps)} | {"inf": float("inf")}
    path = [*links][::-1]
    det, ref = FlowNetwork(links), FlowNetwork(links)
    f = det.add(now, 0, path, size, detach=True)
    g = ref.add(now, 0, path, size)
    assert f.detached and f.rate == g.rate == min(caps) == ref._fill([0])[0]
    assert f.end == g.end == (now if size <= 1e-12 else now + size / min(caps))

def test_without_contention_flows_on_one_link_are_all_detached_until_its_capacity_changes():
    attached: list[int] = []
    net = FlowNetwork({"L": 10.0, "M": 4.0}, contention=False)
    net.on_attach = attached.append
    a = net.add(0.0, 0, ["L", "M"], 4.0, detach=True)
    b = net.add(0.0, 1, ["L"], 5.0, detach=True)
    assert a.detached and b.detached and (a.end, b.end) == (1.0, 0.5)
    net.set_capacity(0.2, "L", 2.0)   # both cross L: both attached, each at its new bottleneck
    assert sorted(attached) == [0, 1]
    # flow 1: 3 Mbit left at 0.2, then 2 Mbps; flow 0: 3.2 Mbit left, then min(2, 4) = 2 Mbps
    assert net.next_finish() == (pytest.approx(0.2 + 3.0 / 2.0, abs=1e-12), [1])
    net.remove(1.7, 1)
    assert net.next_finish() == (pytest.approx(0.2 + 3.2 / 2.0, abs=1e-12), [0])


def test_only_watched_links_are_indexed_and_a_change_of_another_link_still_finds_its_flows():
    caps = {"a": 4.0, "b": 6.0, "s": 5.0}
    runs = []
    for watched in (None, [], ["b"]):
        net = FlowNetwork(caps, watched=watched)
        net.add(0.0, 0, ["a", "s"], 8.0)
        net.add(0.0, 1, ["b", "s"], 8.0)
        net.add(0.5, 2, ["b"], 2.0)
        if watched is not None:
            assert set(net._by_link) <= set(watched)   # nothing else indexed
        net.set_capacity(1.0, "s", 2.0)   # unwatched (except with None): one scan finds flows 0 and 1
        net.set_capacity(1.2, "a", 1.0)
        finishes = []
        while (nxt := net.next_finish()) is not None:
            t, ids = nxt
            for fid in ids:
                net.remove(t, fid)
            finishes.append((t, tuple(ids)))
        runs.append(finishes)
    assert runs[0] == runs[1] == runs[2] == [(1.2, (2,)), (6.5, (0, 1))]


# -- the driver: identical outputs with and without detaching -----------------------------------
CASES = ["hierfavg_contention",   # finite shared edge links: flows attach and detach
         "fedavg_capacity_trace",  # link capacity events during transfers
         "churn", "fedch_churn",   # devices going offline mid-transfer
         "fedhisyn",               # device-to-device hops
         "edge_faults",            # edge servers cut their transfers
         "ahfl", "energy_hierfavg"]


def _run(case: str, tmp: Path) -> tuple[dict[str, bytes], int]:
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    path = ROOT / "scenarios" / f"{case}.yaml"
    sets = [*overrides("local"), *PROPERTY_OVERRIDES.get(case, ())]
    summary = run_scenario(load_scenario(path, sets), tmp, source=str(path)).summary
    assert summary["status"] == "completed"
    outputs = contract_outputs(tmp)
    # the event count is what detaching changes (fewer wake-ups): compared on its own below
    kept = {k: v for k, v in json.loads(outputs["summary.json"]).items() if k != "events"}
    outputs["summary.json"] = json.dumps(kept, sort_keys=True).encode()
    return outputs, int(summary["events"])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_detaching_changes_no_output(case, tmp_path, monkeypatch):
    detached, events_detached = _run(case, tmp_path / "detached")
    monkeypatch.setattr(Transfers, "detach", False)
    plain, events_plain = _run(case, tmp_path / "plain")
    assert not bit_differences(detached, plain), "\n".join(bit_differences(detached, plain))
    assert events_detached < events_plain  # fewer events: network wake-ups saved

# (hand-computed driver times through attached flows: tests/kernel/test_network.py's shared-ingress and
# link-event cases, which start detached and are attached by the second flow / the capacity change)
