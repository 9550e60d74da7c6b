"""Claim `hierfavg`: HierFAVG reaches a target accuracy in less time and with less device energy than cloud-based FL.

Liu, Zhang, Song, Letaief, "Client-Edge-Cloud Hierarchical Federated Learning", ICC 2020
(arXiv 1905.06641), abstract: "by introducing the intermediate edge servers, the model training time
and the energy consumption of the end devices can be simultaneously reduced compared to cloud-based
Federated Learning" (docs/explanation/algorithms.md §5.2, §7). Setting: hierfavg.yaml and hierfavg_sweep.yaml (every
setting cited there, our own choices tagged [D]). No hyper-parameter is tuned: lr, batch, kappa1/kappa2
are the official repo's reference run; the target (0.7) was picked from one run on seed 100, which
is not evaluated (seeds 1-3 are).

    .venv/bin/python analysis/claims/hierfavg/claim.py          # runs/claims/hierfavg/, then the JSON
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import (ClaimResult, arms, cli, counter_at, fmt, mean_ci, paired, rel, run_sweep,  # noqa: E402
                    write_result)

TARGET = 0.7
ARMS = ("CloudFL", "HierFAVG", "HierFAVG_6x10")


def main() -> None:
    args = cli("hierfavg", __doc__)
    sweep_file = HERE / "hierfavg_sweep.yaml"
    runs = run_sweep(sweep_file, args)
    groups = arms(runs, ARMS)

    def at_target(r, key):  # the counter `key` on the first eval line at or above the target (None: never)
        return counter_at(r, TARGET, key)

    def time_s(r):
        return at_target(r, "t")

    def energy_j(r):
        return at_target(r, "energy_device_j")

    n_dev = int(runs[0].config["devices"]["count"])
    values: dict[str, dict] = {}
    lines = ["| arm | time to 0.7 (s) | device energy to 0.7 (J, all devices) | of which compute (J) | "
             "cloud rounds | bytes into/out of the cloud (MB) |", "|---|---|---|---|---|---|"]
    for arm in ARMS:
        g = groups[arm]
        t = [time_s(r) for r in g]
        e = [energy_j(r) for r in g]
        ec = [at_target(r, "energy_compute_j") for r in g]
        rounds = [at_target(r, "cloud_aggregations") for r in g]
        mb = [None if at_target(r, "bytes_cloud") is None else at_target(r, "bytes_cloud") / 1e6 for r in g]
        values[arm] = {"seeds": [r.seed for r in g], "time_to_target_s": t, "energy_device_j": e,
                       "energy_compute_j": ec, "rounds": rounds, "cloud_mb": mb,
                       "wall_s": [r.summary.get("wall_s") for r in g]}
        lines.append(f"| {arm} | {fmt(t, 2)} | {fmt(e, 0)} | {fmt(ec, 0)} | {fmt(rounds, 1)} | {fmt(mb, 1)} |")

    cloud, hier, hier10 = groups["CloudFL"], groups["HierFAVG"], groups["HierFAVG_6x10"]
    t_ratio = paired(cloud, hier, time_s)          # > 1: cloud FL slower
    e_ratio = paired(cloud, hier, energy_j)        # > 1: cloud FL spends more device energy
    t_ratio10 = paired(cloud, hier10, time_s)
    e_ratio10 = paired(cloud, hier10, energy_j)
    values["ratios"] = {"time_cloud_over_hierfavg": t_ratio, "energy_cloud_over_hierfavg": e_ratio,
                        "time_cloud_over_hierfavg_6x10": t_ratio10, "energy_cloud_over_hierfavg_6x10": e_ratio10}

    def holds(rs):
        return bool(rs) and all(x is not None and x > 1.0 for x in rs)

    # the paper's claim is about its own run (kappa1 = 60, kappa2 = 1): `agrees` is judged on it; the
    # kappa1 = 6, kappa2 = 10 arm is our exploration of the trade-off [D] and reported beside it
    agrees = "yes" if holds(t_ratio) and holds(e_ratio) else "partly" if holds(t_ratio) or holds(e_ratio) else "no"
    other_holds = holds(t_ratio10) and holds(e_ratio10)
    values["kappa_6x10_also_holds"] = other_holds

    # trials' own wall time (the sweep runs two at a time) and the machine's load while we ran
    trials_wall = 0.0
    with open(Path(args.out) / sweep_file.stem / "sweep.csv", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            trials_wall += float(row.get("wall_s") or 0.0)
    load = os.getloadavg()
    values["trials_wall_s_sum"] = round(trials_wall, 1)
    values["load_avg_at_end"] = [round(x, 2) for x in load]

    ce = mean_ci(values["CloudFL"]["energy_device_j"])[0]
    he = mean_ci(values["HierFAVG"]["energy_device_j"])[0]
    hc = mean_ci(values["HierFAVG"]["energy_compute_j"])[0]
    r60 = mean_ci(values["HierFAVG"]["rounds"])[0]
    r10 = mean_ci(values["HierFAVG_6x10"]["rounds"])[0]
    hc10 = mean_ci(values["HierFAVG_6x10"]["energy_compute_j"])[0]
    e10 = mean_ci(values["HierFAVG_6x10"]["energy_device_j"])[0]
    t10 = mean_ci(values["HierFAVG_6x10"]["time_to_target_s"])[0]
    ht = mean_ci(values["HierFAVG"]["time_to_target_s"])[0]
    details = f"""**Setting** (analysis/claims/hierfavg/hierfavg.yaml, hierfavg_sweep.yaml): 50 phone-class devices
