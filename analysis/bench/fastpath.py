"""Small-model fast path benchmark (scale, item 4): per-job wall time, old trainer vs new, side by side.

Workloads (one device host, one torch thread, jobs over 50 devices in turn):

* ``logreg-20``: logistic regression 60 → 10 on 20 samples per device, batch 10, 1 epoch (2 steps);
* ``mlp-50``: MLP 60-32-10 on 50 samples per device, batch 10, 1 epoch (5 steps);
* ``w1-600``: W1's MLP 784-200-200-10 on 600 samples per device, batch 32, lr 0.05, 1 epoch (19 steps).

``old`` is the one-job-at-a-time trainer as it was (:class:`hierfl.learn.reference.ReferenceTrainer`:
a fresh ``torch.optim.SGD`` and autograd per job, the device's samples gathered into a per-job copy
by the host first); ``new`` is :meth:`DeviceHost.train_many` on today's trainer (``ExactSGD``,
``LinearChain`` gradients, rows indexed once, results written into the batch array), checked
bit-identical to ``old`` job by job. With ``--batched`` the opt-in fast path (``runtime.fast_path``:
groups of ``--group`` jobs trained together, :mod:`hierfl.learn.batched`) is timed too; its numbers
are not bit-identical to the others.

Old and new alternate in paired repetitions; the table gives the medians of µs/job and the median
of the paired ratios ``old / new``.

Usage: ``python analysis/bench/fastpath.py [--repeat R] [--batched]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hierfl.core.work import TrainSpec
from hierfl.learn import init_params
from hierfl.learn.reference import ReferenceTrainer
from hierfl.models import LogRegConfig, MLPConfig, ModelConfig
from hierfl.runtime.roles import DeviceHost

DEVICES = 50


@dataclass(frozen=True)
class Workload:
    """One benchmark row."""

    name: str
    model: ModelConfig
    features: int
    samples: int
    spec: TrainSpec
    jobs: int  # jobs per timed repetition


WORKLOADS = [
    Workload("logreg-20", LogRegConfig(), 60, 20, TrainSpec(epochs=1, batch_size=10, lr=0.05), 960),
    Workload("mlp-50", MLPConfig(hidden=[32]), 60, 50, TrainSpec(epochs=1, batch_size=10, lr=0.05), 384),
    Workload("w1-600", MLPConfig(hidden=[200, 200]), 784, 600, TrainSpec(epochs=1, batch_size=32, lr=0.05), 32),
]


def _data(w: Workload) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((DEVICES * w.samples, w.features), dtype=np.float32)
    teacher = rng.standard_normal((w.features, 10), dtype=np.float32)
    y = (x @ teacher).argmax(axis=1).astype(np.int64)
    perm = rng.permutation(DEVICES * w.samples)
    parts = [np.sort(perm[d * w.samples:(d + 1) * w.samples]) for d in range(DEVICES)]
    return x, y, parts


def _runners(w: Workload, batched: bool, batch_group: int) -> dict[str, Callable[[int], np.ndarray]]:
    """name → run(first job number) over ``w.jobs`` jobs, returning the stacked results."""
    x, y, parts = _data(w)
    model = (w.model, (w.features,), 10, 1)
    params = init_params(w.model, (w.features,), 10, 0)
    old_trainer = ReferenceTrainer(w.model, (w.features,), 10)
    host = DeviceHost(x, y, parts, model)
    group = 10  # jobs per train_many call (a Ray host's coalesced batch; the local executor sends 1)

    def old(first: int) -> np.ndarray:
        out = np.empty((w.jobs, params.size), dtype=np.float32)
        for k in range(w.jobs):
            job = first + k
            idx = parts[job % DEVICES]
            out[k], _ = old_trainer.train(params, x[idx], y[idx], w.spec, job)  # the host gathered x[idx]
        return out

    def new(first: int) -> np.ndarray:
        rows = []
        for start in range(0, w.jobs, group):
            ks = range(first + start, first + min(w.jobs, start + group))
            res, _ = host.train_many([k % DEVICES for k in ks], list(ks), w.spec, [0] * len(ks),
                                     [None] * len(ks), None, params)
            rows.append(res)
        return np.concatenate(rows)

    runners = {"old": old, "new": new}
    if batched:
        bhost = DeviceHost(x, y, parts, (*model, True))  # ModelSpec's fifth element: runtime.fast_path

        def fast(first: int) -> np.ndarray:
            rows = []
            for start in range(0, w.jobs, batch_group):
                ks = range(first + start, first + min(w.jobs, start + batch_group))
                res, _ = bhost.train_many([k % DEVICES for k in ks], list(ks), w.spec, [0] * len(ks),
                                          [None] * len(ks), None, params, groups=[0] * len(ks))
                rows.append(res)
            return np.concatenate(rows)

        runners["batched"] = fast
    return runners


def main() -> None:
    """Print the table."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="paired repetitions per workload")
    parser.add_argument("--batched", action="store_true", help="also time the opt-in batched fast path")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the jobs per repetition")
    parser.add_argument("--group", type=int, default=32, help="jobs per fast-path group (--batched)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.repeat} paired repetitions, µs per job (median)")
    header = "| workload | old µs/job | new µs/job | old/new |" + (
        f" batched µs/job (groups of {args.group}) | old/batched |" if args.batched else "")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    all_identical = True
    for w in WORKLOADS:
        w = Workload(w.name, w.model, w.features, w.samples, w.spec, max(1, int(w.jobs * args.scale)))
        runners = _runners(w, args.batched, args.group)
        for run in runners.values():  # warm-up (torch's lazy start, caches)
            run(0)
        times: dict[str, list[float]] = {k: [] for k in runners}
        identical = True
        for r in range(args.repeat):
            outs = {}
            for name, run in runners.items():
                t0 = time.perf_counter()
                outs[name] = run(1000 * (r + 1))
                times[name].append((time.perf_counter() - t0) / w.jobs * 1e6)
            identical &= bool(np.array_equal(outs["old"].view(np.uint32), outs["new"].view(np.uint32)))
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = statistics.median(o / n for o, n in zip(times["old"], times["new"]))
        line = f"| {w.name} | {med['old']:.0f} | {med['new']:.0f} | **{ratio:.2f}×** |"
        if args.batched:
            rb = statistics.median(o / b for o, b in zip(times["old"], times["batched"]))
            line += f" {med['batched']:.0f} | **{rb:.2f}×** |"
        print(line + ("" if identical else "  (old and new DIFFER: bug)"), flush=True)
        all_identical &= identical
    print("new == old bit for bit on every job" if all_identical else "new != old on some job: bug")


if __name__ == "__main__":
    main()
