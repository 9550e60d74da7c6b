"""Where the event path's time goes, by package: the bound on what compiling one package could give.

    .venv/bin/python analysis/bench/kernel_share.py [--window 20]

Runs the timing-only AHFL row of ``make bench-scale`` (``scenarios/scale_ahfl_10k.yaml``,
``training.trainer: none``, no evaluation, no checkpoint) under ``cProfile`` and sums each function's own time by
the hierfl package it is defined in (``heapq``'s C functions count for the kernel, which is their
only caller on this path; other built-ins and the standard library are listed apart). If a package
takes a share ``s`` of the time, making it infinitely fast gives at most ``1 / (1 - s)`` (Amdahl):
the figure that decides whether a compiled package can reach a given speed-up. cProfile's own
per-call cost weighs on small functions, so the shares are estimates, not timings.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    """Print each package's share of the profiled event loop and the Amdahl bound of the kernel."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=20.0, help="virtual seconds of the run (default 20)")
    args = ap.parse_args(argv)
    from hierfl.assemble import build
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "scale_ahfl_10k.yaml",
                       [f"stop.virtual_time_s={args.window:g}", "evaluation.every_s=null", "training.trainer=none",
                        "runtime.checkpoint.enabled=false"])
    built = build(sc)
    with tempfile.TemporaryDirectory() as out:
        prof = cProfile.Profile()
        prof.enable()
        run = run_scenario(sc, out, built=built)
        prof.disable()
    stats = pstats.Stats(prof)
    by: dict[str, float] = {}
    for (path, _line, func), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "/hierfl/" in path:
            rest = path.split("/hierfl/", 1)[1]
            key = rest.split("/")[0] if "/" in rest else "hierfl (root modules)"
        elif "heapq" in func:
            key = "kernel"  # the event queue's and the flow network's heaps
        else:
            key = "built-ins and standard library"
        by[key] = by.get(key, 0.0) + own
    total = sum(by.values())
    print(f"timing-only AHFL, 10,000 devices, {args.window:g} virtual s: {run.summary['totals']['train_jobs']:,} jobs, "
          f"{run.summary.get('events'):,} events; profiled time {total:.2f} s\n")
    print("| package | own time (s) | share |")
    print("|---|---|---|")
    for key, own in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"| {key} | {own:.2f} | {100 * own / total:.1f} % |")
    share = by.get("kernel", 0.0) / total
    print(f"\nkernel share {100 * share:.1f} %: an infinitely fast kernel gives at most {1 / (1 - share):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
