"""The Ray executor's job traffic (scale, goal (b) with training): jobs travel in batches and a
batch's stats are fetched once, whatever the number of jobs in it, with results identical to the
local executor on 1 and 2 hosts (exact path and fast path).

Before: every ``wait`` fetched its job's stats with a ``ray.get`` of its own and first sent every
job buffered so far, so an asynchronous protocol (one job starts as one ends) sent batches of one
or two jobs and made about two Ray calls per job.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import tiny
from tests.determinism.test_determinism import metrics_without_wall


def _ahfl(**kw):
    """AHFL over 120 devices: one job starts as another ends, the pattern that sent tiny batches."""
    return tiny(devices={"count": 120, "speed_sps": {"dist": "lognormal", "median": 40, "sigma": 0.5}},
                data={"dataset": {"num_samples": 2400}}, training={"epochs": 1, "batch_size": 10, "lr": 0.05},
                protocol={"name": "ahfl", "leader_period": 1.0, "cloud_period": 2.0},
                topology={"edge_servers": 3, "grouping": "random"}, evaluation={"every_s": 4.0},
                stop={"virtual_time_s": 8}, **kw)


@pytest.mark.ray
@pytest.mark.parametrize("fast", [False, True], ids=["exact", "fast-path"])
def test_ray_batches_jobs_and_fetches_stats_once_per_batch(tmp_path, ray_session, monkeypatch, fast):
    from hierfl.driver import run_scenario
    from hierfl.runtime import ray_batches, ray_executor

    local = run_scenario(_ahfl(runtime={"executor": "local", "fast_path": fast}), tmp_path / "local")
    jobs = local.summary["totals"]["train_jobs"]
    assert jobs > 300

    gets: list[int] = []
    batches: list[int] = []
    real_get = ray_executor.RayExecutor._get

    def counting_get(self, refs):
        gets.append(1)
        return real_get(self, refs)

    monkeypatch.setattr(ray_executor.RayExecutor, "_get", counting_get)
    real_flush = ray_batches.Batches.flush_jobs

    def counting_flush(self):
        pending = list(self.jobs)
        real_flush(self)
        sizes: dict[int, int] = {}
        for slot in pending:  # the jobs this flush sent, by the host task (batch array) they went in
            if slot.ref is not None:
                sizes[id(slot.ref)] = sizes.get(id(slot.ref), 0) + 1
        batches.extend(sizes.values())

    monkeypatch.setattr(ray_batches.Batches, "flush_jobs", counting_flush)
    for workers in (1, 2):
        gets.clear()
        batches.clear()
        res = run_scenario(_ahfl(runtime={"executor": "ray", "workers": workers, "fast_path": fast}),
                           tmp_path / f"ray{workers}")
        assert res.summary["workers"] == workers
        # identical results: the batching never changes what a job computes
        assert metrics_without_wall(tmp_path / f"ray{workers}") == metrics_without_wall(tmp_path / "local")
        assert np.array_equal(res.final_params, local.final_params)
        # stats come back once per batch (plus start-up marks and the evaluations), not once per job
        assert len(gets) < jobs / 8
        # and jobs go out in batches: a host task carries many jobs
        # (a leader tick or an evaluation sends what is buffered: AHFL's ticks cut batches to ~12 jobs here)
        assert sum(batches) >= jobs and sum(batches) / len(batches) >= 8, (sum(batches), len(batches))
