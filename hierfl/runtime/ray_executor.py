"""The Ray executor: ``DeviceHost`` actors (many virtual devices each), a ``Leader`` actor and a ``Cloud`` actor.

This is the one place ``ray.remote`` is applied. Training jobs are submitted as soon as they
start in virtual time and awaited only when their completion event is popped, so jobs that
overlap in virtual time run in parallel. Updates travel host → leader → cloud as object
references passed as top-level arguments (Ray resolves them inside the receiving actor; the
driver never downloads a parameter vector). The number of hosts follows the cluster's CPUs or
``runtime.workers``; the virtual clock, not Ray's completion order, decides what happens.

Which host trains a job does not change its result (the job is a pure function of its start
model, the device's data and its seed), so jobs go to the host with the fewest outstanding
jobs; every host holds the (shared, read-only) training arrays from the object store.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import ray

from hierfl.core.work import TrainSpec
from hierfl.runtime.executor import Executor, Job, RunData
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost

__all__ = ["RayExecutor", "RayDeviceHost", "RayLeaderHost", "RayCloud"]

RayDeviceHost = ray.remote(DeviceHost)
RayLeaderHost = ray.remote(LeaderHost)
RayCloud = ray.remote(Cloud)


class RayExecutor(Executor):
    """Runs the roles as Ray actors on a local or remote cluster."""

    name = "ray"

    def __init__(self, data: RunData, workers: int | str = "auto", address: str | None = None) -> None:
        self._owns_ray = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
            else:
                ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
            self._owns_ray = True
        total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.workers = max(1, int(total_cpus)) if workers == "auto" else int(workers)
        host_cpus = min(1.0, total_cpus / self.workers)
        x_ref, y_ref = ray.put(data.x_train), ray.put(data.y_train)
        parts_ref = ray.put(data.parts)
        self.hosts = [
            RayDeviceHost.options(num_cpus=host_cpus, scheduling_strategy="SPREAD").remote(
                x_ref, y_ref, parts_ref, data.model)
            for _ in range(self.workers)
        ]
        self.leaders = RayLeaderHost.options(num_cpus=0).remote() if data.num_edges > 0 else None
        self.cloud = RayCloud.options(num_cpus=0).remote(
            ray.put(np.asarray(data.init_params, dtype=np.float32)), ray.put(data.x_test), ray.put(data.y_test), data.model)
        self._init = ray.put(np.asarray(data.init_params, dtype=np.float32))
        self._outstanding = [0] * self.workers
        actors = [*self.hosts, self.cloud] + ([self.leaders] if self.leaders is not None else [])
        ray.get([a.ready.remote() for a in actors])  # start-up cost paid here, not in the first round

    def initial_model(self) -> Any:
        """ObjectRef of the initial vector."""
        return self._init

    def train(self, device: int, seed: int, spec: TrainSpec, params: Any) -> tuple[Any, Any, int]:
        """Submit to the least-loaded host; returns refs immediately."""
        host = min(range(self.workers), key=lambda h: (self._outstanding[h], h))
        self._outstanding[host] += 1
        new_ref, stats_ref = self.hosts[host].train.options(num_returns=2).remote(device, seed, spec, params)
        return new_ref, stats_ref, host

    def wait(self, job: Job) -> dict[str, float]:
        """Block on the job's (small) stats; the parameter vector stays in the object store."""
        try:
            return dict(ray.get(job.stats))
        finally:
            self._outstanding[job.host] -= 1

    def aggregate_edge(self, edge: int, weights: list[float], updates: list[Any]) -> Any:
        """Refs are passed as top-level arguments so the leader actor resolves them itself."""
        assert self.leaders is not None
        return self.leaders.aggregate.remote(edge, weights, *updates)

    def aggregate_cloud(self, weights: list[float], updates: list[Any]) -> Any:
        """Refs are passed as top-level arguments so the cloud actor resolves them itself."""
        return self.cloud.aggregate.remote(weights, *updates)

    def evaluate(self, params: Any) -> tuple[float, float]:
        """Evaluation runs in the cloud actor; only two floats come back."""
        acc, loss = ray.get(self.cloud.evaluate.remote(params))
        return float(acc), float(loss)

    def fetch(self, params: Any) -> np.ndarray:
        """Download a vector to the driver (final model only)."""
        return np.array(ray.get(params), dtype=np.float32)

    def close(self) -> None:
        """Kill the actors; shut Ray down if this executor started it."""
        for actor in [*self.hosts, self.cloud] + ([self.leaders] if self.leaders is not None else []):
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        if self._owns_ray:
            ray.shutdown()
