"""Per-event cost of the two core world models against the population (the scale goals).

Prints, side by side in one run, microseconds per event of

* the **network** model (:class:`hierfl.kernel.network.FlowNetwork`): N flows in flight on private
  device links (long downloads), while a stream of 2,000 short transfers on other devices starts
  and finishes — each event is what the emulator does for a transfer (``add`` + ``next_finish``,
  then at its finish ``advance`` + ``next_finish`` + ``remove`` + ``next_finish``);
* the **availability** model: for each of 2,000 events, the questions a driver asks — "is the
  population trivially available" (every event, in ``send`` and job start), "is this device up,
  when does it go down" — on N always-on devices of which the last 1 % leave for a while;
* the **online index** (:class:`hierfl.core.dynamics.OnlineIndex`) answering "how many are online
  now / when is one back" over the whole population as time moves, against the plain scan over
  every device a driver does without it,

at N = 1k, 10k, 100k, **before** (the algorithms of main before the scale work, kept below as
:class:`LegacyFlowNetwork` and :class:`LegacyAvailability` in ``tests/oracles.py``, where the
tests use them as references) and **after**.

Usage: ``python analysis/bench/core_scale.py [--sizes 1000 10000 100000] [--events 2000]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Hashable
from pathlib import Path

from hierfl.core.dynamics import Availability, IntervalTimeline, MarkovTimeline, OnlineIndex
from hierfl.kernel.network import FlowNetwork
from hierfl.core.rng import stream

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.oracles
from tests.oracles import LegacyAvailability, LegacyFlowNetwork  # noqa: E402


# -- workloads -----------------------------------------------------------------------------------------
def network_workload(cls: type, n: int, events: int) -> float:
    """µs per event: ``n`` long flows in flight on private links, then ``events`` short transfers."""
    cap: dict[Hashable, float] = {("up", d): 1.0 + (d % 7) for d in range(n + events)}
    cap[("cloud_in",)] = math.inf
    net = cls(cap, contention=True)
    for d in range(n):                       # long-running background flows (never finish here)
        net.add(0.0, d, [("up", d), ("cloud_in",)], 1e9)
    net.next_finish()
    t, fid, pending = 0.0, n, []             # short transfers: one starts every 0.01 s, each lasts ~0.05 s
    t0 = time.perf_counter()
    count = 0
    for k in range(events):
        t += 0.01
        while pending and net.next_finish()[0] <= t:
            when, ids = net.next_finish()
            net.advance(when)
            for i in ids:
                net.remove(when, i)
            pending = [p for p in pending if p not in ids]
            count += 1
        net.add(t, fid, [("up", n + k), ("cloud_in",)], 0.05 * cap[("up", n + k)])
        net.next_finish()
        pending.append(fid)
        fid += 1
        count += 1
    return (time.perf_counter() - t0) / count * 1e6


def availability_workload(cls: type, n: int, events: int) -> float:
    """µs per event: the driver's per-event questions (``trivial``, ``is_up``/``next_down`` of one device)
    on an always-on population where the last 1 % of devices leave for a while (``leave`` events)."""
    base: list[IntervalTimeline | MarkovTimeline | None] = [None] * n
    away = [[(100.0 + d % 50, 150.0 + d % 50)] if d >= n - n // 100 else [] for d in range(n)]
    avail = cls(base, away)
    t0 = time.perf_counter()
    for k in range(events):
        t, d = 0.5 * k, (k * 7919) % n
        if not avail.trivial and avail.is_up(d, t):
            avail.next_down(d, t)
        elif not avail.trivial:
            avail.next_up(d, t)
    return (time.perf_counter() - t0) / events * 1e6


def online_workload(indexed: bool, n: int, events: int) -> tuple[float, float]:
    """(µs per event, state changes per event): "how many are online, when is one back" over all
    ``n`` Markov devices (mean up 600 s, down 200 s) as time moves 50 ms per event. The index's
    work follows the state changes, about n / 8,000 per event here."""
    base = [MarkovTimeline(600.0, 200.0, stream(1, "availability", d)) for d in range(n)]
    avail = Availability(base)
    index = OnlineIndex(avail, range(n)) if indexed else None
    changes = 0
    t0 = time.perf_counter()
    for k in range(events):
        t = 0.05 * k
        if index is not None:
            changes += len(index.advance(t))
            _ = index.count_online, index.next_online()
        else:
            up = [d for d in range(n) if avail.is_up(d, t)]
            _ = len(up), (t if up else min(avail.next_up(d, t) for d in range(n)))
    return (time.perf_counter() - t0) / events * 1e6, changes / events


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--events", type=int, default=2000)
    args = ap.parse_args(argv)
    rows = []
    for n in args.sizes:
        # the scans cost O(N) per event: fewer events keep "before" at 100k within a minute
        ev_slow = max(50, min(args.events, args.events * 1000 // n))
        scan, _ = online_workload(False, n, max(5, ev_slow // 20))
        idx, changes = online_workload(True, n, args.events)
        rows.append((n,
                     network_workload(LegacyFlowNetwork, n, ev_slow), network_workload(FlowNetwork, n, args.events),
                     availability_workload(LegacyAvailability, n, ev_slow),
                     availability_workload(Availability, n, args.events),
                     scan, idx, idx / changes if changes else math.nan))
        print(f"N = {n} done", flush=True)
    print("µs per event (before = main before the scale work, after = this tree)")
    print(f"{'N':>8} | {'network before':>14} {'after':>7} | {'availability before':>19} {'after':>7} | "
          f"{'online: scan':>12} {'index':>7} {'index per change':>16}")
    for n, nb, na, ab, aa, ob, oa, oc in rows:
        print(f"{n:>8} | {nb:>14.1f} {na:>7.1f} | {ab:>19.1f} {aa:>7.2f} | {ob:>12.1f} {oa:>7.1f} {oc:>16.1f}")


if __name__ == "__main__":
    main()
