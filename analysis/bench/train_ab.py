"""(b) with training, before and after, side by side in one invocation (scale).

    .venv/bin/python analysis/bench/train_ab.py --before /path/to/other/checkout [--rounds 3] [--window 10]

Runs ``scenarios/scale_ahfl_10k.yaml`` with training for ``--window`` virtual seconds, each mode
(exact path and ``runtime.fast_path``, local executor and Ray with 2 device hosts) once per round
with the other checkout's code (its own ``.venv``) and once with this one's, interleaved, and
prints the fastest of the rounds for each (jobs per second of wall after start-up), with the
machine's load (``uptime``) before and after: the machine may be shared.
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
from scale import CHILD, ROOT  # noqa: E402

MODES = {
    "local, exact": [],
    "local, fast_path": ["runtime.fast_path=true"],
    "Ray 2 hosts, exact": ["runtime.executor=ray", "runtime.workers=2"],
    "Ray 2 hosts, fast_path": ["runtime.executor=ray", "runtime.workers=2", "runtime.fast_path=true"],
}


def run(repo: Path, sets: list[str]) -> dict:
    """One measurement with ``repo``'s code and virtual environment."""
    arg = {"path": str(repo / "scenarios" / "scale_ahfl_10k.yaml"), "set": sets}
    with tempfile.TemporaryDirectory() as out:
        res = subprocess.run([str(repo / ".venv" / "bin" / "python"), "-c", CHILD, "file", json.dumps(arg), out, "0"],
                             capture_output=True, text=True, cwd=repo, check=False)
    if res.returncode != 0:
        raise SystemExit(f"measurement failed ({repo}):\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    """Print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="the checkout to compare with (has its own .venv)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--modes", default=";".join(MODES), help="a subset of (separated by ;): " + "; ".join(MODES))
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(";")]
    base = [f"stop.virtual_time_s={args.window:g}", "evaluation.every_s=null", "training.trainer=sgd"]
    sides = {"before": args.before.resolve(), "after": ROOT}
    print("load before:", os.popen("uptime").read().strip())
    best: dict[tuple[str, str], dict] = {}
    for _ in range(args.rounds):
        for mode in modes:
            for side, repo in sides.items():
                r = run(repo, base + MODES[mode])
                r["rate"] = r["jobs"] / r["rounds_s"]
                if (mode, side) not in best or r["rate"] > best[(mode, side)]["rate"]:
                    best[(mode, side)] = r
    print("load after:", os.popen("uptime").read().strip())
    print(f"\n| mode ({args.window:g} virtual s, fastest of {args.rounds}) | jobs | before: jobs/s | after: jobs/s | "
          "after / before |")
    print("|---|---|---|---|---|")
    for mode in modes:
        b, a = best[(mode, "before")], best[(mode, "after")]
        print(f"| {mode} | {a['jobs']:,} | {b['rate']:,.0f} | {a['rate']:,.0f} | {a['rate'] / b['rate']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
