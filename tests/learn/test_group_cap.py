"""``runtime.group_max: auto`` has no fixed ceiling: the cap is what fits in the device's memory (hierfl.learn.group_cap).

* the resolved cap for a given model, batch, optimizer and total memory is the formula's, hand-computed for
  the recipe's CNN, and goes well above the former fixed 64 when memory allows;
* a shipped scenario with 100 jobs a round trains each round as one group of 100, records the cap in
  ``config.yaml``, and ends within float tolerance of the same run job by job.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.core.work import TrainSpec
from hierfl.learn import group_cap

ROOT = Path(__file__).resolve().parents[2]
WHOLE_ROUND = ROOT / "scenarios" / "whole_round_group.yaml"

# McMahan et al.'s CNN on 32x32x3 (the CIFAR-10 recipe's model): conv 5x5 3→32, conv 5x5 32→64, 4096→512, 512→10
CNN_PARAMS = (3 * 25 * 32 + 32) + (32 * 25 * 64 + 64) + (4096 * 512 + 512) + (512 * 10 + 10)
# one sample's floats: input, conv+ReLU (32x32x32 each), pool, conv+ReLU (64x16x16 each), pool, 512 twice, 10
CNN_ACTIVATIONS = 3 * 32 * 32 + 2 * 32 * 32 * 32 + 32 * 16 * 16 + 2 * 64 * 16 * 16 + 64 * 8 * 8 + 2 * 512 + 10


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_cap_is_what_fits_in_the_devices_memory_with_no_ceiling(device, monkeypatch):
    from hierfl.learn import vmapped
    from hierfl.models import CNNConfig

    cfg = CNNConfig()
    assert CNN_PARAMS == 2_156_490 and group_cap.activation_floats(cfg, (3, 32, 32), 10) == CNN_ACTIVATIONS
    # the recipe's jobs: batch 10, plain SGD (no optimizer slot): 4 · (3·P + 2·10·A) bytes
    per_job = 4 * (3 * CNN_PARAMS + 2 * 10 * CNN_ACTIVATIONS)
    assert per_job == 35_053_720
    memories = []

    def total(dev: str) -> int:
        memories.append(dev)
        return 80 * 2**30  # an 80 GiB accelerator (or host)

    monkeypatch.setattr(group_cap, "total_memory", total)
    monkeypatch.setattr(vmapped, "resolve_device", lambda d: d)  # (cuda without a GPU: the formula only)
    spec = TrainSpec(epochs=1, batch_size=10, lr=0.1)
    got = group_cap.resolve_group_cap(cfg, (3, 32, 32), 10, CNN_PARAMS, 10, spec, device)
    # floor(0.5 · 80 GiB / 35,053,720 B) = 1225 jobs: a round of the recipe (50) or twenty of them, not 64
    assert got == {"group_max": 1225, "memory_bytes": 80 * 2**30, "job_bytes": per_job} and memories == [device]
    # momentum adds one vector a job; a 16 GiB device holds fewer such jobs; and never fewer than one
    heavy = group_cap.job_bytes(CNN_PARAMS, 10, CNN_ACTIVATIONS, group_cap.optimizer_slots(
        TrainSpec(epochs=1, batch_size=10, lr=0.1, momentum=0.9)))
    assert heavy == per_job + 4 * CNN_PARAMS
    assert group_cap.cap_for(16 * 2**30, heavy) == (8 * 2**30) // heavy == 196
    assert group_cap.cap_for(1, per_job) == 1


def _round_group_sizes(monkeypatch) -> list[int]:
    """The sizes of the groups the local executor hands its host (appended as they are trained)."""
    from hierfl.runtime.device_host import DeviceHost

    sizes: list[int] = []
    group = DeviceHost.train_group_resident

    def spy(self, devices, *args, **kw):
        sizes.append(len(devices))
        return group(self, devices, *args, **kw)

    monkeypatch.setattr(DeviceHost, "train_group_resident", spy)
    return sizes


def test_a_round_of_100_jobs_is_one_group_within_tolerance_of_job_by_job(tmp_path, monkeypatch):
    from hierfl.driver import run_scenario
    from hierfl.models import MLPConfig
    from hierfl.scenario.loader import load_scenario

    sizes = _round_group_sizes(monkeypatch)
    fast = run_scenario(load_scenario(WHOLE_ROUND, ["stop.rounds=2"]), tmp_path / "fast")
    assert fast.summary["rounds"] == 2
    assert sizes == [100, 100]  # each round's 100 jobs: one group, where a fixed cap of 64 made two
    recorded = yaml.safe_load((tmp_path / "fast" / "config.yaml").read_text())["runtime"]["group_max"]
    # 16 features → 16 → 4 with momentum (1 slot), batch 10; activations: 16 + 16 + 16 + 4 a sample
    per_job = group_cap.job_bytes(16 * 16 + 16 + 16 * 4 + 4, 10, 16 + 16 + 16 + 4, 1)
    assert per_job == group_cap.job_bytes(340, 10, group_cap.activation_floats(MLPConfig(hidden=[16]), (16,), 4), 1)
    assert recorded == group_cap.cap_for(group_cap.total_memory("cpu"), per_job) > 100
    sizes.clear()
    alone = run_scenario(load_scenario(WHOLE_ROUND, ["stop.rounds=2", "runtime.fast_path=false"]),
                         tmp_path / "alone")
    assert sizes == [] and alone.summary["rounds"] == 2
    # the same emulated run; the model within float tolerance (batched kernels differ in the last bits)
    assert alone.summary["virtual_time_s"] == fast.summary["virtual_time_s"]
    np.testing.assert_allclose(fast.final_params, alone.final_params, rtol=0, atol=1e-5)
    assert abs(fast.evals[-1]["accuracy"] - alone.evals[-1]["accuracy"]) <= 0.01
