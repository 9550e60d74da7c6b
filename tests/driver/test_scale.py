"""Scale: a 100,000-device run in the suite, per-event work independent of N, memory per device.

Counts, not wall time (machines here are shared): the per-device availability checks and the
network model's inner-loop steps per training job, and traced memory per device.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from hierfl.core import dynamics
from hierfl.driver import run_scenario
from tests.conftest import tiny


def population(n: int, **kw):
    """``n`` devices with 2 samples each, timing only (no model is trained), local executor."""
    base = {"data": {"dataset": {"num_samples": 2 * n, "test_samples": 50}},
            "devices": {"count": n, "speed_sps": {"dist": "lognormal", "median": 2, "sigma": 0.5}},
            "training": {"epochs": 1, "batch_size": 2, "trainer": "none"},
            "evaluation": {"every_s": None}}
    for key, value in kw.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return tiny(**base)


@pytest.mark.slow
def test_a_100k_device_timing_only_run_completes_quickly(tmp_path):
    t0 = time.perf_counter()
    r = run_scenario(population(100_000, protocol={"name": "fedavg", "fraction": 0.001}, stop={"rounds": 3}),
                     tmp_path)
    wall = time.perf_counter() - t0
    assert r.summary["status"] == "completed" and r.summary["rounds"] == 3
    assert r.summary["totals"]["train_jobs"] == 300  # 100 devices a round
    assert wall < 60, f"{wall:.1f} s"
    # outputs that scale: devices.csv whole, the trace keeps a sample of 200 device lanes
    assert sum(1 for _ in open(tmp_path / "devices.csv")) == 100_001
    lanes = {e.get("tid") for e in json.loads((tmp_path / "trace.json").read_text())
             if e.get("pid") == 3 and e.get("name") == "thread_name"}
    assert len(lanes) == 200
    assert max(len(line) for line in open(tmp_path / "metrics.jsonl")) < 2000


class _Counter:
    """Counts calls of the per-device availability checks."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for name in ("is_up", "next_up", "next_down"):
            original = getattr(dynamics.Availability, name)

            def counted(avail, d, t, *a, _f=original, **k):  # noqa: ANN001, ANN202
                self.calls += 1
                return _f(avail, d, t, *a, **k)

            monkeypatch.setattr(dynamics.Availability, name, counted)


def _counts(monkeypatch: pytest.MonkeyPatch, sc, out: Path) -> tuple[int, int, int]:
    """(train jobs, per-device availability checks, network inner-loop steps) of one run."""
    from hierfl.kernel import network

    counter = _Counter(monkeypatch)
    nets = []
    original_init = network.FlowNetwork.__init__

    def init(net, *a, _f=original_init, **k):  # noqa: ANN001, ANN202
        _f(net, *a, **k)
        nets.append(net)

    monkeypatch.setattr(network.FlowNetwork, "__init__", init)
    r = run_scenario(sc, out)
    monkeypatch.setattr(network.FlowNetwork, "__init__", original_init)
    return int(r.summary["totals"]["train_jobs"]), counter.calls, nets[0].ops.total()


@pytest.mark.parametrize("protocol", [
    {"name": "fedbuff", "K": 5, "concurrency": 40},
    {"name": "fedasync", "concurrency": 40},
    {"name": "fedavg"},
])
@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_work_per_job_does_not_grow_with_the_population(protocol, monkeypatch, tmp_path):
    # the marginal work of 20 more aggregations (setup, O(N) once, cancels out), at N = 1k and 10k;
    # availability is non-trivial (Markov) but changes rarely during the run
    per_job = {}
    for n in (1_000, 10_000):
        proto = {**protocol, "fraction": 40 / n} if protocol["name"] == "fedavg" else protocol
        runs = [_counts(monkeypatch, population(n, protocol=proto, stop={"rounds": rounds},
                                                devices={"availability": {"name": "markov", "mean_up_s": 1e6,
                                                                          "mean_down_s": 10}}),
                        tmp_path / f"{n}-{rounds}") for rounds in (20, 40)]
        jobs = runs[1][0] - runs[0][0]
        assert jobs > 0
        per_job[n] = ((runs[1][1] - runs[0][1]) / jobs, (runs[1][2] - runs[0][2]) / jobs)
    (checks_1k, net_1k), (checks_10k, net_10k) = per_job[1_000], per_job[10_000]
    # the same work at 10x the population: per-device checks and network steps per job stay flat
    assert checks_10k <= 1.5 * checks_1k + 2, per_job
    assert net_10k <= 1.5 * net_1k + 2, per_job


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_emulator_memory_per_device_is_small(tmp_path):
    # traced Python and numpy allocations of a whole (timing-only) run, data included, per extra device
    peaks = {}
    for n in (2_000, 20_000):
        sc = population(n, protocol={"name": "fedavg", "fraction": 10 / n}, stop={"rounds": 2})
        tracemalloc.start()
        run_scenario(sc, tmp_path / str(n))
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    per_device = (peaks[20_000] - peaks[2_000]) / 18_000
    assert per_device <= 2048, f"{per_device:.0f} B per device"
    Path(tmp_path / "per_device.txt").write_text(f"{per_device:.0f}\n")
