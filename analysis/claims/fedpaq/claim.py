"""FedPAQ: quantised uploads reach a target accuracy sooner in emulated time than float32 uploads on
bandwidth-bound devices.

Reisizadeh et al., "FedPAQ: A Communication-Efficient Federated Learning Method with Periodic Averaging and
Quantization", AISTATS 2020: with uploads whose time depends on their bits, periodic averaging with quantised
updates reaches a given loss in less training time than full-precision uploads; too coarse a quantiser
needs more rounds. Setting (fedpaq.yaml, sweep.yaml): FedAvg, 10 of 20 devices per round, one local epoch,
an MLP of 46 K parameters; QSGD with s = 1, 4, 16 levels against float32, uplinks of 0.5–2 Mbit/s and of
20 Mbit/s; seeds 1–3.

    .venv/bin/python analysis/claims/fedpaq/claim.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import ClaimResult, cost_line, arms, cli, first_reaching, fmt, mean_ci, paired, rel, run_sweep, trials_wall, write_result  # noqa: E402,I001

TARGET = 0.8  # sweep.yaml's target
ARMS = ("fp32_slow", "s1_slow", "s4_slow", "s16_slow", "fp32_fast", "s16_fast")


def at_target(key: str):
    """Field ``key`` of the first evaluation at or above the target (``t``: virtual seconds; None: never)."""
    def f(run) -> float | None:
        m = first_reaching(run, TARGET)
        return None if m is None else float(m[key])
    return f


def main() -> None:
    args = cli("fedpaq", __doc__)
    runs = run_sweep(HERE / "sweep.yaml", args)
    g = arms(runs, ARMS)
    seeds = sorted({r.seed for r in runs})
    t, rounds, up = at_target("t"), at_target("round"), at_target("bytes_device_tier")
    values: dict[str, object] = {"target": TARGET, "trials_wall_s": round(trials_wall(runs), 1)}
    rows = []
    for a in ARMS:
        values[a] = {"time_to_target_s": [t(r) for r in g[a]], "rounds_to_target": [rounds(r) for r in g[a]],
                     "device_tier_bytes_to_target": [up(r) for r in g[a]],
                     "best_accuracy": [r.summary.get("best_accuracy") for r in g[a]]}
        rows.append(f"| {a} | {fmt([t(r) for r in g[a]], 1, ' s')} | {fmt([rounds(r) for r in g[a]], 1)} | "
                    f"{fmt([up(r) for r in g[a]], 1, ' MB', 1e-6)} |")
    speed = {a: paired(g["fp32_slow"], g[a], t) for a in ("s1_slow", "s4_slow", "s16_slow")}
    speed["s16_fast"] = paired(g["fp32_fast"], g["s16_fast"], t)
    values["speedup_fp32_over"] = speed

    def above_1(xs) -> bool:
        m, half, n = mean_ci(xs)
        return n >= 2 and m - half > 1

    faster = above_1(speed["s4_slow"]) and above_1(speed["s16_slow"])
    shrinks = mean_ci(speed["s16_fast"])[0] < mean_ci(speed["s16_slow"])[0]
    agrees = "yes" if faster and shrinks else ("partly" if faster or above_1(speed["s16_slow"]) else "no")
    ours = (f"time to {TARGET} at 0.5–2 Mbit/s, float32 / QSGD: s=4 ×{fmt(speed['s4_slow'])}, s=16 "
            f"×{fmt(speed['s16_slow'])}, s=1 ×{fmt(speed['s1_slow'])}; at 20 Mbit/s s=16 ×{fmt(speed['s16_fast'])}")
    r_fp, r_s4, r_s1 = (mean_ci([rounds(r) for r in g[a]])[0] for a in ("fp32_slow", "s4_slow", "s1_slow"))
    notes = (("PASS: quantised uploads reach the target sooner on slow uplinks; the gain shrinks on fast ones. "
              if agrees == "yes" else "FAIL or partial (see details). ")
             + f"Mean rounds to target: float32 {r_fp:.1f}, s=4 {r_s4:.1f}, s=1 {r_s1:.1f}.")
    details = "\n".join([
        f"Setting ({rel(HERE / 'fedpaq.yaml')}, {rel(HERE / 'sweep.yaml')}): FedAvg, 10 of 20 devices per round, "
        "one local epoch of batch 32 at lr 0.05, an MLP 20-200-200-10 (46 K parameters, 186 KB per float32 "
        "upload) on 10-class Gaussian blobs, i.i.d. split [D: MNIST / CIFAR-10 offline; the paper's n = 50 nodes "
        "scaled down]. QSGD on the update (trained model minus downloaded model), bucket 512; s = 4 takes 3 bits "
        "a value plus a sign (23.6 KB), s = 16 takes 5 plus a sign, s = 1 one plus a sign. Downloads are float32 "
        f"over 10-50 Mbit/s. Target {TARGET} [D], evaluation every 2 virtual s (times are resolved to 2 s); runs "
        "stop at the target. Nothing was tuned.",
        "",
        "| arm | time to target (virtual s) | rounds to target | device-tier bytes to target |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Speed-up (float32 time / quantised time, paired per seed): slow uplinks s=1 {fmt(speed['s1_slow'], 2)}, "
        f"s=4 {fmt(speed['s4_slow'], 2)}, s=16 {fmt(speed['s16_slow'], 2)}; fast uplinks s=16 "
        f"{fmt(speed['s16_fast'], 2)}.",
        "",
        "PASS criteria (set before running): on slow uplinks the paired speed-up of s = 4 and s = 16 has its 95 % "
        "interval above 1; it is smaller on 20 Mbit/s uplinks than on slow ones. The paper's U-shape in τ "
        "and its loss-vs-time curves are not reproduced [D: budget]. At 20 Mbit/s a 186 KB upload takes about "
        "0.07 s, far below the 2-s evaluation step, so both arms reach the target at the same evaluation (×1.00). "
        "The target is reached within a handful of rounds, too few for s = 1's larger quantisation variance to "
        "cost rounds: the paper's observation that too coarse a quantiser loses its advantage is not tested here.",
        "",
        cost_line(runs, args),
    ])
    write_result(ClaimResult(
        id="fedpaq",
        claim="FedPAQ's quantised uploads reach a target accuracy sooner in emulated time than full-precision "
              "uploads on bandwidth-bound devices",
        source="Reisizadeh et al., AISTATS 2020; QSGD: Alistarh et al., NeurIPS 2017",
        paper="less training time to a given loss than FedAvg with full-precision uploads (figures; no single number)",
        ours=ours,
        agrees=agrees,
        scenario=[rel(HERE / "fedpaq.yaml"), rel(HERE / "sweep.yaml")],
        notes=notes,
        seeds=seeds,
        values=values,
        details=details,
        order=120,
    ), args)


if __name__ == "__main__":
    main()
