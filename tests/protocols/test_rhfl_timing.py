"""RHFL in the real driver: the virtual times of its phases against a hand calculation on 3 devices.

tiny's blobs: 240 training samples (5 features, 3 classes); 60 of them public, the other 180 split iid
→ 60 private samples per device. Two custom tiers, no latency:

* ``slow`` (2 devices): 1000 FLOP/s, uplink 1000 B/s, downlink 2000 B/s, running ``model`` = logreg,
  F = 2·5·3 = 30 FLOPs per sample;
* ``fast`` (1 device): 2000 FLOP/s, uplink 2000 B/s, downlink 4000 B/s, running mlp [4], F = 2·(5·4 + 4·3) = 64.

A training sample costs 3F FLOPs, a forward-only one F, the alignment step 2F (its forward was the
probabilities'). The 60 public samples in batches of 30: two exchanges per round of 4·30·3 = 360 bytes
each way. Per device (slow | fast):

* pre-training, 1 SCE epoch on 60 + the CCR pass: 60·90/1000 + 60·30/1000 = 7.2 s | 5.76 + 1.92 = 7.68 s
* probabilities on a batch: 30·30/1000 = 0.9 s | 30·64/2000 = 0.96 s; upload 0.36 s | 0.18 s
* targets download 0.18 s | 0.09 s; alignment step 30·60/1000 = 1.8 s | 30·128/2000 = 1.92 s
* local learning: max(⌊60/60⌋, 1) = 1 epoch + the CCR pass: 7.2 s | 7.68 s; a report (64 B) 0.064 s | 0.032 s

Batch 0 closes at max(7.2 + 0.9 + 0.36, 7.68 + 0.96 + 0.18) = 8.82; batch 1 at
max(8.82 + 0.18 + 1.8 + 0.9 + 0.36, 8.82 + 0.09 + 1.92 + 0.96 + 0.18) = 12.06. Local learning ends at
12.06 + 0.18 + 1.8 + 7.2 = 21.24 | 12.06 + 0.09 + 1.92 + 7.68 = 21.75; the reports are in by 21.782, and
round 1's batch 0 closes at max(21.24 + 1.26, 21.75 + 1.14) = 22.89.
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
    raw["data"]["label_noise"] = {"kind": "pair_flip", "rate": 0.2}
    raw.update(devices={"count": 3, "tiers": {"slow": 2, "fast": 1}, "custom_tiers": TIERS},
               models={"fast": {"name": "mlp", "hidden": [4]}},
               protocol={"name": "rhfl", "public_batch_size": 30, "pretrain_epochs": 1, **protocol},
               training={"epochs": 1, "batch_size": 60, "lr": 0.1}, stop={"virtual_time_s": 23.0},
               evaluation={"every_s": 5.0})
    return raw


def _run(tmp_path, public=None, **protocol):
    sc = validate_raw(_raw(public, **protocol))
    built = build(sc)
    assert [len(p) for p in built.parts] == [60, 60, 60]
    out = tmp_path / "run"
    run_scenario(sc, out, built=built)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return built, [x["t"] for x in lines if x["event"] == "cloud_aggregate"], lines


def test_round_times_by_hand(tmp_path):
    built, aggs, lines = _run(tmp_path)
    assert sorted(built.world.tier.tolist()) == ["fast", "slow", "slow"]
    assert aggs == pytest.approx([8.82, 12.06, 22.89], abs=1e-9)
    final = [x for x in lines if x["event"] == "eval"][-1]
    assert 0.0 <= final["party_accuracy_min"] <= final["accuracy"] <= final["party_accuracy_max"] <= 1.0
    # 3 exchanges × (3 uploads + 3 target downloads) of 360 B (the last targets leave at 22.89), 3 reports of 64 B
    assert final["bytes_cloud"] == 18 * 360 + 3 * 64


def test_per_round_exchange_by_hand(tmp_path):
    # one exchange on all 60 samples (720 B: 0.72 s | 0.36 s up; 0.36 s | 0.18 s down): probabilities 1.8 s |
    # 1.92 s; closes at max(7.2 + 1.8 + 0.72, 7.68 + 1.92 + 0.36) = 9.96; an alignment epoch (3 passes on 60)
    # 5.4 s | 5.76 s and local learning 7.2 s | 7.68 s end at 9.96 + 0.36 + 12.6 = 22.92 | 9.96 + 0.18 + 13.44
    # = 23.58 (beyond the budget)
    _, aggs, _ = _run(tmp_path, exchange="per_round")
    assert aggs == pytest.approx([9.96], abs=1e-9)


def test_setup_phases_can_be_free(tmp_path):
    # charge_setup_phases: false → pre-training takes no virtual time: batch 0 closes at 1.26, batch 1 at
    # 1.26 + max(0.18 + 1.8 + 1.26, 0.09 + 1.92 + 1.14) = 4.5
    _, aggs, _ = _run(tmp_path, charge_setup_phases=False)
    assert aggs[:2] == pytest.approx([1.26, 4.5], abs=1e-9)


def test_bad_rhfl_settings_are_refused_with_their_key_paths():
    from hierfl.config.errors import ConfigError

    raw = copy.deepcopy(TINY)
    raw["protocol"] = {"name": "rhfl", "ccr_scope": "edge"}
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    # no public split, no edge servers for ccr_scope edge, and stop.rounds cannot end a run without cloud exchanges
    assert sorted(p.path for p in info.value.problems) == ["data.public", "protocol.ccr_scope", "stop.virtual_time_s"]
    raw = _raw(public={"placement": "server_only"}, exchange="per_epoch", sce_a=0.0, sce_b=0.0)
    raw["training"]["trainer"] = "fedprox"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert sorted(p.path for p in info.value.problems) == ["protocol.exchange"]  # pydantic's own check first
    raw["protocol"]["exchange"] = "per_batch"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert sorted(p.path for p in info.value.problems) == ["data.public.placement", "protocol.sce_b",
                                                           "training.trainer"]
