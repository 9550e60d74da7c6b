"""Shared plumbing of the claims scripts (claims reproduction).

Each claim lives in ``analysis/claims/<id>/``: the scenario and sweep files of the paper's setting
(every setting cited, our own choices tagged [D]) and a ``claim.py`` that

1. runs its sweep(s) with :func:`run_sweep` (Ray Tune through ``hierfl.api``; ``--resume``
   finishes an interrupted sweep, a finished one is only re-read),
2. reduces the trials to the claim's figure per seed and then to mean ± 95 % CI over seeds
   (:func:`mean_ci`, Student t; paired per-seed ratios with :func:`paired`),
3. writes ``analysis/results/claims/<id>.json`` with :func:`write_result` and prints its wall time.

``analysis/claims/table.py`` turns those files into ``analysis/results/claims.md``;
``analysis/claims/run_all.py`` (``make claims``) runs every claim and then the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "analysis" / "claims"
RESULTS = ROOT / "analysis" / "results" / "claims"
RUNS = ROOT / "runs" / "claims"

AGREES = ("yes", "no", "partly", "n/a")

if str(ROOT) not in sys.path:  # scripts run as files: make `hierfl` importable from a checkout
    sys.path.insert(0, str(ROOT))

from hierfl.sweep.aggregate import SweepRun, sweep_runs  # noqa: E402


@dataclass
class ClaimResult:
    """One row of analysis/results/claims.md, plus the numbers behind it.

    ``paper`` and ``ours`` are short human-readable figures (``ours`` as mean ± 95 % CI over
    ``seeds``); ``agrees`` is one of yes / no / partly / n/a (the direction of the claim);
    ``notes`` is one or two sentences for the table; ``details`` is markdown printed under the
    table (setting, sources, what was investigated when the claim does not hold).
    """

    id: str
    claim: str
    source: str
    paper: str
    ours: str
    agrees: str
    scenario: list[str]
    notes: str
    seeds: list[int]
    values: dict[str, Any] = field(default_factory=dict)
    details: str = ""
    order: int = 100
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.agrees not in AGREES:
            raise ValueError(f"agrees must be one of {AGREES}, not {self.agrees!r}")


def cli(claim_id: str, doc: str | None = None) -> argparse.Namespace:
    """The command line every claim script takes (``--out``, ``--resume``, ``--address``)."""
    ap = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else claim_id)
    ap.add_argument("--out", type=Path, default=RUNS / claim_id,
                    help=f"folder for the claim's sweep directories (default runs/claims/{claim_id})")
    ap.add_argument("--resume", action="store_true",
                    help="finish interrupted sweeps in --out instead of starting them anew")
    ap.add_argument("--address", default=None, help="Ray cluster to run the trials on (default: local)")
    ap.add_argument("--no-write", action="store_true", help="print the result, do not write results/claims/")
    args = ap.parse_args()
    args.claim_id = claim_id
    args.t0 = time.perf_counter()
    return args


def run_sweep(sweep_file: str | Path, args: argparse.Namespace, name: str | None = None) -> list[SweepRun]:
    """Run ``sweep_file`` into ``args.out/<name>`` (default: the file's stem) and return its trials.

    A sweep directory that already holds a finished sweep of the same file is re-read when
    ``--resume`` is given (Tune skips finished trials); otherwise it is replaced.
    """
    from hierfl.api import sweep

    sweep_file = Path(sweep_file)
    out = Path(args.out) / (name or sweep_file.stem)
    t0 = time.perf_counter()
    if args.resume and (out / "sweep.json").is_file():
        sweep(resume=out, address=args.address, quiet=True)
    else:
        if out.exists():
            import shutil

            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep(sweep_file, out, address=args.address, quiet=True)
    runs = sweep_runs(out)
    bad = [r.id for r in runs if r.summary.get("status") not in ("completed",)]
    print(f"  {sweep_file.relative_to(ROOT) if sweep_file.is_absolute() else sweep_file}: {len(runs)} trials "
          f"in {time.perf_counter() - t0:.1f} s" + (f"; NOT completed: {', '.join(bad)}" if bad else ""),
          flush=True)
    return runs


def metrics(run: SweepRun) -> list[dict[str, Any]]:
    """The run's ``metrics.jsonl`` lines."""
    with open(run.dir / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def evals(run: SweepRun) -> list[dict[str, Any]]:
    """The run's evaluation lines (``event == "eval"``) that carry an accuracy, in time order."""
    return [m for m in metrics(run) if m.get("event") == "eval" and m.get("accuracy") is not None]


def first_reaching(run: SweepRun, target: float, metric: str = "accuracy") -> dict[str, Any] | None:
    """The first evaluation line whose ``metric`` is at least ``target`` (None: never reached).

    Its counters (``device_updates``, ``train_jobs``, ``bytes_cloud``, ``compute_s`` ...) are the
    cost to the target; ``t`` is the virtual time to it.
    """
    for m in evals(run):
        if m.get(metric) is not None and m[metric] >= target:
            return m
    return None


def counter_at(run: SweepRun, target: float, key: str) -> float | None:
    """The counter ``key`` (``t``: the virtual time) on the first evaluation line at or above ``target``
    accuracy (None: never reached)."""
    m = first_reaching(run, target)
    return None if m is None else float(m[key])


def arms(runs: Iterable[SweepRun], names: Sequence[str]) -> dict[Any, list[SweepRun]]:
    """A sweep's trials by scenario (its arms); stops with a clear message if one of ``names`` has none."""
    groups = by_group(runs, changed("scenario"))
    missing = [a for a in names if a not in groups]
    if missing:
        raise SystemExit(f"sweep has no trials for {missing}; groups: {list(groups)}")
    return groups


def by_group(runs: Iterable[SweepRun], key: Callable[[SweepRun], Any]) -> dict[Any, list[SweepRun]]:
    """Runs grouped by ``key(run)`` in first-seen order, each group sorted by seed."""
    groups: dict[Any, list[SweepRun]] = {}
    for r in runs:
        groups.setdefault(key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r.seed) for k, v in groups.items()}


def changed(name: str) -> Callable[[SweepRun], Any]:
    """A grouping key: the trial's value of the changed sweep key ``name`` (``scenario`` for the base)."""
    def key(r: SweepRun) -> Any:
        v = r.changed.get(name)
        return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
    return key


def mean_ci(values: Sequence[float | None]) -> tuple[float, float, int]:
    """Mean, half-width of the 95 % Student-t interval, and n, over the finite values.

    ``None``/NaN/inf (e.g. a run that never reached its target) are left out; callers report how
    many were left out. Half-width is NaN when fewer than 2 values remain.
    """
    from scipy import stats

    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(xs) / n
    if n < 2:
        return mean, math.nan, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)), n


