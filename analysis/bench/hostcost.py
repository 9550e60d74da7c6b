"""Host cost of a round of pfl-research's CIFAR-10 recipe, side by side with another checkout (``--against``).

The workload is ``scenarios/gpu_cifar10_fedavg.yaml`` (FedAvg, 50 jobs a round, the FedAvg CNN of 2.2 M
parameters on CIFAR-shaped synthetic data) on the local executor, shortened to ``--rounds`` rounds. Each
tree runs in its own interpreter (``PYTHONPATH`` set to the tree, as ``scale.py --against`` does), and
prints

* (a) ``timing``: seconds of host work per round of a timing-only run (``training.trainer: none``);
* (b) ``stubbed``: seconds per round of a trained run (``runtime.fast_path``) whose local steps are
  replaced by an identity, so a job returns the model it started from: what is left is the host work
  around training — staging the group's start models, copying its results out, aggregating 50 distinct
  updates (on a CPU with ``runtime.cpu_batching: vmap``, so that the round's 50 jobs form one group as on
  a GPU). The stub replaces ``VmapTrainer._descend`` (the local steps); a tree without that hook gets the
  same identity by a stand-in for its ``train_group`` that keeps its staging (a fresh ``(K, P)`` host
  stack, moved to the device, copied back into the results) and drops its steps;
* (c) model-sized host↔device copies per round inside the batched trainer and the aggregation on the device
  (tensor moves of at least one model's worth of floats between the host and the accelerator, counted by
  wrapping torch's ``to``, ``cpu`` and ``copy_``): calls, and models moved. With ``--device cpu`` there is no
  accelerator and both are 0.

``--transfers`` prints instead the staging code's own counter (:class:`hierfl.learn.staging.Transfers`, which
counts on a CPU too, as the copies the crossings are on an accelerator) per round of the same recipe with
``K = 10`` and ``K = 50`` jobs a round (``devices.count = K``, every device every round, local steps stubbed):
the count must not grow with ``K`` and stay at most 2 (one upload of the round's start model, one download of
its aggregate).

A round's cost is the wall time between the first and the last cloud aggregation (``metrics.jsonl``'s
``wall_s``) over the rounds in between: start-up, the data set's build and evaluations are outside it.

Usage::

    python analysis/bench/hostcost.py [--rounds 8] [--device auto|cpu|cuda] [--against OTHER_CHECKOUT]
    python analysis/bench/hostcost.py --transfers [--rounds 4] [--device auto|cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import torch
from hierfl.driver.run import run_scenario
from hierfl.scenario.loader import load_scenario
from hierfl.learn import vmapped

mode, rounds, device, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
moves = []          # numel of every host<->device tensor move made inside a group's training
inside = [False]

def _dev(t):
    return t.device.type if isinstance(t, torch.Tensor) else None

def _wrap(name):
    orig = getattr(torch.Tensor, name)
    def wrapped(self, *a, **k):
        res = orig(self, *a, **k)
        if inside[0]:
            src = self if name != "copy_" else a[0]
            dst = res if name != "copy_" else self
            if _dev(src) and _dev(dst) and _dev(src) != _dev(dst):
                moves.append(("h2d" if _dev(src) == "cpu" else "d2h", int(src.numel())))
        return res
    setattr(torch.Tensor, name, wrapped)

for name in ("to", "cpu", "copy_"):
    _wrap(name)

def _inside(cls, name):  # count the moves made inside cls.name (nested calls: one level of counting)
    orig = getattr(cls, name)
    def counted(self, *a, **k):
        outer = inside[0]
        inside[0] = True
        try:
            return orig(self, *a, **k)
        finally:
            inside[0] = outer
    setattr(cls, name, counted)
    return orig

orig_group = _inside(vmapped.VmapTrainer, "train_group")
if hasattr(vmapped.VmapTrainer, "train_resident"):  # this tree: a group's results stay on the device ...
    _inside(vmapped.VmapTrainer, "train_resident")
    from hierfl.learn import device_sum, staging
    _inside(device_sum.DeviceWeightedSum, "result")  # ... and its aggregate comes back once
    _inside(staging.DeviceRow, "host")

if mode == "stubbed":
    if hasattr(vmapped.VmapTrainer, "_descend"):  # this tree's hook: the local steps become an identity
        def identity(self, state, x, y, rows, spec, seeds, corrections):
            k = len(rows)
            return (torch.zeros((1, k), device=state.device), np.ones((1, k), dtype=bool),
                    [int(np.asarray(r).size) for r in rows])
        vmapped.VmapTrainer._descend = identity
    else:  # an older tree: its train_group's staging (as it was), without the steps
        def stand_in(self, params, x, y, rows, spec, seeds, out, corrections=None):
            k_jobs, P = len(params), self.num_params
            host = np.empty((k_jobs, P), dtype=np.float32)
            for k, p in enumerate(params):
                host[k] = np.asarray(p)
            state = torch.from_numpy(host).to(self.device)
            out[...] = state.cpu().numpy() if self.device != "cpu" else host
            return [{"loss": 0.0, "steps": 1, "samples": int(np.asarray(r).size)} for r in rows]
        orig_group = stand_in

sets = [f"stop.rounds={rounds}", "evaluation.every_s=null", "runtime.executor=local",
        "runtime.checkpoint.enabled=false", f"runtime.device={device}"]
if mode == "timing":
    sets.append("training.trainer=none")
elif device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
    sets.append("runtime.cpu_batching=vmap")  # a CNN's round groups on a CPU only with vmap asked for
scenario = load_scenario(Path("scenarios/gpu_cifar10_fedavg.yaml"), sets)
run_scenario(scenario, Path(out) / "run")
events = [json.loads(x) for x in (Path(out) / "run" / "metrics.jsonl").read_text().splitlines()]
num_params = next(e["num_params"] for e in events if e["event"] == "run_start")
aggs = [e["wall_s"] for e in events if e["event"] == "cloud_aggregate"]
big = [(way, n // num_params) for way, n in moves if n >= num_params]
per = max(len(aggs), 1)
print(json.dumps({"s_per_round": (aggs[-1] - aggs[0]) / (len(aggs) - 1), "rounds": len(aggs),
                  "h2d_calls": sum(w == "h2d" for w, _ in big) / per, "h2d_models": sum(m for w, m in big if w == "h2d") / per,
                  "d2h_calls": sum(w == "d2h" for w, _ in big) / per, "d2h_models": sum(m for w, m in big if w == "d2h") / per}))
"""


