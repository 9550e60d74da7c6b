"""D-PSGD, AD-PSGD and p2p against the fake environment: exact event times and hand-computed models.

Fake world: job of one local step on device d lasts 1 + 0.5·d s and returns ``start + d + 1``;
a device-to-device message takes 0.125 s. Ring of 4 (0–1–2–3–0): every live degree is 2, so the
Metropolis–Hastings weights are 1/3 on each neighbour and 1/3 on the node itself.
"""

from __future__ import annotations

import pytest

from hierfl.core.graphs import DeviceGraph, ring
from hierfl.env.events import DeviceLost
from hierfl.methods.gossip.protocol import ADPSGDConfig, DPSGDConfig, P2PConfig
from tests.fakeenv import FakeEnv, FakeWorld


def _env(graph: DeviceGraph, unit_s: list[float] | None = None, **kw) -> FakeEnv:
    world = FakeWorld([8] * graph.n, unit_s=unit_s)
    world.device_graph = graph
    return FakeEnv(world, **kw)


def _events(log: list[tuple]) -> list[tuple[float, str, str]]:
    """(time, kind, receiving device) of every dispatched event (aggregation lines left out)."""
    return [(t, kind, (payload.split() or [""])[0]) for t, kind, payload, *_ in log if kind != "tier"]


def test_dpsgd_ring_trace_by_hand() -> None:
    env = _env(ring(4))
    proto = DPSGDConfig().create(env)
    log = env.run(proto, until=5.2)
    assert _events(log) == [
        (1.0, "step_done", "device=0"),          # y0 = 0 + 1; x0 = 0 goes to 1 and 3
        (1.125, "gossip_arrival", "device=1"), (1.125, "gossip_arrival", "device=3"),
        (1.5, "step_done", "device=1"),
        (1.625, "gossip_arrival", "device=0"), (1.625, "gossip_arrival", "device=2"),
        (2.0, "step_done", "device=2"),
        (2.125, "gossip_arrival", "device=1"),   # node 1 has both neighbours: mixes, trains until 3.625
        (2.125, "gossip_arrival", "device=3"),
        (2.5, "step_done", "device=3"),          # node 3 already has 0's and 2's: mixes at once
        (2.625, "gossip_arrival", "device=0"), (2.625, "gossip_arrival", "device=2"),
        (3.625, "step_done", "device=1"), (3.625, "step_done", "device=0"),
        (3.75, "gossip_arrival", "device=0"), (3.75, "gossip_arrival", "device=2"),
        (3.75, "gossip_arrival", "device=1"), (3.75, "gossip_arrival", "device=3"),
        (4.625, "step_done", "device=2"),
        (4.75, "gossip_arrival", "device=1"), (4.75, "gossip_arrival", "device=3"),
        (5.0, "step_done", "device=3"),
        (5.125, "gossip_arrival", "device=0"), (5.125, "gossip_arrival", "device=2"),
    ]
    mixes = [(t, entity) for t, kind, *rest in log if kind == "tier" for entity in [rest[1]]]
    assert mixes == [(2.125, 1), (2.5, 3), (2.625, 0), (2.625, 2), (4.75, 1), (5.0, 3), (5.125, 0), (5.125, 2)]
    # step 1: x_i = Σ W x^0 + (y_i − x_i^0) = i + 1; step 2 by hand:
    # x1 = (2 + 1 + 3)/3 + (4 − 2) = 4; x3 = (4 + 1 + 3)/3 + (8 − 4); x0 = (1 + 2 + 4)/3 + (2 − 1); x2 = (3 + 2 + 4)/3 + 3
    assert [proto.model[i] for i in range(4)] == pytest.approx([10 / 3, 4.0, 6.0, 20 / 3], abs=1e-12)
    assert proto.step.tolist() == [2, 2, 2, 2]
    assert proto.mixings == 8


def test_p2p_point_beliefs_average_the_trained_models() -> None:
    env = _env(ring(4))
    proto = P2PConfig(local_epochs=1).create(env)
    env.run(proto, until=2.7)
    # combine_trained: x_i = (y_{i-1} + y_i + y_{i+1}) / 3 with y = 1, 2, 3, 4
    assert [proto.model[i] for i in range(4)] == pytest.approx([7 / 3, 2.0, 3.0, 8 / 3], abs=1e-12)
    averages = [rest for t, kind, *rest in env.log if kind == "tier"]
    assert averages[0][1:4] == [1, "average", [2.0, 1.0, 3.0]]  # node 1 at 2.125: own y first, then senders


