"""The Ray executor's traffic in a serverless run: the averages of the cloud role in the driver put nothing
into the object store, and the jobs between them still travel in batches, with the local executor's bits.

Before: every average or combine (AD-PSGD's pairwise exchanges, D-PSGD's mixing: about one per job) put
its result into the object store (about 1.7 CPU ms with the raylet) and first sent every buffered job, so
each job went alone in a Ray call of its own (about 2.5 CPU ms more).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.conftest import tiny
from tests.determinism.test_determinism import metrics_without_wall


def _gossip(protocol: str, **kw: Any):  # noqa: ANN202
    """8 devices on a ring, 2 local steps a job: about 200 jobs and as many averages in 6 virtual seconds."""
    return tiny(devices={"count": 8}, data={"dataset": {"num_samples": 320}}, model={"name": "logreg"},
                topology={"device_graph": {"name": "ring"}}, protocol={"name": protocol, "local_steps": 2},
                training={"batch_size": 10, "lr": 0.05}, evaluation={"every_s": 3.0},
                stop={"rounds": None, "virtual_time_s": 6}, **kw)


@pytest.mark.ray
@pytest.mark.parametrize("protocol", ["adpsgd", "dpsgd"])
def test_gossip_averages_put_nothing_and_jobs_travel_in_batches(tmp_path, ray_session, monkeypatch, protocol):
    import ray

    from hierfl.driver import run_scenario
    from hierfl.runtime import driver_cloud, ray_batches

    local = run_scenario(_gossip(protocol), tmp_path / "local")
    jobs = local.summary["totals"]["train_jobs"]
    assert jobs > 150

    calls: dict[str, int] = {"put": 0, "dispatch": 0, "cloud": 0}
    real_put, real_dispatch, real_call = ray.put, ray_batches.Batches._dispatch, driver_cloud.DriverCloud.call

    def put(*args: Any, **kwargs: Any) -> Any:
        calls["put"] += 1
        return real_put(*args, **kwargs)

    def dispatch(self: Any, *args: Any) -> None:
        calls["dispatch"] += 1
        real_dispatch(self, *args)

    def call(self: Any, *args: Any) -> Any:
        calls["cloud"] += 1
        return real_call(self, *args)

    monkeypatch.setattr(ray, "put", put)
    monkeypatch.setattr(ray_batches.Batches, "_dispatch", dispatch)
    monkeypatch.setattr(driver_cloud.DriverCloud, "call", call)
    res = run_scenario(_gossip(protocol, runtime={"executor": "ray", "workers": 2}), tmp_path / "ray")
    # the same bits: where a result lives and how jobs are grouped change no number
    assert np.array_equal(res.final_params, local.final_params)
    assert metrics_without_wall(tmp_path / "ray") == metrics_without_wall(tmp_path / "local")
    # about one average or combine in the driver's cloud role per job ...
    assert calls["cloud"] >= jobs / 2, (calls, jobs)
    # ... and none of them puts its (small) result into the object store: only the run's data and start-up do
    assert calls["put"] <= 12, (calls, jobs)
    # jobs are sent in batches, not one host call each
    assert calls["dispatch"] <= jobs / 3, (calls, jobs)
