"""FedProx vs FedAvg under systems heterogeneity: +22 % absolute test accuracy on average (Li et al., MLSys 2020).

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous Networks",
MLSys 2020, arXiv 1812.06127 (docs/explanation/algorithms.md §5.5): "in highly heterogeneous settings, FedProx
demonstrates significantly more stable and accurate convergence behavior relative to FedAvg —
improving absolute test accuracy by 22 % on average". Setting (paper §5.1-5.2, reference scripts
litian96/FedProx): 30 devices of Synthetic(α, β), multinomial logistic regression, 10 devices per
round, E = 20, B = 10, lr 0.01; each round 0 %, 50 % or 90 % of the selected devices are
stragglers doing 1 … E − 1 epochs; FedAvg drops them, FedProx aggregates their partial work.

1. ``tune_mu.yaml``: μ ∈ {0.001, 0.01, 0.1, 1} at 90 % stragglers on Synthetic(1, 1), seeds
   901-903 (never evaluated); the best mean final accuracy wins.
2. ``eval.yaml`` with that μ: FedAvg (dropping), FedProx μ = 0 and FedProx μ = tuned at 90 %
   stragglers on the three datasets, seeds 1-3; then ``eval_0.yaml`` and ``eval_50.yaml``, the
   paper's 0 % and 50 % settings (``--only-90`` leaves them out).

Figure: final test accuracy of FedProx (tuned μ) minus FedAvg (dropping), per seed, per
(dataset, stragglers), and averaged over the 90 % settings (the paper's "highly heterogeneous").

    .venv/bin/python analysis/claims/fedprox/claim.py [--resume] [--no-write] [--only-90]
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
    fmt,
    mean_ci,
    rel,
    run_sweep,
    sweep_wall,
    write_result,
)

HERE = Path(__file__).resolve().parent
DATASETS = {"s00": (0.0, 0.0), "s05": (0.5, 0.5), "s11": (1.0, 1.0)}
# the paper's three straggler levels by default; --only-90 keeps the 90 % one (a third of the cost)
ALL_LEVELS = "--only-90" not in sys.argv  # read before cli() parses the common flags
if not ALL_LEVELS:
    sys.argv.remove("--only-90")
LEVELS = (0, 50, 90) if ALL_LEVELS else (90,)
EXTRA = ("eval_0", "eval_50") if ALL_LEVELS else ()


def dataset_key(run) -> str:
    d = run.changed["data.dataset"]
    d = d if isinstance(d, dict) else yaml.safe_load(d)
    return next(k for k, (a, b) in DATASETS.items() if d["alpha"] == a and d["beta"] == b)


def acc(run) -> float | None:
    v = run.summary.get("final_accuracy")
    return None if v is None else float(v)


def eval_file(mu: float, out: Path, name: str = "eval") -> Path:
    """``name``.yaml with μ of the ``prox_mu_*`` labels set to the tuned value (paths made absolute)."""
    raw = yaml.safe_load((HERE / f"{name}.yaml").read_text(encoding="utf-8"))
    for label, entry in raw["scenarios"].items():
        entry["scenario"] = str(HERE / entry["scenario"])
        if label.startswith("prox_mu_"):
            entry["set"] = [re.sub(r"mu: [0-9.e-]+", f"mu: {mu:g}", s) for s in entry["set"]]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}_tuned.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def main() -> None:
    args = cli("fedprox", __doc__)
    # 1. tune μ on seeds the evaluation never uses
    tune = run_sweep(HERE / "tune_mu.yaml", args)
    tuned = {}
    for key, runs in by_group(tune, lambda r: float(r.config["training"]["trainer"]["mu"])).items():
        tuned[key] = mean_ci([acc(r) for r in runs])[0]
    mu = max(tuned, key=lambda k: tuned[k])
    print("  tuning (90 % stragglers, Synthetic(1, 1), seeds 901-903): "
          + ", ".join(f"μ={k:g}: {v:.3f}" for k, v in tuned.items()) + f" → μ = {mu:g}")
    # 2. evaluate
    runs = run_sweep(eval_file(mu, Path(args.out)), args, name="eval")
    for name in EXTRA:
        runs += run_sweep(eval_file(mu, Path(args.out), name), args, name=name)
    groups = by_group(runs, lambda r: (r.changed["scenario"], dataset_key(r)))

    def get(method: str, level: int, ds: str):
        if method == "fedavg" and level == 0:  # no stragglers: FedAvg is FedProx with μ = 0
            method = "prox0"
        return groups[(f"{method}_s{level}", ds)]

    rows, gains90, gains_all, per_setting = [], [], [], {}
    for ds, (a, b) in DATASETS.items():
        for level in LEVELS:
            fa, p0, pm = get("fedavg", level, ds), get("prox0", level, ds), get("prox_mu", level, ds)
            gain = [x - y for x, y in zip([acc(r) for r in pm], [acc(r) for r in fa])]
            per_setting[f"Synthetic({a:g},{b:g}) {level}%"] = {
                "fedavg": [acc(r) for r in fa], "fedprox_mu0": [acc(r) for r in p0],
                "fedprox_mu": [acc(r) for r in pm], "gain": gain}
            gains_all += gain
            if level == 90:
                gains90 += gain
            rows.append(f"| Synthetic({a:g}, {b:g}) | {level} % | {fmt([acc(r) for r in fa], 3)} | "
                        f"{fmt([acc(r) for r in p0], 3)} | {fmt([acc(r) for r in pm], 3)} | {fmt(gain, 3)} |")
    # per-seed mean over the three datasets at 90 %: the paper's "on average"
    seeds = sorted({r.seed for r in runs})
    avg90 = []
    for s in seeds:
        vals = [g for ds in DATASETS for g, r in zip(per_setting[f"Synthetic({DATASETS[ds][0]:g},{DATASETS[ds][1]:g}) 90%"]["gain"],
                                                      get("fedavg", 90, ds)) if r.seed == s]
        avg90.append(sum(vals) / len(vals) if None not in vals and vals else None)
    mean90, half90, _ = mean_ci(avg90)
    # where the gain comes from at 90 %: keeping the partial work (μ = 0 − FedAvg) and the proximal
    # term (μ − μ = 0), per dataset × seed
    keep90 = [p - f for ds in DATASETS for p, f in zip([acc(r) for r in get("prox0", 90, ds)],
                                                         [acc(r) for r in get("fedavg", 90, ds)])]
    prox90 = [m - p for ds in DATASETS for m, p in zip([acc(r) for r in get("prox_mu", 90, ds)],
                                                         [acc(r) for r in get("prox0", 90, ds)])]
    # the direction: FedProx above FedAvg; "yes" when the interval excludes 0
    agrees = "yes" if mean90 - half90 > 0 else ("partly" if mean90 > 0 else "no")
    mu_note = "" if abs(mean_ci(prox90)[0]) >= 0.01 else (
        "\nHere the whole gain comes from aggregating the partial work: the proximal term adds nothing within 20\n"
        "rounds (μ made no difference in the tuning either). The paper credits μ > 0 with more stable\n"
        "convergence over its 200 rounds (Fig. 1); whether that shows in a 200-round run is not tested here.")
    tune_wall = sweep_wall(Path(args.out) / "tune_mu")
    eval_wall = sum(sweep_wall(Path(args.out) / name) for name in ("eval",) + EXTRA)
    table = "\n".join(["| dataset | stragglers | FedAvg (drops) | FedProx μ = 0 | FedProx μ = %g | gain (μ vs FedAvg) |" % mu,
                       "|---|---|---|---|---|---|"] + rows)
    details = f"""Final test accuracy after 20 rounds, mean ± 95 % CI over seeds 1-3 (each seed draws its own
Synthetic dataset). μ = {mu:g} was picked on seeds 901-903 at 90 % stragglers on Synthetic(1, 1) from the
paper's grid: {", ".join(f"μ = {k:g}: {v:.3f}" for k, v in tuned.items())} (mean final accuracy).

