"""The driver's per-job shortcuts give exactly what the long way gives.

* A job's planned seconds come from one vectorised array per spec's work (epochs / steps / batch
  size): every value is the float ``World.compute_s`` gives, and a device it would refuse (no
  samples) still gets its error.
* A device's route slot keeps the finite links ``FlowNetwork.add`` found; a capacity change (which
  may make a link finite or infinite) makes the next transfer look again.
* A protocol's handler for each event kind is looked up once per protocol object, so a class
  patched between runs is seen by the next run's protocol.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.core.dynamics import Dynamics
from hierfl.kernel.engine import EventQueue
from hierfl.core.work import TrainSpec
from hierfl.core.world import World
from hierfl.driver.jobs import Jobs
from hierfl.driver.transfers import Transfers
from hierfl.output.telemetry import RunTelemetry
from hierfl.scenario.loader import load_scenario
from tests.golden import ROOT


def _world(n: int = 300) -> World:
    sc = load_scenario(ROOT / "scenarios" / "scale_ahfl_10k.yaml",
                       [f"devices.count={n}", f"data.dataset.num_samples={n * 20}", "topology.edge_servers=4"])
    return build(sc).world


def _jobs(world: World) -> Jobs:
    """A job pipeline over ``world`` with static dynamics (no jitter, slowdowns or losses)."""
    ctx = SimpleNamespace(seed=1, dyn=Dynamics.static(world.num_devices), executor=None, telemetry=None,
                          counters={}, queue=EventQueue(), transfers=None, robust=None, aggregation=None,
                          scenario=SimpleNamespace(robustness=SimpleNamespace(on_nonfinite="fail")))
    return Jobs(ctx, world, TrainSpec(epochs=1), None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", [TrainSpec(epochs=1, steps=None, batch_size=10),
                                  TrainSpec(epochs=3, steps=None, batch_size=None),
                                  TrainSpec(epochs=None, steps=7, batch_size=32),
                                  TrainSpec(epochs=None, steps=5, batch_size=None)])
def test_planned_job_seconds_are_world_compute_s_bit_for_bit(spec):
    world = _world()
    # uneven sample counts and speeds, so every branch of samples_processed is exercised
    rng = np.random.default_rng(3)
    world.samples[:] = rng.integers(1, 200, world.num_devices)
    world.speed_sps[:] = rng.lognormal(2.0, 1.5, world.num_devices)
    jobs = _jobs(world)
    for s in (spec, TrainSpec(epochs=spec.epochs, steps=spec.steps, batch_size=spec.batch_size, lr=0.5), spec):
        assert [jobs.planned_compute_s(d, s) for d in range(world.num_devices)] == [
            world.compute_s(d, s) for d in range(world.num_devices)]


def test_a_device_without_samples_gets_compute_s_s_error_and_the_others_their_time():
    world = _world(50)
    world.samples[7] = 0
    spec = TrainSpec(epochs=1, steps=None, batch_size=10)
    jobs = _jobs(world)
    assert jobs.planned_compute_s(8, spec) == world.compute_s(8, spec)
    with pytest.raises(ValueError, match="at least one sample"):
        jobs.planned_compute_s(7, spec)


def _transfers(tmp_path) -> Transfers:
    world = _world(40)
    return Transfers(world, Dynamics.static(world.num_devices), EventQueue(),
                     RunTelemetry(tmp_path / "run"), contention=True)


def test_a_route_slot_reuses_its_finite_links_until_a_capacity_changes(tmp_path):
    tr = _transfers(tmp_path)
    net, q = tr.net, tr.queue
    e = int(tr.world.edge_of[5])
    fid = tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")
    first = net.flows[fid]
    assert first.finite == (("up", 5),)  # the edge's ingress is unlimited by default
    q.pop_next()  # its arrival
    tr._finish_transfer(fid)
    again = net.flows[tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")]
    assert again.finite is first.finite  # taken from the slot, no capacity lookups
    q.pop_next()
    tr._finish_transfer(again.id)
    # the edge's ingress becomes finite: the next transfer shares it, so the slot is not trusted
    net.set_capacity(q.now, ("edge_in", e), 50.0)
    third = net.flows[tr.send(("device", 5), ("edge", e), "upload_done", None, "upload")]
    assert third.finite == (("up", 5), ("edge_in", e))
    peer = next(d for d in range(tr.world.num_devices) if d != 5 and int(tr.world.edge_of[d]) == e)
    other = tr.send(("device", peer), ("edge", e), "upload_done", None, "upload")
    assert not third.detached and not net.flows[other].detached  # the two share the ingress now


def test_a_route_slot_follows_the_device_s_edge(tmp_path):
    tr = _transfers(tmp_path)
    e = int(tr.world.edge_of[3])
    f = e + 1 if e + 1 < tr.world.num_edges else e - 1
    a = tr.send(("edge", e), ("device", 3), "train_start", None, "download")
    tr.queue.pop_next()
    tr._finish_transfer(a)
    b = tr.send(("edge", f), ("device", 3), "train_start", None, "download")
    assert tr.net.flows[b].links == (("edge_out", f), ("down", 3))
    assert tr._transfers[b].latency_s == tr.route(("edge", f), ("device", 3))[2]


def test_a_handler_is_looked_up_per_protocol_object(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario
    from hierfl.protocols import fedavg

    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["stop.virtual_time_s=20", "training.trainer=none", "runtime.executor=local",
                                                                "evaluation.target_accuracy=null"])
    seen: list[int] = []
    original = fedavg.FedAvg.on_upload_done
    run_scenario(sc, tmp_path / "a")
    with monkeypatch.context() as m:
        def counting(self, event):  # type: ignore[no-untyped-def]
            seen.append(event.payload.device)
            original(self, event)

        m.setattr(fedavg.FedAvg, "on_upload_done", counting)
        run_scenario(sc, tmp_path / "b")  # a new protocol object sees the patched class
    assert seen
    n = len(seen)
    run_scenario(sc, tmp_path / "c")  # and the next one the class as it is again
    assert len(seen) == n