def paired(a: Sequence[SweepRun], b: Sequence[SweepRun], f: Callable[[SweepRun], float | None],
           op: Callable[[float, float], float] = lambda x, y: x / y) -> list[float | None]:
    """``op(f(a_s), f(b_s))`` per seed s present in both (None where either is None)."""
    fb = {r.seed: f(r) for r in b}
    out: list[float | None] = []
    for r in a:
        if r.seed not in fb:
            continue
        x, y = f(r), fb[r.seed]
        try:
            out.append(None if x is None or y is None else op(x, y))
        except ZeroDivisionError:
            out.append(None)
    return out


def fmt(values: Sequence[float | None], digits: int = 2, unit: str = "", scale: float = 1.0) -> str:
    """``mean ± ci unit (n=…)`` over the finite values; says how many runs gave none."""
    mean, half, n = mean_ci([None if v is None else v * scale for v in values])
    missing = len(values) - n
    if n == 0:
        return f"none of {len(values)} runs"
    text = f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if math.isfinite(half) else "") + unit
    text += f" (n={n}" + (f"; {missing} never" if missing else "") + ")"
    return text


def write_result(result: ClaimResult, args: argparse.Namespace) -> Path | None:
    """Write ``analysis/results/claims/<id>.json`` (unless ``--no-write``) and print the row."""
    result.wall_s = round(time.perf_counter() - args.t0, 1)
    print(f"[{result.id}] {result.claim}\n  paper: {result.paper}\n  ours:  {result.ours}\n"
          f"  agrees: {result.agrees}; {result.notes}\n  wall time: {result.wall_s:.1f} s", flush=True)
    if args.no_write:
        return None
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{result.id}.json"
    path.write_text(json.dumps(asdict(result), indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8")
    return path


def rel(path: str | Path) -> str:
    """``path`` relative to the repository root, for the table."""
    return str(Path(path).resolve().relative_to(ROOT))


def cost_line(runs: Sequence[SweepRun], args: argparse.Namespace) -> str:
    """The details' last line: the trials, their summed wall time, the script's wall time and the load at its end
    (the figures a reader needs to judge how the claim's timings were measured)."""
    import os

    return (f"Cost: {len(runs)} trials, {trials_wall(runs):.0f} s of trial wall time in all; the script took "
            f"{time.perf_counter() - args.t0:.0f} s wall, 1-min load average {os.getloadavg()[0]:.1f} at its end.")


def trials_wall(runs: Iterable[SweepRun]) -> float:
    """Sum of the trials' own wall times (``summary.json`` ``wall_s``): a claim's cost line."""
    return sum(float(r.summary.get("wall_s") or 0.0) for r in runs)


def sweep_wall(sweep_dir: str | Path) -> float:
    """:func:`trials_wall` of a sweep directory, read from its ``sweep.csv``."""
    import csv

    with open(Path(sweep_dir) / "sweep.csv", encoding="utf-8") as f:
        return sum(float(r["wall_s"]) for r in csv.DictReader(f) if r.get("wall_s"))