TRANSFERS = r"""
import json, sys
from pathlib import Path
import numpy as np
import torch
from hierfl.driver.run import run_scenario
from hierfl.scenario.loader import load_scenario
from hierfl.learn import vmapped
from hierfl.runtime import local_executor

k_jobs, rounds, device, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def identity(self, state, x, y, rows, spec, seeds, corrections):  # the local steps: not what is counted
    k = len(rows)
    return (torch.zeros((1, k), device=state.device), np.ones((1, k), dtype=bool), [int(np.asarray(r).size) for r in rows])
vmapped.VmapTrainer._descend = identity
hosts = []
start = local_executor.LocalExecutor.__init__
def counted(self, data):
    start(self, data)
    self.host.staging.transfers.reset()  # (the warm-up group is start-up, not a round)
    hosts.append(self.host)
local_executor.LocalExecutor.__init__ = counted
sets = [f"stop.rounds={rounds}", "evaluation.every_s=null", "runtime.executor=local", "runtime.checkpoint.enabled=false",
        f"runtime.device={device}", f"devices.count={k_jobs}", "protocol.fraction=1.0",
        f"data.dataset.num_samples={50 * k_jobs}", "data.dataset.test_samples=100"]
if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
    sets.append("runtime.cpu_batching=vmap")
run_scenario(load_scenario(Path("scenarios/gpu_cifar10_fedavg.yaml"), sets), Path(out) / "run")
counts = hosts[0].staging.transfers.as_dict()
print(json.dumps({"device": hosts[0].device, **{k: v / rounds for k, v in counts.items()}}))
"""


