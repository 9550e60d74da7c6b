"""Start-up and memory benchmark, workload W1a (scale, item 5).

W1a: 100 devices × 600 samples of 784 N(0, 1) features labelled by a random linear teacher, MLP
784-200-200-10, SGD lr 0.05, batch 32, one local epoch, FedAvg with 10 devices per round for 10
rounds, Ray executor with ``workers = cores`` (the scenario of ``emulator_overhead.py``).

Each side runs as a whole process, from launch to exit, as a user would run it:

* ``hierfl run w1a.yaml`` (the console script), its process tree sampled every 50 ms;
* a plain single-process, single-thread PyTorch loop doing the same local training and averaging
  (``emulator_overhead.plain_pytorch``), on the same data (built by hierfl's builder).

It prints, per side, the median whole-process wall, and the peak memory of the process tree
(PSS from ``/proc/<pid>/smaps_rollup``: shared pages — libraries, the Ray object store — are
divided among the processes that map them, so the sum is the tree's real footprint; RSS is
shown too, it counts every shared page once per process). For hierfl it adds the start-up
breakdown the run records in ``summary.json`` (``startup``), what the tree held at its peak, by
process, and the steady rounds.

Usage: ``python analysis/bench/startup.py [--repeat 3] [--cores N] [--address ADDR] [--before DIR]``
(``--address auto``: attach to a running cluster, e.g. after ``ray start --head``; the cluster's
own processes are then outside the measured tree; ``--before /work/main``: also run that checkout's
``.venv/bin/hierfl``, interleaved with this one's, run by run, and print before vs after; the
1-minute load average is printed with the numbers, since the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOALS = {"wall_s": 12.0, "pss_mb": 1200.0}


# -- the process tree ---------------------------------------------------------------------------
def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(root: int) -> list[int]:
    """``root`` and all its descendants (Ray's daemons and workers are descendants of the driver)."""
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def role(pid: int, root: int) -> str:
    """A short name for what a process of the tree is."""
    if pid == root:
        return "driver"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = cmd[0].decode(errors="replace")
    if first.startswith("ray::"):
        name = first[5:].split(".")[0].split()[0]
        return f"actor {name}" if name != "IDLE" else "idle worker"
    for arg in cmd[:3]:
        a = arg.decode(errors="replace")
        for key in ("gcs_server", "raylet", "log_monitor.py", "monitor.py", "dashboard.py", "dashboard/agent.py",
                    "runtime_env/agent/main.py", "default_worker.py"):
            if a.endswith(key):
                return key.split("/")[-1].replace(".py", "") if key != "runtime_env/agent/main.py" else "runtime_env_agent"
    return Path(first).name or "?"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in kB (0, 0 if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0
    pss = rss = 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1])
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
    return pss, rss


@dataclass
class Measured:
    """One whole-process run: wall, peak tree memory and what held it."""

    wall_s: float
    pss_mb: float = 0.0
    rss_mb: float = 0.0
    at_peak: dict[str, float] = field(default_factory=dict)  # role -> PSS MB at the PSS peak
    processes: int = 0
    returncode: int = 0
    cpu_s: float = 0.0  # CPU seconds of the whole tree (robust to a busy machine, unlike wall)
    cpu_by_role: dict[str, float] = field(default_factory=dict)


def measure(cmd: list[str], interval_s: float = 0.05) -> Measured:
    """Run ``cmd`` to completion, sampling its process tree's PSS and RSS."""
    err = tempfile.TemporaryFile()  # not a pipe: a chatty child must never block on a full one
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    best = Measured(0.0)
    seen: dict[int, tuple[str, float]] = {}
    while proc.poll() is None:
        pids = tree(proc.pid)
        for pid in pids:
            cpu = cpu_s(pid)
            if cpu > 0:  # the latest name: a worker's title becomes its actor's once it has one
                name = role(pid, proc.pid)
                seen[pid] = (seen[pid][0] if name == "?" and pid in seen else name, cpu)
        per: dict[str, float] = {}
        pss_total = rss_total = 0
        for pid in pids:
            pss, rss = memory_kb(pid)
            pss_total += pss
            rss_total += rss
            name = role(pid, proc.pid)
            per[name] = per.get(name, 0.0) + pss / 1024
        if pss_total / 1024 > best.pss_mb:
            best.pss_mb, best.at_peak = pss_total / 1024, per
        best.rss_mb = max(best.rss_mb, rss_total / 1024)
        time.sleep(interval_s)
    best.wall_s = time.perf_counter() - t0
    best.returncode = proc.returncode
    best.processes = len(seen)
    for name, cpu in seen.values():
        best.cpu_by_role[name] = best.cpu_by_role.get(name, 0.0) + cpu
    best.cpu_s = sum(best.cpu_by_role.values())
    if proc.returncode != 0:
        err.seek(0)
        sys.stderr.write(err.read().decode(errors="replace")[-4000:])
    err.close()
    return best


