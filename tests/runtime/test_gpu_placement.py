"""GPUs for the Ray executor's hosts: the packing arithmetic (``hierfl.core.gpu_shares``), the refusal of a
placement Ray could never satisfy (at start, exit status 2), who sees a GPU, and the out-of-memory message.

The Ray part runs in a fresh process whose Ray instance has one logical GPU (``ray.init(num_gpus=1)``):
Ray schedules and sets ``CUDA_VISIBLE_DEVICES`` for logical GPUs as for real ones, so the placement logic
and the hiding are checked on a machine without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hierfl.core.gpu_shares import hosts_per_node, placement_problem, share_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("gpus", "share", "hosts"), [
    (1, 0.5, 2), (1, 0.3, 3), (2, 0.4, 4), (1, 1, 1), (4, 1, 4), (4, 2, 2), (3, 2, 1), (1, 2, 0), (0, 0.5, 0),
    (1, 1 / 3, 3), (8, 0.125, 64)])
def test_hosts_per_node_packs_shares_onto_single_gpus(gpus, share, hosts):
    assert hosts_per_node(gpus, share) == hosts


def test_placement_problem_names_the_numbers():
    assert placement_problem(16, 0.0, [1]) is None  # no GPUs asked for
    assert placement_problem(2, 0.5, [1]) is None
    assert placement_problem(4, 0.5, [1, 1]) is None
    too_many = placement_problem(16, 0.5, [1])
    assert too_many is not None
    assert "16 hosts x 0.5 GPU = 8 GPUs asked for, the cluster has 1 GPU:" in too_many
    assert "14 could never be placed" in too_many and "at most 2 runtime.workers" in too_many
    # enough GPUs as a total, but a fraction packs onto single GPUs: 0.4 fits twice on a GPU, not 2.5 times
    packing = placement_problem(5, 0.4, [2])
    assert packing is not None and "(2 per GPU)" in packing and "take 4 hosts and 1 could never" in packing
    # whole GPUs of one node: two nodes of one GPU take no host of 2
    split = placement_problem(1, 2, [1, 1])
    assert split is not None and "no node of the cluster (2 GPUs on 2 nodes) has 2" in split
    # every message fits the 300 characters a configuration problem prints, with the run's suffix
    for args in [(16, 0.5, [1]), (5, 0.4, [2]), (1, 2, [1, 1]), (3, 0.5, [0]), (3, 2, [4, 1]), (99999, 0.3, [64] * 64)]:
        assert len(placement_problem(*args)) + len(" (workers: auto is one host per CPU)") <= 300
    assert "runtime.gpus_per_host: 0" in placement_problem(3, 0.5, [0])


def test_share_problem_refuses_what_ray_cannot_give():
    assert share_problem(0) is None and share_problem(0.25) is None and share_problem(2.0) is None
    assert "whole number" in share_problem(1.5)
    assert share_problem(0.00001) is not None


def test_the_schema_refuses_a_share_ray_cannot_give(tmp_path):
    from hierfl.config.errors import ConfigError
    from hierfl.scenario.loader import load_scenario

    with pytest.raises(ConfigError, match=r"runtime\.gpus_per_host: a share above one GPU must be a whole number"):
        load_scenario(ROOT / "scenarios" / "hierfavg.yaml", ["runtime.gpus_per_host=1.5"])


def test_an_out_of_memory_group_ends_the_run_with_the_group_size_and_device(tmp_path, monkeypatch):
    """torch.cuda.OutOfMemoryError in a group's training becomes a run error naming the group size,
    runtime.device and settings that exist (checked by a local run whose group trainer raises it)."""
    import torch
    import yaml

    from hierfl.driver import RunError, run_scenario
    from hierfl.learn.batched import BatchedTrainer
    from hierfl.scenario.runtime import RuntimeConfig
    from tests.conftest import tiny

    train_group = BatchedTrainer.train_resident  # (what train_group and the device-resident path both run)

    def no_memory(self, params, *args, **kwargs):
        if len(params) < 4:  # the warm-up's group of 2 fits
            return train_group(self, params, *args, **kwargs)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore lines")

    monkeypatch.setattr(BatchedTrainer, "train_resident", no_memory)
    with pytest.raises(RunError) as caught:
        run_scenario(tiny(stop={"rounds": 1}, runtime={"fast_path": True}), tmp_path / "run")
    text = str(caught.value)
    assert "a fast-path group of 4 jobs on cpu (runtime.device: cpu)" in text
    assert "Tried to allocate 2.00 GiB" in text and "more lines" not in text
    # the cap the run resolved (auto, recorded in config.yaml) and the knob that makes the groups smaller
    cap = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["runtime"]["group_max"]
    assert cap >= 4 and f"at most runtime.group_max = {cap} (auto" in text
    assert "runtime.group_max: a number below 4 (smaller groups)" in text
    fields = RuntimeConfig.model_fields
    for key in ("precision", "gpus_per_host", "workers", "fast_path", "device", "cpu_batching", "group_max"):
        assert f"runtime.{key}" in text and key in fields
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "fast-path group of 4 jobs" in summary["error"]


_LOGICAL_GPU = r"""
import contextlib, io, json, os, sys
import ray
from hierfl.runtime.ray_head import lean_init

