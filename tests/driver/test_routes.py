"""Routes and link events: a device's cached route keeps the finite links the network found for it
until a capacity changes, follows the device's edge server, and forgets a changed latency."""

from __future__ import annotations

from hierfl.assemble import build
from hierfl.core.dynamics import Dynamics
from hierfl.core.world import World
from hierfl.driver.transfers import Transfers
from hierfl.kernel.engine import EventQueue
from hierfl.output.telemetry import RunTelemetry
from hierfl.scenario.loader import load_scenario
from tests.golden import ROOT


def _world(n: int) -> World:
    sc = load_scenario(ROOT / "scenarios" / "scale_ahfl_10k.yaml",
                       [f"devices.count={n}", f"data.dataset.num_samples={n * 20}", "topology.edge_servers=4"])
    return build(sc).world


def _transfers(tmp_path) -> Transfers:
    world = _world(40)
    return Transfers(world, Dynamics.static(world.num_devices), EventQueue(),
                     RunTelemetry(tmp_path / "run"), contention=True)


def _arrive(tr: Transfers, fid: int) -> None:
    """Pop the transfer's arrival and let the driver close it, as the run loop does."""
    event = tr.queue.pop_next()
    assert event is not None and event.transfer == fid
    tr.before_dispatch(event)
    assert not tr.in_flight(fid)


def test_a_cached_route_reuses_its_finite_links_until_a_capacity_changes(tmp_path):
    tr = _transfers(tmp_path)
    net, q = tr.net, tr.queue
    e = int(tr.world.edge_of[5])
    fid = tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")
    first = net.flows[fid]
    assert first.finite == (("up", 5),)  # the edge's ingress is unlimited by default
    _arrive(tr, fid)
    again = net.flows[tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")]
    assert again.finite is first.finite  # taken from the route, no capacity lookups
    _arrive(tr, again.id)
    # the edge's ingress becomes finite: the next transfer shares it, so the cached links are not trusted
    net.set_capacity(q.now, ("edge_in", e), 50.0)
    third = net.flows[tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")]
    assert third.finite == (("up", 5), ("edge_in", e))
    peer = next(d for d in range(tr.world.num_devices) if d != 5 and int(tr.world.edge_of[d]) == e)
    other = tr.send(("device", peer), ("edge", e), "upload_done", None, "upload")
    assert not third.detached and not net.flows[other].detached  # the two share the ingress now


def test_a_cached_route_follows_the_device_s_edge(tmp_path):
    tr = _transfers(tmp_path)
    w = tr.world
    e = int(w.edge_of[3])
    f = e + 1 if e + 1 < w.num_edges else e - 1
    _arrive(tr, tr.send(("edge", e), ("device", 3), "train_start", None, "download"))
    b = tr.send(("edge", f), ("device", 3), "train_start", None, "download")
    assert tr.net.flows[b].links == (("edge_out", f), ("down", 3))
    extra = float(w.edge_latency_ms[3, f]) if w.edge_latency_ms.shape[1] > f else 0.0
    assert tr.routes.access(3, f, False).latency_s == (float(w.latency_ms[3]) + extra) / 1000.0
    # the time it arrives: its bits at the downlink's rate, then that latency
    event = tr.queue.pop_next()
    size_mbit = w.model_bytes * 8 / 1e6
    assert event.time == tr.net.flows[b].end + tr.routes.access(3, f, False).latency_s
    assert event.time > size_mbit / float(w.downlink_mbps[3])


def test_a_latency_change_makes_the_device_s_routes_anew(tmp_path):
    tr = _transfers(tmp_path)
    w = tr.world
    e = int(w.edge_of[7])
    before = tr.routes.access(7, e, True)
    tr.links.set(("device", 7), "latency_ms", float(w.latency_ms[7]) + 250.0)
    after = tr.routes.access(7, e, True)
    assert after is not before and abs(after.latency_s - before.latency_s - 0.25) < 1e-12
    assert tr.routes.access(7, e, True) is after  # cached again
