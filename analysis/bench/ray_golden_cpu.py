"""CPU seconds of shipped scenarios' golden runs on the Ray executor, in the steady state of a test process.

Like the golden tests (``tests/determinism/test_golden.py``), it starts one lean local Ray instance with 2 CPUs
in this process, keeps a run's host actors for the next run (``ray_actors.KEEP_S``) and runs each scenario with
the golden limits (``tests.golden.run_one``). One warm-up run (``fedalign``) starts the hosts first, so each
figure is one run on kept hosts. A figure is the CPU time of this process and of every process below it (the
host actors, the raylet, the GCS) during the run, read from ``/proc``: the driver's share alone would miss the
Ray work a change moves between processes.

Usage (from the repository root): ``PYTHONPATH=. python analysis/bench/ray_golden_cpu.py adpsgd_torus,dpsgd_ring
[--executors ray,local]``. Run it on two checkouts one after the other to compare them; on a shared machine
compare CPU seconds, not wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def descendants_cpu(root: int) -> float:
    """CPU seconds used so far by every live process below ``root`` (from ``/proc``)."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        kids.setdefault(int(rest[1]), []).append(int(entry))
        ticks[int(entry)] = int(rest[11]) + int(rest[12])
    total, stack = 0, list(kids.get(root, []))
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(kids.get(pid, []))
    return total / _TICK


def cpu_now() -> float:
    """This process's CPU seconds, its reaped children's and its live descendants'."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + descendants_cpu(os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stems", help="comma-separated scenario stems (scenarios/STEM.yaml)")
    parser.add_argument("--executors", default="ray", help="comma-separated: ray, local")
    args = parser.parse_args()

    from hierfl.runtime import ray_actors
    from hierfl.runtime.ray_head import lean_init
    from tests.golden import ROOT, run_one

    lean_init(address="local", num_cpus=2, logging_level="ERROR", log_to_driver=False)  # as tests/conftest.py
    ray_actors.KEEP_S = 3600.0
    run_one(ROOT / "scenarios" / "fedalign.yaml", "ray", Path(tempfile.mkdtemp()) / "warm-up")
    figures: dict[str, float] = {}
    for stem in args.stems.split(","):
        for executor in args.executors.split(","):
            cpu0, wall0 = cpu_now(), time.perf_counter()
            run_one(ROOT / "scenarios" / f"{stem}.yaml", executor, Path(tempfile.mkdtemp()) / executor)
            figures[f"{stem}:{executor}"] = round(cpu_now() - cpu0, 2)
            print(f"{stem:24s} {executor:6s} CPU {figures[f'{stem}:{executor}']:7.2f} s   "
                  f"wall {time.perf_counter() - wall0:6.1f} s", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
