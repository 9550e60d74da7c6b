"""Before/after of the scale benchmark's part (b) in one invocation (scale, driver side).

    .venv/bin/python analysis/bench/scale_ab.py --before /work/main --after . [--window 10] [--runs 3]

AHFL over 10,000 devices and 20 edge servers (scenarios/scale_ahfl_10k.yaml), timing only and with
training, over ``--window`` virtual seconds. Each checkout runs in its own interpreter (its own
``.venv``), the two interleaved, ``--runs`` times each; the fastest run of each counts (the least
disturbed on a shared machine). Prints jobs/s and events/s (wall after start-up, as
``analysis/bench/scale.py`` measures them) and the load average before every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import CHILD as _SCALE_CHILD  # noqa: E402  (analysis/bench/scale.py's measuring child)

# the same child, plus the CPU seconds of run_scenario (start-up included): a figure that a loaded,
# shared machine disturbs far less than wall time
CHILD = _SCALE_CHILD.replace("t1 = time.perf_counter()\n", "t1 = time.perf_counter()\nc1 = time.process_time()\n").replace(
    "t2 = time.perf_counter()\n", "t2 = time.perf_counter()\nc2 = time.process_time()\n").replace(
    '"jobs": s["totals"]["train_jobs"],', '"jobs": s["totals"]["train_jobs"], "run_cpu_s": c2 - c1,')
assert "run_cpu_s" in CHILD and "c1 = " in CHILD and "c2 = " in CHILD


def measure(repo: Path, trainer: str, window: float) -> dict:
    """One (b) run of ``repo``'s code in ``repo``'s venv."""
    arg = {"path": str(repo / "scenarios" / "scale_ahfl_10k.yaml"),
           "set": [f"stop.virtual_time_s={window}", "evaluation.every_s=null", f"training.trainer={trainer}"]}
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", CHILD, "file", json.dumps(arg), out, "0"],
                             capture_output=True, text=True, cwd=repo, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{repo}: measurement failed:\n{res.stderr[-2000:]}")
    r = json.loads(res.stdout.strip().splitlines()[-1])
    r["load"] = os.getloadavg()[0]
    return r


def main(argv: list[str]) -> int:
    """Print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path("."))
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="none,sgd", help="trainers to measure (none = timing only)")
    args = ap.parse_args(argv)
    repos = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"(b) AHFL, 10,000 devices, 20 edge servers, {args.window:g} virtual s; fastest of {args.runs}, interleaved")
    print("| mode | code | jobs | events | wall after start-up (s) | jobs/s | events/s | "
          "jobs per CPU-s of the whole run (fastest) | load (1 min) of each run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for trainer in args.modes.split(","):
        runs: dict[str, list[dict]] = {k: [] for k in repos}
        for _ in range(args.runs):
            for name, repo in repos.items():
                runs[name].append(measure(repo, trainer, args.window))
        for name, rs in runs.items():
            best = min(rs, key=lambda r: r["rounds_s"])
            s = best["rounds_s"]
            loads = ", ".join(f"{r['load']:.1f}" for r in rs)
            mode = "timing only" if trainer == "none" else f"training ({trainer})"
            cpu = min(r["run_cpu_s"] for r in rs)
            print(f"| {mode} | {name} | {best['jobs']:,} | {best['events']:,} | {s:.2f} | {best['jobs'] / s:,.0f} | "
                  f"{best['events'] / s:,.0f} | {best['jobs'] / cpu:,.0f} | {loads} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