def test_dpsgd_churn_node_leaves_and_rejoins() -> None:
    # node 3 is offline from 0.5 to 3.0: its job is lost; 0 and 2 mix with node 1 alone meanwhile
    env = _env(ring(4), away={3: [(0.5, 3.0)]})
    env.at(0.5, "device_lost", DeviceLost(3, "train", "offline"))
    proto = DPSGDConfig().create(env)
    log = env.run(proto, until=5.6)
    terms = {(t, rest[1]): rest[3] for t, kind, *rest in log if kind == "tier"}
    # path 0 – 1 – 2 (live degrees 1, 2, 1): W_01 = 1/(1 + 2), W_00 = 2/3
    assert [c for c, _, _ in terms[(1.625, 0)]] == pytest.approx([2 / 3, 1 / 3, 1.0])
    assert [c for c, _, _ in terms[(2.125, 1)]] == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])
    assert (3.0, "rejoin", "device=3 step=0") in log
    # at 3.75 node 3 is live again (degree of 0 is 2) but sent nothing this step: its 1/3 stays on node 0
    assert [c for c, _, _ in terms[(3.75, 0)]] == pytest.approx([2 / 3, 1 / 3, 1.0])
    assert proto.model[0] == pytest.approx(2 / 3 * 1 + 1 / 3 * 2 + (2 - 1))
    # node 3's first step after rejoining (5.5) mixes with 0's and 2's messages: (0 + 7/3 + 3)/3 + 4
    assert (5.5, "step_done", "device=3 step=0") in log
    assert proto.model[3] == pytest.approx((0 + 7 / 3 + 3) / 3 + 4)
    assert proto.step.tolist() == [2, 2, 1, 1]


def test_adpsgd_ring_trace_by_hand() -> None:
    env = _env(ring(4))
    proto = ADPSGDConfig().create(env)
    log = env.run(proto, until=3.4)
    # partners from the stream gossip_partner(node, step): 0→3, 1→2, 2→1, 0→3, 3→2, 1→2, 0→3
    pairs = [(t, p.split()[0], p.split()[1]) for t, kind, p, *_ in log if kind == "exchange_arrival"]
    assert pairs == [(1.125, "device=3", "sender=0"), (1.125, "device=0", "sender=3"),
                     (1.625, "device=2", "sender=1"), (1.625, "device=1", "sender=2"),
                     (2.125, "device=1", "sender=2"), (2.125, "device=2", "sender=1"),
                     (2.25, "device=3", "sender=0"), (2.25, "device=0", "sender=3"),
                     (2.625, "device=2", "sender=3"), (2.625, "device=3", "sender=2"),
                     (3.25, "device=2", "sender=1"), (3.25, "device=1", "sender=2"),
                     (3.375, "device=3", "sender=0"), (3.375, "device=0", "sender=3")]
    # by hand: 1.125 (1 + 0)/2; 1.625 (2 + 0)/2; 2.0 node 2's stale update: 1 + (3 − 0) = 4, then
    # (4 + 1)/2 = 2.5; 2.25 (1.5 + 0.5)/2 = 1; 2.5 node 3: 1 + 4 = 5, (5 + 2.5)/2 = 3.75;
    # 3.125 node 1: 2.5 + (3 − 1) = 4.5, (4.5 + 3.75)/2; 3.25 node 0: y = 2, (2 + 3.75)/2
    assert [proto.model[i] for i in range(4)] == [2.875, 4.125, 4.125, 2.875]
    assert proto.pairs.completed == 7


def test_adpsgd_busy_partner_queues_requests_fifo() -> None:
    # star: node 0 in the middle; every job lasts 1 s, so at t = 1 node 0 talks to 3 and the
    # three leaves' requests to 0 wait, then are served in the order they were made (1, 2, 3)
    env = _env(DeviceGraph(4, ((0, 1), (0, 2), (0, 3))), unit_s=[1.0] * 4)
    proto = ADPSGDConfig().create(env)
    log = env.run(proto, until=1.6)
    done = [(t, p.split()[1]) for t, kind, p, *_ in log if kind == "exchange_arrival" and p.startswith("device=0")]
    assert done == [(1.125, "sender=3"), (1.25, "sender=1"), (1.375, "sender=2"), (1.5, "sender=3")]
    # node 3's own update (4) landed during the first exchange: 4 + (1 − 0)/2; then the FIFO:
    # (2 + 0.5)/2, (3 + 1.25)/2, (4.5 + 2.125)/2
    assert [proto.model[i] for i in range(4)] == [3.3125, 1.25, 2.125, 3.3125]


def test_adpsgd_partner_leaving_voids_the_exchange() -> None:
    env = _env(ring(4))
    env.at(1.0625, "device_lost", DeviceLost(3, "upload", "offline"))
    env.live.availability = type(env.live.availability)([None] * 4, [[], [], [], [(1.0625, 9.0)]])
    proto = ADPSGDConfig().create(env)
    log = env.run(proto, until=2.2)
    # node 0 asked 3 at 1.0; 3 left mid-exchange: both halves are withdrawn, 0 trains on alone
    assert not any(kind == "exchange_arrival" and "exchange=0" in p for t, kind, p, *_ in log)
    assert (2.0625, "step_done", "device=0 step=1") in log
    assert proto.model[0] == 1.0 + 1.0 and 3 in proto.out