{table}

At 90 % stragglers the gain splits into keeping the stragglers' partial work (FedProx μ = 0 minus
FedAvg: {fmt(keep90, 1, " points", scale=100.0)}) and the proximal term (μ = {mu:g} minus μ = 0:
{fmt(prox90, 1, " points", scale=100.0)}), per dataset × seed. FedAvg at 90 % aggregates one device per
round (the 9 stragglers are dropped), so its model follows one non-IID user at a time.{mu_note}

Setting as published (paper §5.1-5.2; litian96/FedProx `run_fedprox.sh`, `flearn/trainers/fedprox.py`,
`fedavg.py`): 30 devices, Synthetic(α, β) natural split, multinomial logistic regression, 10 devices
per round, E = 20 local epochs, B = 10, lr 0.01, sample-weighted aggregation. Stragglers are the
`random_epochs` straggler policy: each round `round(10·(1 − p))` selected devices are active and the
rest run x ~ U{{1, …, 19}} epochs (the reference code's `np.random.randint(1, E)`); FedAvg
(`partial: false`) drops them before they compute, FedProx (`partial: true`) aggregates them; both see
the same stragglers (one seeded draw per round). FedAvg at 0 % is the μ = 0 run (no straggler: the same
algorithm).

Our deviation [D]: **20 rounds instead of 200** (budget: a 200-round trial with E = 20 costs about
2 CPU-minutes here, and the evaluation trials must fit the claims set's hour on 2 cores). The
figure is therefore the accuracy early in training, where the paper's Fig. 1 curves are already
apart. μ was tuned on Synthetic(1, 1) only [D], with the same 20 rounds. {"The 0 % and 50 % settings ran too (`eval_0.yaml`, `eval_50.yaml`)." if ALL_LEVELS else "**The paper's 0 % and 50 % settings are not in this run** (`--only-90`)."}

Sum of the trials' wall time: tuning {tune_wall:.0f} s (12 trials), evaluation {eval_wall:.0f} s
({len(runs)} trials), on a 2-core machine shared with other jobs."""
    result = ClaimResult(
        id="fedprox",
        claim="FedProx vs FedAvg under systems heterogeneity (stragglers doing partial work)",
        source="Li et al., MLSys 2020, arXiv 1812.06127 (abstract; §5.2, Fig. 1)",
        paper="+22 % absolute test accuracy on average (highly heterogeneous settings)",
        ours=f"{fmt(avg90, 1, scale=100.0)} points at 90 % stragglers (mean of the 3 datasets); "
             + (f"all {len(LEVELS) * 3} settings × seeds: {fmt(gains_all, 1, scale=100.0)}" if ALL_LEVELS
                else f"per dataset × seed: {fmt(gains_all, 1, scale=100.0)}"),
        agrees=agrees,
        scenario=[rel(HERE / "fedprox.yaml"), rel(HERE / "tune_mu.yaml"), rel(HERE / "eval.yaml")]
        + [rel(HERE / f"{name}.yaml") for name in EXTRA],
        notes=f"μ = {mu:g} tuned on unevaluated seeds; 20 rounds instead of 200 [D: budget]"
              + ("" if ALL_LEVELS else ", 90 % stragglers only") + "; FedAvg drops the stragglers, FedProx "
              "keeps their 1…19 epochs" + ("" if abs(mean_ci(prox90)[0]) >= 0.01 else
                                        "; the gain is the partial work's, μ adds ≈ 0 in 20 rounds") + ".",
        seeds=seeds,
        values={"mu": mu, "tuning": {f"{k:g}": v for k, v in tuned.items()}, "gain_90_mean_per_seed": avg90,
                "settings": per_setting, "gain_90_partial_work": keep90, "gain_90_proximal": prox90, "trial_wall_s": {"tune": tune_wall, "eval": eval_wall}},
        details=details,
        order=40,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
