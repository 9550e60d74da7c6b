"""Byzantine robustness study (Byzantine robustness): every aggregation rule × every device behaviour, at 0/10/20/30 %
Byzantine devices, flat (FedAvg) and hierarchical (HierFAVG with the rule at the edge, the cloud or both).

Each run is tiny so the whole grid runs in minutes: 50 devices, Blobs (10 features, 5 classes,
2 500 samples, Dirichlet α = 1 split), logistic regression, 10 cloud rounds, the local executor.
Flat: FedAvg with C = 0.4 (m = 20 updates per round). Hierarchical: 5 edge servers × 10 devices,
κ1 = 10 steps, κ2 = 1; the edge tier aggregates m = 10, the cloud m = 5 edge models. Attackers are
a seeded sample (``select: {fraction: p}``) and misbehave from t = 0.

Rule parameters follow each tier's m: the assumed number of Byzantine inputs is
``f = min(max(1, ⌈0.3 m⌉), ⌊(m − 3)/2⌋)`` (Krum's condition 2f + 2 < m); ``meamed q = f``,
``trimmed_mean β = 0.3``, ``multi_krum`` averages m − f, ``zeno`` drops b = f (cloud only: at the
edge it is not run), ``norm_clip`` bounds each update at 0.2 (about the median honest update
norm in this setting) and then averages.

Writes ``analysis/results/robust_comparison.{json,md,png}``.

Usage: ``PYTHONPATH=. python analysis/robust_comparison.py [--jobs 2] [--rounds 10]
[--hier-fractions 0,0.2]`` (the hierarchical grid defaults to 0 and 20 % to keep the study short;
``--hier-fractions 0,0.1,0.2,0.3`` runs all of it).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "analysis" / "results"

RULES = ["mean", "geomed", "marmed", "meamed", "trimmed_mean", "krum", "multi_krum", "norm_clip", "zeno"]
ATTACKS: dict[str, dict[str, Any]] = {
    "sign_flip": {"name": "sign_flip", "s": 10.0},
    "gaussian": {"name": "gaussian", "sigma": 1.0},
    "scale": {"name": "scale", "s": 20.0},
    "label_flip": {"name": "label_flip"},
    "alie": {"name": "alie", "z": 1.0},
    "free_rider": {"name": "free_rider"},
    "nonfinite": {"name": "nonfinite"},
}
SETTINGS = ["flat", "hier-edge", "hier-cloud", "hier-both"]
FRACTIONS = [0.0, 0.1, 0.2, 0.3]

BASE: dict[str, Any] = {
    "name": "robust-cmp", "seed": 1,
    "data": {"dataset": {"name": "blobs", "num_samples": 2500, "test_samples": 500, "num_features": 10,
                         "num_classes": 5, "separation": 1.0}, "partition": {"name": "dirichlet", "alpha": 1.0}},
    "model": {"name": "logreg"},
    "devices": {"count": 50, "speed_sps": {"dist": "lognormal", "median": 300, "sigma": 0.5},
                "uplink_mbps": 10, "downlink_mbps": 50, "latency_ms": 20},
    "protocol": {"name": "fedavg", "fraction": 0.4},
    "training": {"epochs": 1, "batch_size": 25, "lr": 0.1},
    "evaluation": {"every_s": 100000},
    "stop": {"rounds": 10},
    "runtime": {"executor": "local"},
    "output": {"trace": "none"},
}
HIER = {"topology": {"edge_servers": 5, "grouping": "round_robin"},
        "protocol": {"name": "hierfavg", "kappa1": 10, "kappa2": 1, "fraction": 1.0},
        "training": {"steps": 10, "batch_size": 25, "lr": 0.1}}


def assumed_f(m: int) -> int:
    """Byzantine inputs a rule is told to expect at a tier with m inputs."""
    return max(0, min(max(1, math.ceil(0.3 * m)), (m - 3) // 2))


def rule_config(rule: str, m: int) -> dict[str, Any]:
    """The rule's config at a tier that aggregates m updates."""
    f = assumed_f(m)
    return {"mean": {"name": "mean"}, "geomed": {"name": "geomed"}, "marmed": {"name": "marmed"},
            "meamed": {"name": "meamed", "q": f}, "trimmed_mean": {"name": "trimmed_mean", "beta": 0.3},
            "krum": {"name": "krum", "f": f}, "multi_krum": {"name": "multi_krum", "f": f, "m": m - f},
            "norm_clip": {"name": "norm_clip", "bound": 0.2}, "zeno": {"name": "zeno", "b": f, "rho": 0.0005}}[rule]


def cases(rounds: int, hier_fractions: list[float]) -> list[tuple[str, str, str, float, int]]:
    """(setting, rule, attack, fraction, rounds) of every run; no attack at 0 %, no zeno at the edge."""
    out = []
    for setting in SETTINGS:
        fractions = FRACTIONS if setting == "flat" else hier_fractions
        for rule in RULES:
            if rule == "zeno" and setting in ("hier-edge", "hier-both"):
                continue
            for frac in fractions:
                for attack in (["none"] if frac == 0 else list(ATTACKS)):
                    out.append((setting, rule, attack, frac, rounds))
    return out


