"""W1a's peak memory (scale, goal (c)): fewer processes in a Ray run, nothing held that is not needed.

* A Ray run's own instance leaves out the autoscaler monitor, the log monitor and the dashboard
  head (:mod:`hierfl.runtime.ray_head`).
* The cloud role runs in the driver (:mod:`hierfl.runtime.driver_cloud`), with the actor's
  results, bit for bit; a Ray client keeps the actor.
* The teacher dataset's labels are computed without BLAS (float64 logits summed feature by
  feature in row blocks), so OpenBLAS's threaded buffers are never set up in the driver.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.data.datasets import _teacher_labels
from hierfl.driver import run_scenario
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n,d,c", [(3 * 4096 + 123, 784, 10), (60000, 784, 10), (8191, 65, 10), (1, 784, 10),
                                   (30000, 20, 2), (4097, 100, 7)])
def test_teacher_labels_are_a_float64_references_argmax(n, d, c):
    rng = np.random.default_rng(n + d)
    teacher = rng.standard_normal((d, c), dtype=np.float32)
    x = rng.standard_normal((n, d), dtype=np.float32)
    reference = x.astype(np.float64) @ teacher.astype(np.float64)
    top2 = np.sort(reference, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-9 * np.abs(reference).max()  # rows with no near-tie
    assert clear.mean() > 0.99
    labels = _teacher_labels(x, teacher)
    assert labels.dtype == np.int64 and labels.shape == (n,)
    assert np.array_equal(labels[clear], np.argmax(reference, axis=1)[clear])
    assert len(np.unique(labels)) == min(c, n) or n < 100


_LEAN = r"""
import os, sys, ray
from hierfl.runtime import ray_head
from hierfl.runtime.ray_executor import RayStart
from hierfl.runtime.driver_cloud import DriverCloud
from ray._private import node, parameter
before = (parameter.RayParams.__init__, node.Node.start_api_server)
start = RayStart("ray", 2)
start.check()
assert (parameter.RayParams.__init__, node.Node.start_api_server) == before, "patches left behind"
print("TYPES", sorted(ray._private.worker._global_node.all_processes))
print("CLOUD", type(start.cloud).__name__, ray.get(start.cloud.pid.remote()) == os.getpid())
print("READY", ray.get([h.ready.remote() for h in start.hosts]))
x = ray.put(list(range(5)))
print("GET", ray.get(x))

def tree(root):
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                stat = open(f"/proc/{e}/stat", "rb").read()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rindex(b")") + 2:].split()[1]), []).append(int(e))
    out, todo = [], [root]
    while todo:
        p = todo.pop(); out.append(p); todo += kids.get(p, [])
    return out[1:]

names = []
for pid in tree(os.getpid()):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    names.append(" ".join(a.decode(errors="replace") for a in cmd[:2]))
print("PROCS", "|".join(names))

def has_torch(pid):
    return "libtorch_cpu" in open(f"/proc/{pid}/maps").read()

# a lost actor is still noticed without the monitors (the run's recovery relies on it)
import signal
from hierfl.runtime.ray_executor import RayDeviceHost, is_lost
extra = RayDeviceHost.options(num_cpus=0).remote(False)
os.kill(ray.get(extra.pid.remote()), signal.SIGKILL)
try:
    ray.get(extra.ready.remote(), timeout=60)
    print("LOST no")
except Exception as exc:
    print("LOST", is_lost(exc))
