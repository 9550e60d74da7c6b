"""Emulator overhead benchmark, workload W1 (issue: core emulator).

W1: 100 devices, each 600 samples of 784 float32 features drawn N(0, 1), labels argmax(x·T)
for a fixed random teacher T (784 × 10); MLP 784-200-200-10; SGD lr 0.05, batch 32, one local
epoch; FedAvg with 10 devices per round for 10 rounds, then all 100 devices per round for 5.

It runs, side by side in one invocation,

* hierfl with the Ray executor and ``workers = cores`` (both phases share one Ray instance);
* a plain PyTorch loop doing the same local training (same devices, same data, same number of
  jobs) and the same averaging in one process on one thread,

and prints the start-up time separately and the steady-state ratio
``hierfl / (plain ÷ cores)`` — 1.0 would be a perfect parallel speed-up with zero emulator
overhead. Target: ≤ 1.15.

Usage: ``python analysis/bench/emulator_overhead.py [--cores N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from hierfl.assemble import build
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.scenario.loader import validate_raw


def scenario(fraction: float, rounds: int, workers: int) -> dict:
    """W1 as a hierfl scenario (constant profiles: the benchmark measures real seconds only)."""
    return {
        "name": f"w1-frac{fraction:g}",
        "seed": 1,
        "data": {"dataset": {"name": "teacher", "num_samples": 60000, "test_samples": 2000,
                             "num_features": 784, "num_classes": 10},
                 "partition": {"name": "iid"}},
        "model": {"name": "mlp", "hidden": [200, 200]},
        "devices": {"count": 100, "speed_sps": 1000, "uplink_mbps": 20, "downlink_mbps": 50, "latency_ms": 20},
        "protocol": {"name": "fedavg", "fraction": fraction},
        "training": {"epochs": 1, "batch_size": 32, "lr": 0.05},
        "stop": {"rounds": rounds},
        "runtime": {"executor": "ray", "workers": workers},
    }


def plain_pytorch(phases: list[tuple[float, int]], built, seed: int) -> list[float]:
    """The same local training and averaging in one process, one thread, plain PyTorch."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    x_all, y_all = built.dataset.x_train, built.dataset.y_train
    model = nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))
    glob = torch.from_numpy(built.init_params.copy())
    n_dev = len(built.parts)
    per_phase = []
    for fraction, rounds in phases:
        t0 = time.perf_counter()
        m = max(int(np.ceil(fraction * n_dev)), 1)
        for r in range(rounds):
            chosen = np.sort(stream(seed, "bench.select", r).choice(n_dev, m, replace=False))
            acc = torch.zeros_like(glob, dtype=torch.float64)
            total = 0
            for dev in chosen:
                idx = built.parts[dev]
                x = torch.from_numpy(x_all[idx])
                y = torch.from_numpy(y_all[idx])
                torch.nn.utils.vector_to_parameters(glob, model.parameters())
                opt = torch.optim.SGD(model.parameters(), lr=0.05)
                perm = torch.from_numpy(np.random.default_rng(int(dev) * 1000 + r).permutation(len(idx)))
                for s in range(0, len(idx), 32):
                    b = perm[s:s + 32]
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x[b]), y[b]).backward()
                    opt.step()
                acc += len(idx) * torch.nn.utils.parameters_to_vector(model.parameters()).detach().double()
                total += len(idx)
            glob = (acc / total).float()
        per_phase.append(time.perf_counter() - t0)
    return per_phase


def main() -> None:
    """Run both sides and print the comparison."""
    import ray

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of each side (median reported)")
    args = ap.parse_args()
    cores = args.cores
    phases = [(0.1, 10), (1.0, 5)]

    t0 = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    ray_init_s = time.perf_counter() - t0
    built = {f: build(validate_raw(scenario(f, r, cores))) for f, r in phases}

    hierfl_s, startup_s, plain_s = [], [], []
    phase_h: list[list[float]] = [[] for _ in phases]
    phase_p: list[list[float]] = [[] for _ in phases]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            steady, startup = 0.0, 0.0
            for k, (f, r) in enumerate(phases):
                sc = validate_raw(scenario(f, r, cores))
                res = run_scenario(sc, Path(tmp) / f"{sc.name}-{rep}", built=built[f])
                phase_h[k].append(res.summary["wall_s"] - res.summary["startup_s"])
                steady += phase_h[k][-1]
                startup += res.summary["startup_s"]
            hierfl_s.append(steady)
            startup_s.append(startup)
            per_phase = plain_pytorch(phases, built[0.1], seed=1)
            for k, v in enumerate(per_phase):
                phase_p[k].append(v)
            plain_s.append(sum(per_phase))
    ray.shutdown()

    # Each repetition runs both sides back to back; the ratio is taken per repetition (paired),
    # so slow drifts of a shared machine's speed cancel out, then the median is reported.
    ratios = [hv / (pv / cores) for hv, pv in zip(hierfl_s, plain_s)]
    h, p, s = statistics.median(hierfl_s), statistics.median(plain_s), statistics.median(startup_s)
    jobs = sum(max(int(np.ceil(f * 100)), 1) * r for f, r in phases)
    print(f"W1: {jobs} local jobs (MLP 784-200-200-10, 600 samples, batch 32, 1 epoch); cores = {cores}")
    print(f"start-up: ray.init {ray_init_s:.2f} s (once); hierfl actors + data per run {s / len(phases):.2f} s")
    print(f"hierfl steady state (Ray, {cores} workers): {h:.2f} s   runs: {', '.join(f'{v:.2f}' for v in hierfl_s)}")
    print(f"plain PyTorch, 1 process, 1 thread:      {p:.2f} s   runs: {', '.join(f'{v:.2f}' for v in plain_s)}")
    print(f"ideal parallel (plain / cores):          {p / cores:.2f} s")
    for k, (f, r) in enumerate(phases):
        pr = [hv / (pv / cores) for hv, pv in zip(phase_h[k], phase_p[k])]
        print(f"  phase {int(f * 100)} devices x {r} rounds: hierfl {statistics.median(phase_h[k]):.2f} s, "
              f"plain {statistics.median(phase_p[k]):.2f} s, paired ratio {statistics.median(pr):.3f}")
    ratio = statistics.median(ratios)
    print(f"paired ratios per repetition: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"steady-state ratio hierfl / (plain / cores) = {ratio:.3f} (median of paired ratios; "
          f"target <= 1.15: {'met' if ratio <= 1.15 else 'NOT met'})")


if __name__ == "__main__":
    main()
