"""FCCL in the real driver: the virtual times of its phases against a hand calculation on 3 parties.

tiny's blobs: 240 training samples (5 features, 3 classes); 60 of them public (unlabelled), the other 180
split iid → 60 private samples per device. Two custom tiers, no latency:

* ``slow`` (2 devices): 1000 FLOP/s, uplink 1000 B/s, downlink 2000 B/s, running ``model`` = logreg,
  F = 2·5·3 = 30 FLOPs per sample;
* ``fast`` (1 device): 2000 FLOP/s, uplink 2000 B/s, downlink 4000 B/s, running mlp [4], F = 2·(5·4 + 4·3) = 64.

Forward passes per sample (§10.3): pre-training 3, local phase 3 + 2 (two frozen teachers), per batch a
logits job of 1 + 1 (the model's and its previous snapshot's logits) and a collaboration step of 2 (the
backward of that forward); per round a logits job of 1 and a collaboration of 3 over all of A_t.
|A_t| = 30 in batches of 10, C = 3. Per device (slow | fast):

* pre-training, 1 epoch on 60: 60·90/1000 = 5.4 s | 60·192/2000 = 5.76 s → round 0 begins at 5.76;
* per batch: logits 10·60/1000 = 0.6 | 10·128/2000 = 0.64 s; 120-byte upload 0.12 | 0.06 s; download
  0.06 | 0.03 s; collaboration step 0.6 | 0.64 s. The first barrier closes max(0.72, 0.70) = 0.72 s after the
  round begins, each next one max(0.06 + 0.6 + 0.6 + 0.12, 0.03 + 0.64 + 0.64 + 0.06) = 1.38 s later: the
  round's third (last, counted) exchange closes at 5.76 + 0.72 + 2·1.38 = 9.24;
* then download, last step and local phase (1 epoch, 60·150/1000 = 9 | 60·320/2000 = 9.6 s): 9.66 | 10.27 s
  → round 1 begins at 19.51 and its last exchange closes at 19.51 + 3.48 = 22.99.

Per round instead: logits on 30 = 0.9 | 0.96 s, 360-byte upload 0.36 | 0.18 s → closes at 5.76 + 1.26 = 7.02;
download 0.18 | 0.09, collaboration 30·90/1000 = 2.7 | 30·192/2000 = 2.88, local 9 | 9.6 → round 1 begins at
7.02 + 12.57 = 19.59 and closes 1.26 s later, at 20.85.
"""

from __future__ import annotations

import copy
import json

import pytest

from hierfl.assemble import build
from hierfl.driver import run_scenario
from hierfl.scenario.loader import validate_raw
from tests.conftest import TINY

TIERS = {"slow": {"gflops": 1e-6, "uplink_mbps": 0.008, "downlink_mbps": 0.016, "rtt_ms": 0},
         "fast": {"gflops": 2e-6, "uplink_mbps": 0.016, "downlink_mbps": 0.032, "rtt_ms": 0}}


def _raw(public=None, **protocol):
    raw = copy.deepcopy(TINY)
    raw["data"]["public"] = {"size": 60, "labelled": False, **(public or {})}
    raw.update(devices={"count": 3, "tiers": {"slow": 2, "fast": 1}, "custom_tiers": TIERS},
               models={"fast": {"name": "mlp", "hidden": [4]}},
               protocol={"name": "fccl", "public_size": 30, "public_batch_size": 10, "pretrain_epochs": 1,
                         "pretrain_batch_size": 60, **protocol},
               training={"epochs": 1, "batch_size": 60}, stop={"rounds": 2})
    return raw


def _run(tmp_path, raw):
    sc = validate_raw(raw)
    built = build(sc)
    assert [len(p) for p in built.parts] == [60, 60, 60]
    out = tmp_path / "run"
    run_scenario(sc, out, built=built)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return built, [x["t"] for x in lines if x["event"] == "cloud_aggregate"], lines, summary