pids = ray.get([h.pid.remote() for h in start.hosts])
print("TORCH", [has_torch(p) for p in pids])  # before any set-up: only the first host imported it
import numpy as np
from hierfl.driver import run_scenario
from tests.conftest import tiny
res = run_scenario(tiny(stop={"rounds": 2}, runtime={"executor": "ray", "workers": 2}), sys.argv[1], start=start)
print("RUN", res.summary["status"], ray.is_initialized())  # the run closed the start: Ray is down
"""


@pytest.mark.ray
def test_a_ray_runs_own_instance_starts_neither_monitors_nor_dashboard_nor_a_cloud_actor(tmp_path):
    """A fresh process starts Ray as a run does (RayStart): which processes exist, when the hosts import
    torch, and a run on it gives the local bits."""
    proc = subprocess.run([sys.executable, "-c", _LEAN, str(tmp_path / "ray")], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    types = out["TYPES"]
    assert "gcs_server" in types and "raylet" in types
    for left_out in ("'monitor'", "'log_monitor'", "'dashboard'"):
        assert left_out not in types, types
    assert out["CLOUD"] == "DriverCloud True"  # the cloud role answers from this very process
    assert out["READY"] == "[True, True]" and out["GET"] == "[0, 1, 2, 3, 4]"
    procs = out["PROCS"].split("|")
    assert sum("HostActor" in p for p in procs) == 2
    assert not any("CloudActor" in p or "monitor.py" in p or "dashboard.py" in p for p in procs), procs
    assert any("DashboardAgent" in p or "dashboard/agent.py" in p for p in procs)  # the raylet's own: kept
    # the second host imports torch with its set-up (after the data's put), the first one at once
    assert out["LOST"] == "True"  # a SIGKILLed actor is reported lost: what recovery starts from
    assert out["TORCH"] == "[True, False]" and out["RUN"] == "completed False"
    local = run_scenario(tiny(stop={"rounds": 2}), tmp_path / "local")
    np.testing.assert_array_equal(np.load(tmp_path / "ray" / "final_model.npy"), local.final_params)


def test_lean_patches_fall_back_to_a_plain_start_without_rays_internals(monkeypatch):
    """A Ray whose internals differ gets a plain ``ray.init`` (a bigger run, never a different one)."""
    from ray._private import parameter

    from hierfl.runtime import ray_head

    monkeypatch.delattr(parameter, "RayParams")
    with ray_head.lean_patches() as lean:
        assert lean is False
    with pytest.raises(ValueError, match="local instance"):
        ray_head.lean_init(address="127.0.0.1:6379")


class _Role:
    """A stand-in role: records what it was called with."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.state = np.zeros(3, dtype=np.float32)

    def take(self, vec: np.ndarray, opts: dict[str, Any], *, extra: Any = None) -> np.ndarray:
        self.seen.append((vec, opts, extra))
        opts["mutated"] = True  # must not reach the caller's dict (an actor gets a copy)
        self.state = self.state + vec
        return self.state

    def nothing(self) -> None:
        return None

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)


@pytest.mark.ray
def test_driver_cloud_calls_have_an_actors_argument_and_result_semantics(ray_session):
    import pickle

    from hierfl.runtime.driver_cloud import INLINE_BYTES, DriverCloud, InDriver, get

    ray = ray_session
    cloud = DriverCloud(_Role())
    vec = np.arange(3, dtype=np.float32)
    ref = ray.put(vec)
    opts = {"k": [1, 2]}
    out = cloud.take.remote(ref, opts, extra=ray.put(7))
    # a small array result stays in the driver (no object-store put), as a read-only copy
    assert isinstance(out, InDriver)
    got = get(out)
    np.testing.assert_array_equal(got, vec)
    assert not got.flags.writeable
    assert "mutated" not in opts  # the role got a copy of a plain argument
    seen_vec, seen_opts, seen_extra = cloud.role.seen[0]
    assert isinstance(seen_vec, np.ndarray) and not seen_vec.flags.writeable  # resolved: the store's view
    assert seen_extra == 7  # keyword refs are resolved too
    cloud.role.state[0] = 99.0  # the role's later changes do not reach a result already returned
    assert get(out)[0] == 0.0
    # a result kept in the driver is an argument like a ref: resolved for the role, sent to an actor as its array
    again = cloud.take.remote(out, {})
    assert cloud.role.seen[1][0] is got
    np.testing.assert_array_equal(get(again), [99.0, 2.0, 4.0])
    assert pickle.loads(pickle.dumps(out)).tolist() == [0.0, 1.0, 2.0]
    # a big array result goes to the object store once, as an actor's would
    big = cloud.zeros.remote(INLINE_BYTES // 4 + 1)
    assert isinstance(big, ray.ObjectRef) and get(big).shape == (INLINE_BYTES // 4 + 1,)
    assert get(cloud.nothing.remote()) is None
    assert cloud.take.options(num_returns=1) is not None
    with pytest.raises(AttributeError):
        cloud.no_such_method  # noqa: B018


@pytest.mark.ray
@pytest.mark.parametrize("workers", [1, 2])
def test_the_cloud_role_in_the_driver_gives_the_local_bits(tmp_path, ray_session, monkeypatch, workers):
    """Hierarchical FedAvg (leader refs folded into the in-driver cloud) on 1 and 2 hosts vs local."""
    from hierfl.runtime.driver_cloud import DriverCloud
    from hierfl.runtime.ray_executor import RayExecutor

    clouds: list[Any] = []
    original = RayExecutor.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        clouds.append(self.cloud)

    monkeypatch.setattr(RayExecutor, "__init__", init)
    over = {"stop": {"rounds": 3}, "topology": {"edge_servers": 2},
            "protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 2, "fraction": 1.0}}
    local = run_scenario(tiny(**over), tmp_path / "local")
    ray_run = run_scenario(tiny(**over, runtime={"executor": "ray", "workers": workers}), tmp_path / "ray")
    assert len(clouds) == 1 and isinstance(clouds[0], DriverCloud)
    np.testing.assert_array_equal(ray_run.final_params, local.final_params)
    assert [(e["accuracy"], e["loss"]) for e in ray_run.evals] == [(e["accuracy"], e["loss"]) for e in local.evals]
    assert len(local.evals) >= 3