(`phone_low`: 2 GFLOP/s, 4G 6/20 Mbit/s, RTT 50 ms), 5 edge servers, every device every round, kappa1 = 60,
kappa2 = 1, batch 20, lr 0.01 (the official repo's reference run); Synthetic(0.5, 0.5) with each device its own
distribution and a one-hidden-layer MLP of 21,310 parameters (sized like the repo's MNIST LeNet, 21,840) [D:
MNIST is not available offline]. The WAN price [D]: edge–cloud RTT 40 ms (same continent), and the cloud's
way in and out shared by the whole training job at 100 Mbit/s each way. Cloud-based FL is FedAvg with the same
60 local steps, every device talking to the cloud over 4G + WAN (RTT 90 ms) through that shared 100 Mbit/s.
Device energy is hierfl's energy model with its defaults: 1.5 nJ/FLOP for `phone_low` [D] and Huang et al.'s
(MobiSys 2012) LTE radio model — 438.39 mJ per Mbit sent, 51.97 per Mbit received, 1288.04 mW while a transfer
is on the air. Target accuracy {TARGET}, seeds 1–3; the target was chosen from one run on seed 100 (not evaluated).

**Results** (mean ± 95 % CI over seeds; energy summed over the {n_dev} devices up to the first evaluation at or
above the target; evaluations every 0.25 s of virtual time):

{chr(10).join(lines)}

Per-seed ratios cloud FL / HierFAVG: time {fmt(t_ratio, 2, '×')}, device energy {fmt(e_ratio, 2, '×')};
cloud FL / HierFAVG (kappa1 = 6, kappa2 = 10): time {fmt(t_ratio10, 2, '×')}, energy {fmt(e_ratio10, 2, '×')}.

**Why.** With kappa2 = 1 and every device in every round, HierFAVG's cloud model is the sample-weighted mean
of the same 50 local models as FedAvg's, so both need the same number of cloud rounds (the rounds column);
the whole difference is the path. Cloud-based FL pushes 50 models through the cloud's shared 100 Mbit/s and
across the WAN latency every round, HierFAVG 5 (one per edge server), while each device only crosses its own
4G link to the edge. Device energy follows the time a device's radio is on the air (Huang et al.'s 1.29 W
base power dominates the per-bit term for an 85 KB model): compute energy is the same in both arms
(≈ {hc:.0f} J), so the saving ({ce:.0f} J → {he:.0f} J) is all in the radio. Splitting the 60 steps
into 10 edge rounds (kappa1 = 6) makes each device send and receive 10× more often per cloud round. Here it
reaches the target in {r10:.1f} cloud rounds instead of {r60:.1f} (averaging every 6 steps limits the drift of
non-IID devices), so it trains {hc / max(hc10, 1e-9):.1f}× less (compute {hc10:.0f} J against {hc:.0f} J), but
its 10× more frequent transfers keep the radio on longer: {t10:.2f} s and {e10:.0f} J against HierFAVG's
{ht:.2f} s and {he:.0f} J. {f"It still beats cloud-based FL in every seed on both counts, but narrowly on energy (per-seed ratios down to {min(x for x in e_ratio10 if x is not None):.2f}×): the claim holds for the repo's kappa1 = 60 and, barely, for this split." if other_holds else "It does not beat cloud-based FL in every seed on both counts: the claim holds for the repo's kappa1 = 60, not for every split."}

**Caveats.** The paper's own numbers (its channel, transmit-power and CPU parameters, and its time/energy
table) could not be retrieved offline, so the paper's figure is its qualitative statement; our WAN price
(40 ms RTT, a shared 100 Mbit/s way into the cloud) and the energy figures are our choices [D] within the
paper's premise (an expensive device–cloud path, a cheap edge), not tuned to make the claim hold. The repo's
lr decay (0.995 per round) is not modelled. The radio's tail energy after a burst is not charged. The MLP has
~1/25 of LeNet's FLOPs, so compute energy is a smaller share than it would be with LeNet.
**Cost.** Sum of the 9 trials' own wall time: {trials_wall:.0f} s (two at a time; load average at the end
{load[0]:.1f} on 2 cores shared with other jobs, so inflated many times). Measured CPU time of one trial (CloudFL,
seed 100, 24 cloud rounds): 16.4 s including ~4 s of start-up, i.e. ~0.5 s per cloud round; the 9 trials'
{sum(x or 0 for a in ARMS for x in values[a]["rounds"]):.0f} cloud rounds (each 60 local steps per device) come to an
estimated 2.5–4 min of CPU (the 6x10 arm's extra transfers and aggregations cost more per round), i.e. about
2 min of wall on an idle 2-core machine with two trials at a time, plus Ray Tune's start-up — an estimate,
not measured on an idle machine."""

    result = ClaimResult(
        id="hierfavg",
        claim="HierFAVG: lower training time and lower end-device energy to a target accuracy than cloud-based FL",
        source="Liu et al., ICC 2020 (arXiv 1905.06641), abstract; docs/explanation/algorithms.md §5.2, §7",
        paper="time and device energy both reduced vs cloud-based FL (qualitative; numbers not retrieved)",
        ours=f"cloud FL / HierFAVG (κ1=60, κ2=1) to acc {TARGET}: time {fmt(t_ratio, 2, '×')}, "
             f"device energy {fmt(e_ratio, 2, '×')}",
        agrees=agrees,
        scenario=[rel(HERE / "hierfavg.yaml"), rel(sweep_file)],
        notes="Same rounds to target (κ2=1 is FedAvg's math); the saving is the WAN path: 5 edge uploads instead of "
              "50 device uploads through the cloud's shared link, and less 4G air time per device. WAN price and "
              "energy figures are [D].",
        seeds=sorted({r.seed for r in runs}),
        values=values,
        details=details,
        order=20,
    )
    write_result(result, args)


if __name__ == "__main__":
    main()