# -- the two sides ------------------------------------------------------------------------------
def w1a(cores: int) -> dict:
    """W1a as a scenario (``emulator_overhead.scenario`` with 10 % of the devices, 10 rounds)."""
    sys.path.insert(0, str(HERE))
    from emulator_overhead import scenario

    sc = scenario(0.1, 10, cores)
    sc["name"] = "w1a"
    return sc


def plain_main(path: str) -> None:
    """Child process of the plain side: build the data with hierfl's builder, train with plain PyTorch."""
    sys.path.insert(0, str(HERE))
    from emulator_overhead import plain_pytorch

    from hierfl.assemble import build
    from hierfl.scenario.loader import load_scenario

    built = build(load_scenario(path))
    plain_pytorch([(0.1, 10)], built, seed=1)


def main() -> None:
    """Run both sides (or three, with ``--before``) and print the comparison."""
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (medians reported)")
    ap.add_argument("--address", help="attach hierfl to this Ray cluster (e.g. auto)")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain PyTorch side")
    ap.add_argument("--before", help="another checkout (with its own .venv) to run interleaved with this one, "
                                     "e.g. /work/main: before vs after in one invocation")
    ap.add_argument("--plain-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_child:
        plain_main(args.plain_child)
        return
    sides = {"hierfl": str(Path(sys.executable).with_name("hierfl"))}
    if args.before:
        sides = {"before": str(Path(args.before).resolve() / ".venv" / "bin" / "hierfl"), "after": sides["hierfl"]}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        scen = Path(tmp) / "w1a.yaml"
        scen.write_text(yaml.safe_dump(w1a(args.cores)))
        runs: dict[str, list[tuple[Measured, dict]]] = {name: [] for name in sides}
        plain: list[Measured] = []
        for rep in range(args.repeat):  # interleaved: a busy spell of the shared machine hits every side
            for name, binary in sides.items():
                loads.append(os.getloadavg()[0])
                out = Path(tmp) / f"{name}{rep}"
                cmd = [binary, "run", str(scen), "--out", str(out), "-q"]
                if args.address:
                    cmd += ["--address", args.address]
                for attempt in (1, 2, 3):  # on an overloaded machine Ray's daemons can miss their deadline
                    m = measure(cmd + ["--force"])
                    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
                    if m.returncode == 0 and summary.get("status") == "completed":
                        break
                    print(f"{name}: hierfl run failed (exit {m.returncode}), attempt {attempt}", file=sys.stderr)
                else:
                    raise SystemExit(f"{name}: hierfl run failed three times")
                runs[name].append((m, summary))
            if not args.no_plain:
                loads.append(os.getloadavg()[0])
                plain.append(measure([sys.executable, __file__, "--plain-child", str(scen)]))
        loads.append(os.getloadavg()[0])
    if len(sides) == 1:
        report(runs["hierfl"], plain, args)
    else:
        compare(runs, plain, args)
    print(f"\n1-minute load average before each run and at the end: {', '.join(f'{x:.1f}' for x in loads)} "
          f"(median {_med(loads):.1f}; {os.cpu_count()} cores)")


def compare(runs: dict[str, list[tuple[Measured, dict]]], plain: list[Measured], args: argparse.Namespace) -> None:
    """Before vs after (and the plain loop), medians of the interleaved runs, then each side's detail."""
    where = f"attached to {args.address}" if args.address else "own Ray instance"
    n = len(next(iter(runs.values())))
    print(f"W1a: 100 devices x 600 samples, MLP 784-200-200-10, FedAvg 10 rounds of 10; Ray, {args.cores} workers, "
          f"{where}; {n} interleaved runs per side, medians (min)")
    names = list(runs)
    print()
    print("| W1a | " + " | ".join(names) + " | plain loop | goal |")
    print("|---|" + "---|" * (len(names) + 2))

    def cell(values: list[float], fmt: str) -> str:
        return f"{_med(values):{fmt}} ({min(values):{fmt}})" if values else ""

    rows = [("whole-process wall (s)", lambda m, s: m.wall_s, ".1f", f"<= {GOALS['wall_s']:.0f}"),
            ("peak tree PSS (MB)", lambda m, s: m.pss_mb, ".0f", f"<= {GOALS['pss_mb']:.0f}"),
            ("peak tree RSS (MB)", lambda m, s: m.rss_mb, ".0f", ""),
            ("CPU seconds of the tree", lambda m, s: m.cpu_s, ".1f", ""),
            ("rounds: wall_s - startup_s (s)", lambda m, s: s["wall_s"] - s["startup_s"], ".2f", "")]
    for label, get, fmt, goal in rows:
        cells = [cell([get(m, s) for m, s in runs[name]], fmt) for name in names]
        plain_cell = cell([get(p, {}) for p in plain], fmt) if plain and "rounds" not in label else ""
        print(f"| {label} | " + " | ".join(cells) + f" | {plain_cell} | {goal} |")
    print("| processes in the tree | " + " | ".join(str(runs[name][0][0].processes) for name in names)
          + f" | {plain[0].processes if plain else ''} | |")
    for name in names:
        print(f"\n== {name}: walls {', '.join(f'{m.wall_s:.1f}' for m, _ in runs[name])}")
        _detail(runs[name])


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _detail(runs: list[tuple[Measured, dict]]) -> None:
    """The start-up steps, the memory at the PSS peak and the CPU seconds, by process."""
    phases: dict[str, list[float]] = {}
    for _, s in runs:
        for k, v in s.get("startup", {}).items():
            if isinstance(v, (int, float)):
                phases.setdefault(k, []).append(v)
    if phases:
        print("start-up, as the run records it (summary.json 'startup'; seconds since launch, medians):")
        for k, v in phases.items():
            print(f"  {k:28s} {_med(v):6.2f}")
    m = max((m for m, _ in runs), key=lambda x: x.pss_mb)
    print(f"at the PSS peak of the largest run ({m.pss_mb:.0f} MB), by process (MB):")
    for name, mb in sorted(m.at_peak.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {mb:7.0f}")
    print("CPU seconds by process (median run):")
    mid = sorted(runs, key=lambda r: r[0].cpu_s)[len(runs) // 2][0]
    for name, cpu in sorted(mid.cpu_by_role.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {cpu:7.1f}")


def report(runs: list[tuple[Measured, dict]], plain: list[Measured], args: argparse.Namespace) -> None:
    """Print the table, the start-up breakdown and the memory at the peak."""
    where = f"attached to {args.address}" if args.address else "own Ray instance"
    print(f"W1a: 100 devices x 600 samples, MLP 784-200-200-10, FedAvg 10 rounds of 10; Ray, {args.cores} workers, "
          f"{where}; {len(runs)} runs each, medians")
    walls = [m.wall_s for m, _ in runs]
    steady = [s["wall_s"] - s["startup_s"] for _, s in runs]
    first_job = [max(s.get("startup", {}).get(k, float("nan")) for k in ("hosts_warm", "cloud_warm")) for _, s in runs]
    print()
    print("| | hierfl | plain loop | goal |")
    print("|---|---|---|---|")
    print(f"| whole-process wall (s), median (min) | {_med(walls):.1f} ({min(walls):.1f}) | "
          f"{_med([p.wall_s for p in plain]):.1f} ({min([p.wall_s for p in plain], default=float('nan')):.1f}) | "
          f"<= {GOALS['wall_s']:.0f} |")
    print(f"| launch to hosts and cloud warm (s) | {_med(first_job):.1f} | | |")
    print(f"| rounds: run's wall_s - startup_s (s) | {_med(steady):.1f} | | |")
    print(f"| peak tree PSS (MB) | {_med([m.pss_mb for m, _ in runs]):.0f} | "
          f"{_med([p.pss_mb for p in plain]):.0f} | <= {GOALS['pss_mb']:.0f} |")
    print(f"| peak tree RSS (MB) | {_med([m.rss_mb for m, _ in runs]):.0f} | "
          f"{_med([p.rss_mb for p in plain]):.0f} | |")
    print(f"| CPU seconds of the tree | {_med([m.cpu_s for m, _ in runs]):.1f} | "
          f"{_med([p.cpu_s for p in plain]):.1f} | |")
    print(f"| processes in the tree | {runs[0][0].processes} | {plain[0].processes if plain else ''} | |")
    print(f"\nwalls: hierfl {', '.join(f'{w:.1f}' for w in walls)}; "
          f"plain {', '.join(f'{p.wall_s:.1f}' for p in plain)}")
    print()
    _detail(runs)


if __name__ == "__main__":
    main()
