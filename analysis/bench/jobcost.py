"""Where a small-model training job's time goes on a device host (scale, goal (b) with training).

    .venv/bin/python analysis/bench/jobcost.py [--jobs 4096]

Builds the data of ``scenarios/scale_ahfl_10k.yaml`` (10,000 devices, logreg on 20 samples each)
and one :class:`~hierfl.runtime.roles.DeviceHost`, then times, in CPU seconds of this process (the
machine is shared; wall clocks are not comparable), the pieces of a job:

* the driver's job seed (``stream_seed(seed, "train", device, job)``);
* the host's data order (``np.random.default_rng(seed)`` + its permutations);
* a whole job on the exact path (``DeviceHost.train``), and a whole job in fast-path groups of
  64 (``DeviceHost.train_group``), both with AHFL's proximal term as the scenario sets it.

Prints µs per job for each.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def per_job(fn, n: int) -> float:
    """CPU µs per call of ``fn(k)`` over ``k < n`` (fastest of 3 passes)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for k in range(n):
            fn(k)
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def main(argv: list[str]) -> int:
    """Print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4096)
    args = ap.parse_args(argv)
    from hierfl.assemble import build
    from hierfl.core.rng import stream_seed
    from hierfl.learn.local import index_blocks
    from hierfl.runtime.roles import DeviceHost
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(str(ROOT / "scenarios" / "scale_ahfl_10k.yaml"), ["training.trainer=sgd"])
    built = build(sc)
    spec = replace(built.spec, prox=0.005)  # AHFL default reg: a proximal term (rho)
    model = (sc.model, tuple(built.dataset.input_shape), built.dataset.num_classes, 1)
    n = args.jobs
    devices = [k % len(built.parts) for k in range(n)]
    seeds = [stream_seed(sc.seed, "train", d, k) for k, d in enumerate(devices)]
    params = np.asarray(built.init_params, dtype=np.float32)
    rows: dict[str, float] = {}
    rows["job seed (driver: stream_seed)"] = per_job(lambda k: stream_seed(sc.seed, "train", devices[k], k), n)

    def order(k: int) -> None:
        for _ in index_blocks(20, 10, spec, np.random.default_rng(seeds[k])):
            pass
    rows["data order (host: default_rng + permutation)"] = per_job(order, n)
    for fast in (False, True):
        host = DeviceHost(built.dataset.x_train, built.dataset.y_train, built.parts, model + (fast,))
        host.warmup(spec, params)
        if not fast:
            rows["whole job, exact path (DeviceHost.train)"] = per_job(
                lambda k: host.train(devices[k], seeds[k], spec, params), n)
        else:
            g = 64
            rows["whole job, fast path, groups of 64 (DeviceHost.train_group)"] = per_job(
                lambda k: host.train_group(devices[k * g:(k + 1) * g], seeds[k * g:(k + 1) * g], spec,
                                           [params] * g), n // g) / g
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} µs |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