def test_per_batch_round_times_by_hand(tmp_path):
    built, aggs, lines, summary = _run(tmp_path, _raw())
    assert sorted(built.world.tier.tolist()) == ["fast", "slow", "slow"]
    assert aggs == pytest.approx([9.24, 22.99], abs=1e-9)
    final = [x for x in lines if x["event"] == "eval"][-1]
    assert 0.0 <= final["party_accuracy_min"] <= final["accuracy"] <= final["party_accuracy_max"] <= 1.0
    # uploads: 2 rounds × 3 batches × 3 parties; downloads: round 0's 3 × 3 and round 1's first 2 × 3
    # (the run stops at its last exchange); 120 bytes each
    assert final["bytes_cloud"] == (18 + 15) * 120
    # each party keeps θ* and θ^{t−1} (model-sized) and its last batch's uploaded and own logits (2 × 120 B)
    logreg, mlp = 4 * (5 * 3 + 3), 4 * (5 * 4 + 4 + 4 * 3 + 3)
    assert summary["device_state"]["bytes"] == 2 * (2 * logreg) + 2 * mlp + 3 * 240


def test_per_round_exchanges_once(tmp_path):
    _, aggs, lines, _ = _run(tmp_path, _raw(exchange="per_round"))
    assert aggs == pytest.approx([7.02, 20.85], abs=1e-9)
    final = [x for x in lines if x["event"] == "eval"][-1]
    assert final["bytes_cloud"] == (6 + 3) * 360


def test_download_once_and_free_setup(tmp_path):
    # 60 public samples × 5 features × 4 B = 1200 B (unlabelled): 0.6 s on a slow downlink, 0.3 s on the fast
    # one; round 0 then begins at max(0.6 + 5.4, 0.3 + 5.76) = 6.06 and its last exchange closes 3.48 s later
    _, aggs, _, _ = _run(tmp_path, _raw(public={"placement": "download_once"}))
    assert aggs[0] == pytest.approx(9.54, abs=1e-9)
    # charge_setup_phases: false → pre-training takes no virtual time; round 0 closes at 3.48
    _, aggs, _, _ = _run(tmp_path / "free", _raw(charge_setup_phases=False))
    assert aggs[0] == pytest.approx(3.48, abs=1e-9)


def test_self_target_current_skips_the_snapshot_forward(tmp_path):
    # logits 10·30/1000 = 0.3 | 10·64/2000 = 0.32 s; first barrier max(0.42, 0.38) = 0.42, then
    # max(0.06 + 0.6 + 0.3 + 0.12, 0.03 + 0.64 + 0.32 + 0.06) = 1.08 → 5.76 + 0.42 + 2.16 = 8.34
    _, aggs, _, _ = _run(tmp_path, _raw(self_target="current"))
    assert aggs[0] == pytest.approx(8.34, abs=1e-9)


def test_without_collaboration_parties_only_train_locally(tmp_path):
    # pre-training ends at 5.4 | 5.76; then local phases only (9 | 9.6 s), a round when every party is done:
    # rounds begin at 5.76, 15.36, 24.96; nothing is exchanged and no cloud aggregation is made
    raw = _raw(collaborate=False, lambda_loc=0.0)
    raw["stop"] = {"virtual_time_s": 30.0}
    _, aggs, lines, _ = _run(tmp_path, raw)
    assert aggs == []
    final = [x for x in lines if x["event"] == "eval"][-1]
    assert final["bytes_cloud"] == 0 and final["train_jobs"] == 3 + 3 * 2  # pre-training, two full rounds
    assert final["compute_s"] == pytest.approx(2 * 5.4 + 5.76 + 2 * (2 * 9.0 + 9.6), abs=1e-9)


def test_the_local_phase_follows_local_steps(tmp_path):
    # training.local_steps = 2 steps of batch 60 instead of 1 epoch: 120 samples, so the local phase lasts
    # 120·150/1000 = 18 | 120·320/2000 = 19.2 s; round 1 begins at max(9.24 + 0.06 + 0.6 + 18, 9.24 + 0.03 + 0.64
    # + 19.2) = 29.11 and its last exchange closes 3.48 s later
    raw = _raw()
    raw["training"] = {"local_steps": 2, "batch_size": 60}
    _, aggs, _, _ = _run(tmp_path, raw)
    assert aggs == pytest.approx([9.24, 29.11 + 3.48], abs=1e-9)
