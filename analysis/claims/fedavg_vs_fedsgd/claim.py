"""FedAvg needs 10-100x fewer communication rounds than FedSGD to reach a target accuracy (McMahan et al. 2017).

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep Networks
from Decentralized Data", AISTATS 2017 (docs/explanation/algorithms.md §5.1): K = 100 clients, C = 0.1, FedSGD = one
full-batch gradient step per selected client per round (E = 1, B = ∞), FedAvg = E epochs of
minibatch SGD (here E = 5, B = 10); the abstract reports a 10-100x reduction in rounds.

1. ``tune_lr.yaml``: three learning rates per method, IID, seeds 901-903 (never evaluated); the lr
   with the fewest mean rounds to the target wins (a run that never reaches it counts as its
   round budget).
2. ``eval.yaml`` with those lrs: rounds to 0.85 on the IID and the pathological non-IID split,
   seeds 1-3. Figure: FedSGD rounds / FedAvg rounds per seed (paired), mean ± 95 % CI.

    .venv/bin/python analysis/claims/fedavg_vs_fedsgd/claim.py [--resume] [--no-write]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import (  # noqa: E402
    ClaimResult,
    by_group,
    cli,
    first_reaching,
    fmt,
    mean_ci,
    paired,
    rel,
    run_sweep,
    sweep_wall,
    write_result,
)

HERE = Path(__file__).resolve().parent


def rounds(run) -> int | None:
    """Rounds to the target (None: not reached within the run's round budget)."""
    v = run.summary.get("rounds_to_target")
    return None if v is None else int(v)


def eval_file(lrs: dict[str, float], out: Path) -> Path:
    """eval.yaml with each method's lr set to the tuned one (paths made absolute)."""
    raw = yaml.safe_load((HERE / "eval.yaml").read_text(encoding="utf-8"))
    for label, entry in raw["scenarios"].items():
        entry["scenario"] = str(HERE / entry["scenario"])
        entry["set"] = [re.sub(r"lr: [0-9.e-]+", f"lr: {lrs[label]:g}", s) for s in entry["set"]]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "eval_tuned.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def main() -> None:
    args = cli("fedavg_vs_fedsgd", __doc__)
    tune = run_sweep(HERE / "tune_lr.yaml", args)
    budget = {r.changed["scenario"]: int(r.config["stop"]["rounds"]) for r in tune}
    scores: dict[str, dict[float, float]] = {}
    for label, runs in by_group(tune, lambda r: r.changed["scenario"]).items():
        method = label.split("_")[0]
        lr = float(runs[0].config["training"]["lr"])
        # never reached = the round budget: a conservative score for the lr
        scores.setdefault(method, {})[lr] = sum(rounds(r) or budget[label] for r in runs) / len(runs)
    lrs = {m: min(s, key=lambda lr: (s[lr], lr)) for m, s in scores.items()}
    for m, s in scores.items():
        print(f"  tuning {m}: " + ", ".join(f"lr={lr:g}: {v:.1f} rounds" for lr, v in s.items()) + f" → lr = {lrs[m]:g}")
    # a pick at the edge of its grid may not be the method's best lr: say so in the details
    edge = [m for m, s in scores.items() if lrs[m] in (min(s), max(s))]
    runs = run_sweep(eval_file(lrs, Path(args.out)), args, name="eval")
    groups = by_group(runs, lambda r: (r.changed["scenario"], r.config["data"]["partition"]["name"]))
    parts = {"iid": "IID", "shards": "non-IID (2 shards/client)"}
    ratios, rows, values = {}, [], {}
    for part, label in parts.items():
        sgd, avg = groups[("fedsgd", part)], groups[("fedavg", part)]
        ratio = paired(sgd, avg, lambda r: None if rounds(r) is None else float(rounds(r)))
        ratios[part] = ratio
        values[part] = {"fedsgd_rounds": [rounds(r) for r in sgd], "fedavg_rounds": [rounds(r) for r in avg],
                        "ratio": ratio}
        rows.append(f"| {label} | {fmt([rounds(r) for r in sgd], 1)} | {fmt([rounds(r) for r in avg], 1)} | "
                    f"{fmt(ratio, 1, '×')} |")
    # how the ratio depends on the target: the same runs, first evaluation at lower targets
    def rounds_at(target: float):
        def f(r):
            m = first_reaching(r, target)
            return None if m is None else float(m["round"])
        return f

    by_target, trend_rows = {}, []
    for target in (0.5, 0.6, 0.7, 0.8, 0.85):
        by_target[f"{target:g}"] = {}
        cells = []
        for part in parts:
            ratio_t = paired(groups[("fedsgd", part)], groups[("fedavg", part)], rounds_at(target))
            by_target[f"{target:g}"][part] = ratio_t
            cells.append(fmt(ratio_t, 1, "×"))
        trend_rows.append(f"| {target:g} | " + " | ".join(cells) + " |")
    seeds = sorted({r.seed for r in runs})
    all_ratios = ratios["iid"] + ratios["shards"]
    mean_iid, half_iid, _ = mean_ci(ratios["iid"])
    mean_non, half_non, _ = mean_ci(ratios["shards"])
    # the claim: FedAvg needs 10-100x fewer rounds; the direction is "fewer" (ratio > 1)
    in_range = [10 <= m <= 100 for m in (mean_iid, mean_non)]
    above_one = [m - h > 1 for m, h in ((mean_iid, half_iid), (mean_non, half_non))]
    agrees = "yes" if all(in_range) and all(above_one) else ("partly" if any(m > 1 for m in (mean_iid, mean_non)) else "no")
    tune_wall, eval_wall = sweep_wall(Path(args.out) / "tune_lr"), sweep_wall(Path(args.out) / "eval")
    table = "\n".join(["| split | FedSGD rounds | FedAvg (E = 5, B = 10) rounds | FedSGD / FedAvg |", "|---|---|---|---|"]
                      + rows)
    trend = "\n".join(trend_rows)
    below = [parts[p] for p in parts if mean_ci(ratios[p])[0] < 10]
    lo, hi = (mean_ci(by_target["0.5"]["iid"])[0], mean_ci(by_target["0.85"]["iid"])[0])
    trend_word = "falls" if hi < lo else "rises"
    why = "" if not below else f"""

**Why the ratio is below 10× ({", ".join(below)}).** What we checked, and what we did not: (1) *the target*
(checked, on the same runs, table above): on IID the ratio {trend_word} from {lo:.1f}× at 0.5 to {hi:.1f}× at
0.85, so on this task a target nearer the paper's (97 % / 99 %, close to the models' best accuracy) would
{"not bring it into the 10-100× range" if hi < lo else "move it towards the paper's range"}. (2) *FedSGD's learning rate* (checked): {"its pick is at the top of the grid, so a larger one could make FedSGD faster still and the ratio smaller" if "fedsgd" in edge else "its pick is inside the grid"}. (3) *local work per round* (not tested, no budget left): McMahan et al. show the speed-up grows with
u = E·n/B, the local updates per round (their Table 2); with 600 MNIST samples per client, E = 5, B = 10
gives u = 300, while our 120 samples per client give u = 60, five times fewer — the most likely reason,
a deviation of our stand-in setting, not of the algorithm. On the non-IID split FedAvg's advantage is
smaller still. The direction of the claim (FedAvg needs fewer
rounds) """ + (
        "holds on both splits." if all(mean_ci(ratios[p])[0] > 1 for p in parts) else "does not hold everywhere.")
    details = f"""Rounds to 0.85 test accuracy, mean ± 95 % CI over seeds 1-3 (ratio paired per seed).
Learning rates tuned on seeds 901-903 (IID): {"; ".join(f"{m}: " + ", ".join(f"lr {lr:g} → {v:.1f} rounds" for lr, v in s.items()) for m, s in scores.items())}; picked {", ".join(f"{m} lr = {lr:g}" for m, lr in lrs.items())}.

{table}
{"" if not edge else chr(10) + "**Tuning caveat:** the lr picked for " + ", ".join(edge) + " is at the edge of its grid, so a value beyond it might need fewer rounds (for FedSGD that would lower the ratio; for FedAvg raise it)." + chr(10)}
The ratio against the target (the same runs; each run stops at 0.85):

| target | IID | non-IID |
|---|---|---|
{trend}

Setting as published (McMahan et al. 2017 §2-3): K = 100 clients, C = 0.1 (10 per round), FedSGD = E = 1,
B = ∞, FedAvg = E = 5, B = 10 (the paper's best CNN setting in its Table 2), sample-weighted averaging,
the 2NN (two hidden layers of 200 ReLU units), IID and pathological non-IID (2 label-sorted shards per
client) splits, learning rates tuned per method.

Our deviations [D]: **no MNIST offline** — the `teacher` task stands in (x ~ N(0, I) in d = 60,
labels argmax(x·T) of a random teacher, 10 classes; 120 samples per client instead of 600), so the
target is 0.85 (a level FedSGD reaches within its 400-round budget) instead of the paper's 97 % / 99 %;
three learning rates per method instead of the paper's finer grid. Identical devices make every round
take the same virtual time, and an evaluation every 0.25 virtual s (shorter than any round) finds the
first round at the target.

Sum of the trials' wall time: tuning {tune_wall:.0f} s ({len(tune)} trials), evaluation {eval_wall:.0f} s
({len(runs)} trials), on a 2-core machine shared with other jobs.{why}"""
    result = ClaimResult(
        id="fedavg_vs_fedsgd",
        claim="FedAvg needs far fewer communication rounds than FedSGD to reach a target accuracy",
        source="McMahan et al., AISTATS 2017 (abstract; Table 2)",
        paper="10-100× fewer rounds",
        ours=f"IID {fmt(ratios['iid'], 1, '×')}; non-IID {fmt(ratios['shards'], 1, '×')}",
        agrees=agrees,
        scenario=[rel(HERE / "fedsgd.yaml"), rel(HERE / "tune_lr.yaml"), rel(HERE / "eval.yaml")],
        notes="teacher task (d = 60) and 2NN instead of MNIST [D: offline]; target 0.85; lr tuned per method on "
              "unevaluated seeds.",
        seeds=seeds,
        values={"lr": lrs, "tuning": {m: {f"{lr:g}": v for lr, v in s.items()} for m, s in scores.items()},
                "splits": values, "ratio_by_target": by_target, "all_ratios": all_ratios, "trial_wall_s": {"tune": tune_wall, "eval": eval_wall}},
        details=details,
        order=45,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
