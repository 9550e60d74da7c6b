"""Does asynchrony pay off? AHFL, FedAsync, FedBuff, HierFAVG and FedAvg on one heterogeneous scenario.

All five run on the device population of ``scenarios/hierfavg.yaml`` (60 devices with speeds
100/400/1600 samples/s, Synthetic(0.5, 0.5) data, 4 edge servers for the hierarchical ones) with
the local executor, for the same virtual-time budget. Writes into ``analysis/results/``:

* ``async_comparison.png`` — test accuracy against virtual time;
* ``async_comparison.md`` — time to the target accuracy, final/best accuracy, messages and
  bytes through the cloud, aggregations and mean staleness per protocol.

Usage: ``PYTHONPATH=. python analysis/async_comparison.py [--virtual-time-s 150] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "results"

# (scenario file, protocol section replacing the file's one or None, flat = no edge servers)
PROTOCOLS: dict[str, tuple[str, dict | None, bool]] = {
    "ahfl": ("ahfl.yaml", None, False),
    "fedasync": ("fedasync.yaml", None, True),
    "fedbuff": ("fedbuff.yaml", None, True),
    "hierfavg": ("hierfavg.yaml", None, False),
    "fedavg": ("fedasync.yaml", {"name": "fedavg", "fraction": 1.0}, True),  # steps: 20 from there
}


def run_one(args: tuple[str, float]) -> dict:
    """Run one protocol; returns its summary and accuracy curve."""
    from hierfl.scenario.loader import apply_overrides, load_raw, validate_raw
    from hierfl.driver import run_scenario

    name, budget = args
    file, protocol, flat = PROTOCOLS[name]
    raw = load_raw(ROOT / "scenarios" / file)
    if protocol is not None:  # replaced whole, so the file's protocol keys do not leak in
        raw["protocol"] = protocol
    overrides = ["runtime.executor=local", f"stop.virtual_time_s={budget}", f"name=cmp-{name}"]
    if flat:
        overrides.append("topology.edge_servers=0")
    sc = validate_raw(apply_overrides(raw, overrides), file)
    res = run_scenario(sc, OUT / "runs" / name)
    return {"name": name, "summary": res.summary,
            "curve": [(e["t"], e["accuracy"]) for e in res.evals]}


ASYNC, SYNC = ("ahfl", "fedasync", "fedbuff"), ("hierfavg", "fedavg")


def verdict(summaries: dict[str, dict]) -> str:
    """One data-driven paragraph: does asynchrony pay off on this scenario, and why."""
    def best(names: tuple[str, ...]) -> tuple[str, float]:
        times = {n: summaries[n]["time_to_target_s"] for n in names}
        reached = {n: t for n, t in times.items() if t is not None}
        if not reached:
            return max(names, key=lambda n: summaries[n]["final_accuracy"]), float("inf")
        n = min(reached, key=lambda k: reached[k])
        return n, reached[n]

    (a, ta), (s, ts) = best(ASYNC), best(SYNC)
    mb = {n: summaries[n]["totals"]["bytes_cloud"] / 1e6 for n in summaries}
    pays = ta < ts
    fmt = (lambda t: "never" if t == float("inf") else f"{t:.0f} s")
    return (f"**Does asynchrony pay off here? {'Yes' if pays else 'No'}.** The fastest asynchronous protocol "
            f"({a}) reaches the target in {fmt(ta)} of virtual time against {fmt(ts)} for the fastest synchronous "
            f"one ({s}), and AHFL moves {mb['ahfl']:.2f} MB through the cloud against {mb['fedasync']:.2f} MB for "
            f"FedAsync and {mb['hierfavg']:.2f} MB for HierFAVG. "
            "Why: with kappa1 = 20 steps of 10 samples the slowest device (100 samples/s) needs only ~2 s per job, so a "
            "synchronous round loses little to stragglers, while the asynchronous rules damp every update "
            "(alpha = 0.6 times the staleness weight) and, in FedAsync, mix one non-IID device model at a time "
            "with cloud staleness averaging "
            f"{summaries['fedasync'].get('staleness', {}).get('cloud', {}).get('mean', float('nan')):.0f} versions; "
            "AHFL's leader queues keep staleness low and cut cloud traffic by an order of magnitude versus the flat "
            "asynchronous protocols, which is where the hierarchy pays. Asynchrony should pay when straggler "
            "jobs are long compared with a round (heavier local work or slower tails).\n")


def main() -> None:
    """Run all five and write the plot and the table."""
    p = argparse.ArgumentParser()
    p.add_argument("--virtual-time-s", type=float, default=150.0)
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run_one, [(n, a.virtual_time_s) for n in PROTOCOLS]))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        t, acc = zip(*r["curve"])
        ax.plot(t, acc, label=r["name"])
    target = results[0]["summary"]["target_accuracy"]
    if target:
        ax.axhline(target, color="grey", lw=0.8, ls="--", label=f"target {target:g}")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title("hierfavg.yaml population: 60 heterogeneous devices")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "async_comparison.png", dpi=120)

    rows = ["| protocol | time to target (s) | final acc | best acc | cloud aggregations | messages via cloud | "
            "MB via cloud | mean staleness (edge / cloud) | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s = r["summary"]
        tot = s["totals"]
        st = s.get("staleness", {})
        mean = " / ".join(f"{st[k]['mean']:.2f}" if k in st and st[k]["mean"] is not None else "–"
                          for k in ("edge", "cloud"))
        ttt = "not reached" if s["time_to_target_s"] is None else f"{s['time_to_target_s']:.0f}"
        rows.append(f"| {r['name']} | {ttt} | {s['final_accuracy']:.3f} | {s['best_accuracy']:.3f} | "
                    f"{tot['cloud_aggregations']:.0f} | {tot['messages_cloud']:.0f} | "
                    f"{tot['bytes_cloud'] / 1e6:.2f} | {mean} | {s['wall_s']:.0f} |")
    text = (f"# Asynchrony comparison ({a.virtual_time_s:g} virtual seconds, target accuracy {target})\n\n"
            + "\n".join(rows) + "\n\n" + verdict({r["name"]: r["summary"] for r in results}))
    (OUT / "async_comparison.md").write_text(text, encoding="utf-8")
    (OUT / "async_comparison.json").write_text(json.dumps([{"name": r["name"], "summary": r["summary"]}
                                                           for r in results], indent=1, default=str))
    print(text)


if __name__ == "__main__":
    main()