lean_init(address="local", num_cpus=1, num_gpus=1, logging_level="ERROR", log_to_driver=False)
from hierfl.runtime.gpu_placement import cluster_gpus, hide_unreserved_gpus
from hierfl.runtime.ray_cluster import RayStart
from hierfl.runtime.start import start_executor

out = {"gpus": cluster_gpus(), "driver_hidden": hide_unreserved_gpus()}


class Probe:
    def __init__(self):
        self.hidden = hide_unreserved_gpus()

    def env(self):
        return [self.hidden, os.environ.get("CUDA_VISIBLE_DEVICES")]


probe = ray.remote(Probe)
probes = [probe.options(num_cpus=0, num_gpus=0.5).remote() for _ in range(2)] + [probe.options(num_cpus=0).remote()]
out["probes"] = ray.get([p.env.remote() for p in probes])
for p in probes:
    ray.kill(p)
# 3 hosts of half a GPU on one GPU: refused before any actor is asked for
start = RayStart("ray", workers=3, gpus_per_host=0.5)
refused = start.refused()
out["refused"] = None if refused is None else [[p.path, p.message] for p in refused.problems]
out["hosts"] = len(start.hosts)
start.close()
try:  # through start_executor (what a run calls): raised at once, the start closed
    start_executor("ray", workers=3, gpus_per_host=0.5)
    out["raised"] = None
except Exception as exc:
    out["raised"] = type(exc).__name__
# the command line: exit status 2, one message, no traceback, no run directory
from hierfl.cli import main

err = io.StringIO()
with contextlib.redirect_stderr(err):
    out["rc"] = main(["run", sys.argv[1], "--out", sys.argv[2], "-q", "--set", "runtime.executor=ray",
                      "--set", "runtime.workers=4", "--set", "runtime.gpus_per_host=0.5"])
out["stderr"] = err.getvalue()
out["out_exists"] = os.path.exists(sys.argv[2])
print("JSON" + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.ray
def test_placement_on_logical_gpus(tmp_path):
    """On an instance with one logical GPU: actors that reserve none see none, those that reserve a share
    see theirs; a placement that cannot be satisfied is refused at start (exit status 2 from the CLI)."""
    proc = subprocess.run([sys.executable, "-c", _LOGICAL_GPU, str(ROOT / "scenarios" / "hierfavg.yaml"),
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("JSON", 1)[1])
    assert out["gpus"] == [1.0] and out["driver_hidden"] is False  # the driver's own process is left alone
    assert out["probes"] == [[False, "0"], [False, "0"], [True, ""]]
    assert out["refused"] is not None and out["refused"][0][0] == "runtime.gpus_per_host"
    assert "3 hosts x 0.5 GPU = 1.5 GPUs asked for, the cluster has 1 GPU:" in out["refused"][0][1]
    assert out["hosts"] == 0 and out["raised"] == "ConfigError"
    assert out["rc"] == 2 and not out["out_exists"]
    assert "runtime.gpus_per_host: 4 hosts x 0.5 GPU = 2 GPUs asked for" in out["stderr"]
    assert "hierfavg.yaml" in out["stderr"] and "Traceback" not in out["stderr"] + proc.stderr
    np.testing.assert_equal(out["stderr"].count("\n"), 2)  # the header line and the problem


def test_cuda_on_ray_needs_reserved_gpus(monkeypatch):
    """Under Ray a host that reserves no GPU sees none, so device: cuda there is refused at load (on a
    machine where CUDA is available; here it is made to look so)."""
    from hierfl.config.errors import ConfigError
    from hierfl.scenario import checks
    from hierfl.scenario.loader import load_scenario

    monkeypatch.setattr(checks, "_cuda_available", lambda: True)
    path = ROOT / "scenarios" / "hierfavg.yaml"
    with pytest.raises(ConfigError, match=r"runtime\.gpus_per_host: runtime\.device: cuda on the Ray executor needs"):
        load_scenario(path, ["runtime.executor=ray", "runtime.device=cuda"])
    assert load_scenario(path, ["runtime.executor=ray", "runtime.device=cuda", "runtime.gpus_per_host=1"])
    assert load_scenario(path, ["runtime.executor=local", "runtime.device=cuda"])
    assert load_scenario(path, ["runtime.executor=ray", "runtime.device=auto"])


def test_roles_without_a_gpu_compute_on_the_cpu_and_auto_beside_idle_gpus_warns(monkeypatch, caplog):
    from types import SimpleNamespace

    from hierfl.runtime import ray_executor
    from hierfl.runtime.role_common import device_of, on_cpu

    spec = ("cfg", (8, 8), 10, 1, True, "auto", "bf16", "vmap", ("other",))
    cpu = on_cpu(spec)
    assert device_of(cpu) == "cpu" and cpu[:5] == spec[:5] and cpu[6:] == spec[6:]
    assert on_cpu(spec[:4]) == spec[:4]
    monkeypatch.setattr(ray_executor, "cluster_gpus", lambda: [2.0, 1.0])
    with caplog.at_level("WARNING"):
        ray_executor._note_idle_gpus(SimpleNamespace(model=spec), 0.0)
        ray_executor._note_idle_gpus(SimpleNamespace(model=spec), 0.5)  # hosts reserve GPUs: nothing to say
        ray_executor._note_idle_gpus(SimpleNamespace(model=cpu), 0.0)  # device: cpu asked for
    assert len(caplog.records) == 1
    assert "though the cluster has 3 GPU(s)" in caplog.records[0].getMessage()