def test_gossip_needs_a_device_graph() -> None:
    env = FakeEnv(FakeWorld([8, 8]))
    env.world.device_graph = None
    with pytest.raises(ValueError, match="device_graph"):
        DPSGDConfig().create(env)


def test_dpsgd_idle_node_going_offline_releases_its_neighbours() -> None:
    # path 0 – 1 – 2, jobs of 1, 1 and 4 s. Node 1 waits idle for node 2's first message (due 4.125)
    # while node 0, one step ahead, waits for node 1's second. Node 1 goes offline at 3.0 with nothing
    # in flight: the watch on waiting nodes notices, node 1 leaves the mixing and node 0 goes on alone.
    env = _env(DeviceGraph(3, ((0, 1), (1, 2))), unit_s=[1.0, 1.0, 4.0], away={1: [(3.0, 10.0)]})
    proto = DPSGDConfig().create(env)
    log = env.run(proto, until=4.5)
    assert _events(log) == [
        (1.0, "step_done", "device=0"), (1.0, "step_done", "device=1"),
        (1.125, "gossip_arrival", "device=1"), (1.125, "gossip_arrival", "device=0"),
        (1.125, "gossip_arrival", "device=2"),
        (2.125, "step_done", "device=0"),
        (2.25, "gossip_arrival", "device=1"),
        (3.0, "idle_change", ""),                 # node 1 left: node 0 mixes alone (weight 1 on itself)
        (4.0, "step_done", "device=2"),           # (submitted at 0: first) no live neighbour: its own update
        (4.0, "step_done", "device=0"),           # its third job, from x0 = 1 + (2 − 1) = 2
    ]
    # x0 after step 1: 2/3·0 + 1/3·0 + (1 − 0) = 1 (W_01 = 1/(1 + 2)); step 2 alone: 1 + (2 − 1)
    assert proto.model[0] == pytest.approx(3.0) and proto.step.tolist() == [3, 0, 1]
    assert proto.model[2] == 3.0 and 1 in proto.out


def test_dpsgd_global_barrier_mixes_everyone_at_the_last_arrival() -> None:
    env = _env(ring(4))
    proto = DPSGDConfig(mode="sync_global").create(env)
    log = env.run(proto, until=6.0)
    mixes = [(t, rest[1]) for t, kind, *rest in log if kind == "tier"]
    # step 0: the last message (node 3's, sent at 2.5) arrives at 2.625; everyone mixes then and
    # trains 1 + 0.5·d s; step 1's last message leaves node 3 at 5.125 and arrives at 5.25
    assert mixes == [(2.625, 0), (2.625, 1), (2.625, 2), (2.625, 3), (5.25, 0), (5.25, 1), (5.25, 2), (5.25, 3)]
    assert [t for t, kind, *_ in log if kind == "step_done"] == [1.0, 1.5, 2.0, 2.5, 3.625, 4.125, 4.625, 5.125]
    # the same rule as without the barrier, so the same models after two steps
    assert [proto.model[i] for i in range(4)] == pytest.approx([10 / 3, 4.0, 6.0, 20 / 3], abs=1e-12)


def test_observer_tests_the_average_and_reports_the_spread() -> None:
    env = _env(ring(4))
    proto = DPSGDConfig().create(env)
    env.run(proto, until=5.2)                      # models 10/3, 4, 6, 20/3 (see the ring trace above)
    fields = proto.observe()
    assert env.global_model == pytest.approx(5.0)  # x̄ replaces the cloud's model for the evaluation
    # (1/N) Σ (x_i − x̄)² = ((5/3)² + 1 + 1 + (5/3)²) / 4 = 17/9
    assert fields["consensus_distance"] == pytest.approx(17 / 9)
    assert (fields["mixings"], fields["node_steps_min"], fields["node_steps_max"]) == (8, 2, 2)
    # the fake's accuracy of a model m is 1/(1 + |m|)
    acc = [1 / (1 + m) for m in (10 / 3, 4.0, 6.0, 20 / 3)]
    assert fields["node_accuracy_mean"] == pytest.approx(sum(acc) / 4)
    assert (fields["node_accuracy_min"], fields["node_accuracy_max"]) == pytest.approx((acc[3], acc[0]))
    quiet_env = _env(ring(4))
    quiet = DPSGDConfig(node_eval=False).create(quiet_env)
    quiet_env.run(quiet, until=0.5)
    assert "node_accuracy_mean" not in quiet.observe() and "consensus_distance" in quiet.observe()
