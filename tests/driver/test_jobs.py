"""The job pipeline's planned seconds: one vectorised array per spec's work (epochs / steps / batch
size) gives every value exactly the float ``World.compute_s`` gives, and a device it would refuse
(no samples) still gets its error."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.core.dynamics import Dynamics
from hierfl.core.work import TrainSpec
from hierfl.core.world import World
from hierfl.driver.jobs import Jobs
from hierfl.kernel.engine import EventQueue
from hierfl.scenario.loader import load_scenario
from tests.conftest import tiny
from tests.golden import ROOT


def _world(n: int = 300) -> World:
    sc = load_scenario(ROOT / "scenarios" / "scale_ahfl_10k.yaml",
                       [f"devices.count={n}", f"data.dataset.num_samples={n * 20}", "topology.edge_servers=4"])
    return build(sc).world


def _jobs(world: World) -> Jobs:
    """A job pipeline over ``world`` with static dynamics (no jitter, slowdowns or losses)."""
    ctx = SimpleNamespace(seed=1, dyn=Dynamics.static(world.num_devices), executor=None, telemetry=None,
                          counters={}, queue=EventQueue(), transfers=None, robust=None, aggregation=None,
                          scenario=SimpleNamespace(robustness=SimpleNamespace(on_nonfinite="fail"),
                                                   training=tiny().training))
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
