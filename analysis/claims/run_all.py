"""Run every claim of ``analysis/claims/`` and rebuild ``analysis/results/claims.md`` (``make claims``).

    .venv/bin/python analysis/claims/run_all.py              # all claims
    .venv/bin/python analysis/claims/run_all.py fedprox ...  # only these (folder names)
    .venv/bin/python analysis/claims/run_all.py --resume     # finish interrupted sweeps

Each claim runs in its own process (one failure does not stop the others); each prints its wall
time, and the total is printed at the end. The set is sized to fit within an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def claim_dirs(names: list[str]) -> list[Path]:
    """Folders with a claim.py, all or the named ones (an unknown name is an error)."""
    found = {p.parent.name: p.parent for p in sorted(HERE.glob("*/claim.py"))}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(f"unknown claim(s): {', '.join(unknown)}; known: {', '.join(found)}")
    return [found[n] for n in names] if names else list(found.values())


def main() -> int:
    ap = argparse.ArgumentParser(description="run the claims scripts, then the table")
    ap.add_argument("claims", nargs="*", help="claim folder names (default: all)")
    ap.add_argument("--resume", action="store_true", help="finish interrupted sweeps")
    args = ap.parse_args()
    t0 = time.perf_counter()
    failed = []
    for d in claim_dirs(args.claims):
        t = time.perf_counter()
        print(f"== {d.name}", flush=True)
        rc = subprocess.call([sys.executable, str(d / "claim.py")] + (["--resume"] if args.resume else []))
        print(f"== {d.name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {time.perf_counter() - t:.0f} s",
              flush=True)
        if rc:
            failed.append(d.name)
    subprocess.call([sys.executable, str(HERE / "table.py")])
    print(f"claims: {time.perf_counter() - t0:.0f} s in all" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