def transfers(rounds: int, device: str) -> int:
    """The staging counter per round for K = 10 and K = 50 (this tree only); exit status 1 if it grows with K or
    exceeds 2 calls a round."""
    rows = {}
    for k_jobs in (10, 50):
        with tempfile.TemporaryDirectory() as out:
            res = subprocess.run([sys.executable, "-c", TRANSFERS, str(k_jobs), str(rounds), device, out],
                                 capture_output=True, text=True, cwd=ROOT, check=False,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
        if res.returncode != 0:
            raise SystemExit(f"measurement failed (K={k_jobs}):\n{res.stderr[-2000:]}")
        rows[k_jobs] = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"# model-sized host<->device transfers per round, {rounds} rounds of scenarios/gpu_cifar10_fedavg.yaml "
          "(local executor, every device every round, local steps stubbed)")
    print(f"{'K':>4} {'device':>7} {'h2d calls/models':>17} {'d2h calls/models':>17} {'total calls':>12}")
    for k_jobs, r in rows.items():
        print(f"{k_jobs:>4} {r['device']:>7} {r['h2d_calls']:8.2f}/{r['h2d_models']:<8.2f} "
              f"{r['d2h_calls']:8.2f}/{r['d2h_models']:<8.2f} {r['h2d_calls'] + r['d2h_calls']:12.2f}")
    totals = [r["h2d_calls"] + r["d2h_calls"] for r in rows.values()]
    ok = totals[0] == totals[1] and max(totals) <= 2
    print("constant in K and at most 2 a round: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


def child(tree: Path, mode: str, rounds: int, device: str) -> dict:
    """One measurement in a fresh interpreter running the hierfl of ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run([sys.executable, "-c", CHILD, mode, str(rounds), device, out], capture_output=True,
                             text=True, cwd=tree, check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"measurement failed ({tree}, {mode}):\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Print (a), (b), (c) for this tree and every ``--against`` tree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--against", action="append", default=[], metavar="DIR", type=Path)
    ap.add_argument("--transfers", action="store_true",
                    help="print the staging counter's transfers per round for K = 10 and K = 50 (this tree)")
    args = ap.parse_args(argv)
    if args.transfers:
        if args.against:
            ap.error("--transfers measures this tree only (older trees have no staging counter)")
        return transfers(args.rounds, args.device)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (a round's cost is measured between two aggregations)")
    trees = [ROOT, *[p.resolve() for p in args.against]]
    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"device {args.device}, {args.rounds} rounds of scenarios/gpu_cifar10_fedavg.yaml (local executor)")
    rows = {tree: {mode: child(tree, mode, args.rounds, args.device) for mode in ("timing", "stubbed")}
            for tree in trees}
    print(f"{'tree':40} {'(a) timing s/round':>19} {'(b) stubbed s/round':>20} {'(c) h2d calls/models':>21} "
          f"{'d2h calls/models':>17}")
    for tree, r in rows.items():
        s = r["stubbed"]
        print(f"{str(tree)[-40:]:40} {r['timing']['s_per_round']:19.4f} {s['s_per_round']:20.4f} "
              f"{s['h2d_calls']:10.1f}/{s['h2d_models']:<10.1f} {s['d2h_calls']:8.1f}/{s['d2h_models']:<8.1f}")
    for other in trees[1:]:
        a = rows[other]["timing"]["s_per_round"] / rows[ROOT]["timing"]["s_per_round"]
        b = rows[other]["stubbed"]["s_per_round"] / rows[ROOT]["stubbed"]["s_per_round"]
        print(f"this tree vs {other}: (a) {a:.1f}x cheaper (goal >= 20x), (b) {b:.2f}x cheaper (goal >= 2.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