def run_one(case: tuple[str, str, str, float, int]) -> dict[str, Any]:
    """One run; its final accuracy and robustness totals."""
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import deep_merge, validate_raw

    setting, rule, attack, frac, rounds = case
    raw = copy.deepcopy(BASE)
    raw["stop"] = {"rounds": rounds}
    if setting == "flat":
        raw["aggregation"] = {"cloud": rule_config(rule, 20)}
    else:
        raw = deep_merge(raw, copy.deepcopy(HIER))
        raw["training"].pop("epochs", None)
        edge = rule_config(rule, 10) if setting in ("hier-edge", "hier-both") else {"name": "mean"}
        cloud = rule_config(rule, 5) if setting in ("hier-cloud", "hier-both") else {"name": "mean"}
        raw["aggregation"] = {"edge": edge, "cloud": cloud}
    if attack != "none":
        raw["events"] = [{"at_s": 0, "attack": {"select": {"fraction": frac}, "behavior": ATTACKS[attack]}}]
    name = f"{setting}-{rule}-{attack}-{int(frac * 100)}"
    t0 = time.perf_counter()
    res = run_scenario(validate_raw(raw), OUT / "runs" / "robust" / name, progress=False)
    acc = res.summary["final_accuracy"]
    rb = res.summary.get("robustness", {}).get("tiers", {})
    return {"setting": setting, "rule": rule, "attack": attack, "fraction": frac,
            "accuracy": None if acc is None or acc != acc else acc, "wall_s": time.perf_counter() - t0,
            "tiers": rb}


def table(results: list[dict[str, Any]], setting: str, frac: float) -> str:
    """Markdown: rules × attacks, final accuracy at one Byzantine fraction."""
    rows = {(r["rule"], r["attack"]): r["accuracy"] for r in results
            if r["setting"] == setting and r["fraction"] == frac}
    attacks = ["none"] if frac == 0 else list(ATTACKS)
    head = "| rule | " + " | ".join(attacks) + " |\n|---|" + "---|" * len(attacks) + "\n"
    lines = []
    for rule in RULES:
        if not any((rule, a) in rows for a in attacks):
            continue
        cells = [rows.get((rule, a)) for a in attacks]
        lines.append(f"| {rule} | " + " | ".join("–" if c is None else f"{c:.2f}" for c in cells) + " |")
    return head + "\n".join(lines) + "\n"


def figure(results: list[dict[str, Any]], path: Path) -> None:
    """Heat maps of final accuracy, rules × attacks, flat at 10/20/30 % and hierarchical at 20 %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [("flat", 0.1), ("flat", 0.2), ("flat", 0.3), ("hier-edge", 0.2), ("hier-cloud", 0.2),
              ("hier-both", 0.2)]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9), constrained_layout=True)
    attacks = list(ATTACKS)
    for ax, (setting, frac) in zip(axes.flat, panels):
        grid = np.full((len(RULES), len(attacks)), np.nan)
        for r in results:
            if r["setting"] == setting and r["fraction"] == frac and r["accuracy"] is not None:
                grid[RULES.index(r["rule"]), attacks.index(r["attack"])] = r["accuracy"]
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(attacks)), attacks, rotation=45, ha="right")
        ax.set_yticks(range(len(RULES)), RULES)
        ax.set_title(f"{setting}, {int(frac * 100)} % Byzantine")
        for i in range(len(RULES)):
            for j in range(len(attacks)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if grid[i, j] < 0.5 else "black")
    fig.colorbar(im, ax=axes, shrink=0.6, label="final test accuracy")
    fig.savefig(path, dpi=110)


def main() -> None:
    """Run the grid (in ``--jobs`` processes), write the JSON, the tables and the figure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--hier-fractions", default="0,0.2")
    args = ap.parse_args()
    hier = [float(x) for x in args.hier_fractions.split(",")]
    todo = cases(args.rounds, hier)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run_one, todo, chunksize=8))
    wall = time.perf_counter() - t0
    (OUT / "robust_comparison.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    parts = [f"# Byzantine robustness study\n\n{len(results)} runs, {wall:.0f} s wall with {args.jobs} processes; "
             f"final test accuracy after {args.rounds} cloud rounds.\n"]
    for setting in SETTINGS:
        fracs = FRACTIONS if setting == "flat" else hier
        for frac in fracs:
            parts.append(f"\n## {setting}, {int(frac * 100)} % Byzantine\n\n" + table(results, setting, frac))
    (OUT / "robust_comparison.md").write_text("".join(parts), encoding="utf-8")
    figure(results, OUT / "robust_comparison.png")
    print(f"{len(results)} runs in {wall:.0f} s → {OUT / 'robust_comparison.md'}")


if __name__ == "__main__":
    main()
