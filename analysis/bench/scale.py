"""Scale benchmark: the same work at growing populations, AHFL at 10,000 devices, W1a.

    .venv/bin/python analysis/bench/scale.py            # (a) and (b); `make bench-scale`
    .venv/bin/python analysis/bench/scale.py --quick    # shorter windows

Every measurement runs in its own process (peak RSS is that process's), side by side in one
invocation, and the table prints ratios against the goals of the issue:

(a) FedAvg, 100 devices × 10 rounds, logreg (20 samples per device), local executor, at N = 1k,
    10k, 100k: whole wall, rounds-only wall (whole − start-up), peak RSS, and the traced emulator
    memory per device (data included) from the tracemalloc slope between 1k and 10k;
(b) AHFL over 10,000 devices and 20 edge servers (scenarios/scale_ahfl_10k.yaml), with training
    (logreg: the exact path and runtime.fast_path, local and on Ray with 2 device hosts) and timing
    only, over a window of virtual time from t = 0 (10 s with training, 60 s timing only; --window,
    --timing-window; --timing-window 3600 runs the issue's whole hour): jobs/s and events/s (wall
    after start-up). Timing only runs 3 times (--repeat), interleaved with the same run of every ``--against DIR``
    (another checkout of hierfl, e.g. ``git worktree add DIR <commit>``: the code before a change;
    where that checkout has the Cython-compiled event path of older versions, it runs both compiled
    and with ``HIERFL_NATIVE=0``); the fastest of each and their ratios print;
(c) W1a (the README's W1 workload, 10 rounds of 10 devices) is measured by
    analysis/bench/startup.py: whole-process wall and peak tree memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time, tracemalloc
from hierfl.scenario.loader import load_scenario, validate_raw
from hierfl.driver import run_scenario
kind, arg, out, trace = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
t0 = time.perf_counter()
if trace:
    tracemalloc.start()
if kind == "raw":
    sc = validate_raw(arg)
else:
    sc = load_scenario(arg["path"], arg["set"])
import hierfl, os
# the builders' package (build/ before it was renamed assemble/): looked up in this tree's own hierfl
if os.path.isdir(os.path.join(os.path.dirname(hierfl.__file__), "assemble")):
    from hierfl.assemble import build
else:
    from hierfl.build import build
built = build(sc)
data_bytes = built.dataset.x_train.nbytes + built.dataset.y_train.nbytes + sum(p.nbytes for p in built.parts)
t1 = time.perf_counter()
c1 = time.process_time()
r = run_scenario(sc, out, built=built)
t2 = time.perf_counter()
c2 = time.process_time()
wall = t2 - t0
s = r.summary
# rounds only: the run less its start-up (everything before its first event); the build is outside it
print(json.dumps({"wall_s": wall, "startup_s": s["startup_s"], "rounds_s": t2 - t1 - s["startup_s"],
                  # the process's CPU seconds over the same span less the same start-up (another process on the
                  # machine moves this less than the wall): jobs per CPU second
                  "rounds_cpu_s": c2 - c1 - s["startup_s"],
                  "jobs": s["totals"]["train_jobs"],
                  "events": s.get("events"), "rounds": s["rounds"],
                  "traced_peak": tracemalloc.get_traced_memory()[1] if trace else None, "data_bytes": data_bytes,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(kind: str, arg: object, trace: bool = False, tree: Path = ROOT, env_extra: dict | None = None) -> dict:
    """Run one measurement in a fresh interpreter with the hierfl of ``tree``; returns its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(tree), **(env_extra or {})}
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run([sys.executable, "-c", CHILD, kind, json.dumps(arg), out, "1" if trace else "0"],
                             capture_output=True, text=True, cwd=tree, check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"measurement failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def fedavg_population(n: int, trainer: str = "sgd") -> dict:
    """(a): 100 devices a round out of ``n``, 10 rounds, logreg on 20 samples per device."""
    return {"name": f"scale-a-{n}", "seed": 3,
            "data": {"dataset": {"name": "blobs", "num_samples": 20 * n, "test_samples": 500, "num_features": 20,
                                 "num_classes": 10}, "partition": {"name": "iid"}},
            "model": {"name": "logreg"},
            "devices": {"count": n, "speed_sps": {"dist": "lognormal", "median": 50, "sigma": 0.5},
                        "uplink_mbps": 10, "downlink_mbps": 50, "latency_ms": 20},
            "protocol": {"name": "fedavg", "fraction": 100 / n},
            "training": {"epochs": 1, "batch_size": 10, "lr": 0.05, "trainer": trainer},
            "stop": {"rounds": 10}, "runtime": {"executor": "local"}}


def main(argv: list[str]) -> int:
    """Print the tables."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter windows, (a) up to 10k")
    ap.add_argument("--window", type=float, default=None,
                    help="(b) virtual seconds of the runs with training (default 10; 4 with --quick)")
    ap.add_argument("--timing-window", type=float, default=None,
                    help="(b) virtual seconds of the timing-only run (default 60; 4 with --quick; 3600: the "
                         "issue's whole virtual hour, about 15 minutes)")
    ap.add_argument("--against", action="append", default=[], metavar="DIR",
                    help="another hierfl checkout whose timing-only row runs interleaved with this one's "
                         "(repeatable; e.g. a git worktree of an older commit)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="(b) timing-only runs of each tree, interleaved (default 3; the fastest counts)")
    ap.add_argument("--timing-only", action="store_true",
                    help="only (b)'s timing-only row (with its --against trees), side by side")
    args = ap.parse_args(argv)
    if not args.timing_only:
        population_table(args.quick)
    road(args)
    print("\n(c) W1a: see analysis/bench/startup.py (whole-process wall, steady round, peak tree memory)")
    return 0


def population_table(quick: bool) -> None:
    """(a): the same work at growing populations, and the emulator's memory per device."""
    print("(a) FedAvg, the same work (100 devices x 10 rounds, logreg) at growing N, local executor")
    print("| N | whole wall (s) | rounds-only wall (s, fastest of 3) | ratio to 1k | peak RSS (MB) |")
    print("|---|---|---|---|---|")
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    # rounds-only walls are under a second: each size runs 3 times, interleaved, and the fastest counts
    # (the least disturbed by other work on a shared machine)
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    for _ in range(3):
        for n in sizes:
            runs[n].append(child("raw", fedavg_population(n)))
    rows = {n: min(rs, key=lambda r: r["rounds_s"]) for n, rs in runs.items()}
    base = rows[1_000]["rounds_s"]
    for n, r in rows.items():
        rounds = r["rounds_s"]
        print(f"| {n:,} | {r['wall_s']:.2f} | {rounds:.2f} | {rounds / base:.2f} (goal <= 1.5) | {r['max_rss_mb']:.0f} |")
    traced = {n: child("raw", fedavg_population(n, "none"), trace=True) for n in (1_000, 10_000)}
    per_device = (traced[10_000]["traced_peak"] - traced[1_000]["traced_peak"]) / 9_000
    data = (traced[10_000]["data_bytes"] - traced[1_000]["data_bytes"]) / 9_000
    print(f"\nmemory per device (traced slope 1k -> 10k, timing only): {per_device:.0f} B in all, of which its data "
          f"(samples, labels, index) {data:.0f} B; emulator state beyond the data {per_device - data:.0f} B "
          "(goal <= 2048 B)")


def road(args: argparse.Namespace) -> None:
    """(b): AHFL over 10,000 devices; with training (unless --timing-only) and timing only, side by side."""
    # the run is one virtual hour; the rows run a window of it (with training, an hour is 10^7 jobs).
    # The first seconds are a burst (every device downloads at t = 0 and meets its route for the first
    # time), so a short window understates the steady rate: timing only, fast enough for it, runs a minute
    window = args.window or (4 if args.quick else 10)
    timing_window = args.timing_window or (4 if args.quick else 60)
    print("\n(b) AHFL, 10,000 devices, 20 edge servers (scenarios/scale_ahfl_10k.yaml), a window of virtual time "
          "from t = 0 (rates: jobs and events over the wall after start-up)")
    print("| mode | virtual s | jobs | events | wall after start-up (s) | jobs/s | events/s | goal |")
    print("|---|---|---|---|---|---|---|---|")
    modes = (("with training", ["training.trainer=sgd"], 3000),
             ("with training, runtime.fast_path", ["training.trainer=sgd", "runtime.fast_path=true"], 3000),
             # the same jobs on 2 cores: Ray's 2 device hosts train while the driver runs the events
             ("with training, Ray, 2 hosts", ["training.trainer=sgd", "runtime.executor=ray", "runtime.workers=2"],
              3000),
             ("with training, Ray, 2 hosts, runtime.fast_path",
              ["training.trainer=sgd", "runtime.executor=ray", "runtime.workers=2", "runtime.fast_path=true"], 3000),
             ("timing only", ["training.trainer=none"], 20000))
    rates: dict[str, float] = {}
    cpu_rates: dict[str, float] = {}
    path = str(ROOT / "scenarios" / "scale_ahfl_10k.yaml")
    for mode, sets, goal in ([] if args.timing_only else modes[:-1]):  # with training: one run each
        r = child("file", {"path": path, "set": [f"stop.virtual_time_s={window:g}", "evaluation.every_s=null", *sets]})
        run_s = r["rounds_s"]
        print(f"| {mode} | {window:g} | {r['jobs']:,} | {r['events']:,} | {run_s:.1f} | {r['jobs'] / run_s:,.0f} | "
              f"{r['events'] / run_s:,.0f} | >= {goal:,} jobs/s |")
    # timing only: this tree and every --against tree, 3 runs each, interleaved (this machine's speed
    # drifts by 10-20 % within minutes: one run of each, one after the other, can show either order);
    # the fastest of each counts (as in (a)), the median is printed beside it
    mode, sets, goal = modes[-1]
    trees: list[tuple[str, Path, dict]] = [("timing only", ROOT, {})]
    for other in args.against:
        tree = Path(other).resolve()
        if (tree / "hierfl" / "_native.py").is_file():  # an older version with the compiled event path
            trees.append((f"timing only, {tree.name}, compiled where built", tree, {"HIERFL_NATIVE": "1"}))
            trees.append((f"timing only, {tree.name}, pure Python", tree, {"HIERFL_NATIVE": "0"}))
        else:
            trees.append((f"timing only, {tree.name}", tree, {}))
    tries: dict[str, list[dict]] = {label: [] for label, _, _ in trees}
    for _ in range(args.repeat):
        for label, tree, extra in trees:
            own = str(tree / "scenarios" / "scale_ahfl_10k.yaml")  # each tree reads its own copy
            tries[label].append(child("file", {"path": own, "set": [f"stop.virtual_time_s={timing_window:g}",
                                                                    "evaluation.every_s=null", *sets]},
                                      tree=tree, env_extra=extra))
    n = args.repeat
    for label, _tree, _extra in trees:
        runs_ = sorted(tries[label], key=lambda r: r["rounds_s"])
        r, med = runs_[0], runs_[len(runs_) // 2]
        run_s = r["rounds_s"]
        rates[label] = r["jobs"] / run_s
        cpu_rates[label] = max(x["jobs"] / x["rounds_cpu_s"] for x in runs_)
        print(f"| {label}, fastest of {n} (median) | {timing_window:g} | {r['jobs']:,} | {r['events']:,} | {run_s:.1f} | "
              f"{r['jobs'] / run_s:,.0f} ({med['jobs'] / med['rounds_s']:,.0f}) | {r['events'] / run_s:,.0f} | "
              f">= {goal:,} jobs/s |")
    for label in list(rates)[1:]:
        print(f"this tree / {label}: {rates['timing only'] / rates[label]:.2f}x the jobs/s "
              f"(fastest of {n} each, interleaved); {cpu_rates['timing only'] / cpu_rates[label]:.2f}x the jobs per "
              "CPU second (best of each)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
