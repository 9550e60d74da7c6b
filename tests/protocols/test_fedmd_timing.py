"""FedMD in the real driver: the virtual times of its phases against a hand calculation on 3 devices.

tiny's blobs: 240 training samples (5 features, 3 classes); 60 of them public, the other 180 split iid
→ 60 private samples per device. Two custom tiers, no latency:

* ``slow`` (2 devices): 1e-6 GFLOP/s = 1000 FLOP/s, uplink 0.008 Mbit/s (1000 B/s), downlink 0.016 Mbit/s,
  running ``model`` = logreg, F = 2·5·3 = 30 FLOPs per sample;
* ``fast`` (1 device): 2000 FLOP/s, uplink 0.016, downlink 0.032 Mbit/s, running mlp [4], F = 2·(5·4 + 4·3) = 64.

A training sample costs 3F FLOPs, a forward-only one F. With |A_t| = 30 and C = 3, a score message is
4·30·3 = 360 bytes. Per device (slow | fast):

* transfer learning, 1 public epoch (60) + 1 private epoch (60): 2·60·90/1000 = 10.8 s | 2·60·192/2000 = 11.52 s
* scores on A_t: 30·30/1000 = 0.9 s | 30·64/2000 = 0.96 s; upload 360·8/8000 = 0.36 s | 0.18 s
* consensus download 360·8/16000 = 0.18 s | 0.09 s; digest (1 epoch on 30): 2.7 s | 2.88 s;
  revisit (1 epoch on 60): 5.4 s | 5.76 s

Round 0 begins at 11.52 (every party ready); the consensus closes at max(11.52 + 0.9 + 0.36,
11.52 + 0.96 + 0.18) = 12.78. Round 1 begins at max(12.78 + 0.18 + 2.7 + 5.4, 12.78 + 0.09 + 2.88 + 5.76)
= 21.51 and its consensus closes at 21.51 + max(1.26, 1.14) = 22.77.
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


def _run(tmp_path, public=None, **protocol):
    raw = copy.deepcopy(TINY)
    raw["data"]["public"] = {"size": 60, **(public or {})}
    raw.update(devices={"count": 3, "tiers": {"slow": 2, "fast": 1}, "custom_tiers": TIERS},
               models={"fast": {"name": "mlp", "hidden": [4]}},
               protocol={"name": "fedmd", "align_size": 30, "transfer_public_epochs": 1, "transfer_batch_size": 60,
                         "transfer_private_epochs": 1, "digest_epochs": 1, "digest_batch_size": 30,
                         "revisit_epochs": 1, **protocol},
               training={"epochs": 1, "batch_size": 60}, stop={"rounds": 2})
    sc = validate_raw(raw)
    built = build(sc)
    assert [len(p) for p in built.parts] == [60, 60, 60]
    out = tmp_path / "run"
    run_scenario(sc, out, built=built)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return built, [x["t"] for x in lines if x["event"] == "cloud_aggregate"], lines


def test_round_times_by_hand(tmp_path):
    built, aggs, lines = _run(tmp_path)
    assert sorted(built.world.tier.tolist()) == ["fast", "slow", "slow"]
    assert aggs == pytest.approx([12.78, 22.77], abs=1e-9)
    evals = [x for x in lines if x["event"] == "eval"]
    assert evals[0]["accuracy"] is None  # at t = 0 no party has finished its transfer learning
    final = evals[-1]
    assert 0.0 <= final["party_accuracy_min"] <= final["accuracy"] <= final["party_accuracy_max"] <= 1.0
    # 2 rounds × 3 score uploads + round 0's 3 consensus downloads (the run stops at the second consensus)
    assert final["bytes_cloud"] == 9 * 360


def test_download_once_charges_the_public_data_on_each_downlink(tmp_path):
    # 60 public samples × (5 features + 1 label) × 4 B = 1440 B: 0.72 s on a slow downlink, 0.36 s on the fast
    # one; round 0 then begins at max(0.72 + 10.8, 0.36 + 11.52) = 11.88 and closes 1.26 s later
    _, aggs, _ = _run(tmp_path, public={"placement": "download_once"})
    assert aggs[0] == pytest.approx(13.14, abs=1e-9)


def test_setup_phases_can_be_free(tmp_path):
    # charge_setup_phases: false → the transfer learning takes no virtual time; round 0 closes at 1.26
    _, aggs, _ = _run(tmp_path, charge_setup_phases=False)
    assert aggs[0] == pytest.approx(1.26, abs=1e-9)


def test_bad_fedmd_settings_are_refused_with_their_key_paths():
    from hierfl.config.errors import ConfigError

    raw = copy.deepcopy(TINY)
    raw["protocol"] = {"name": "fedmd", "collaborate": False}
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    # no public split; and without collaboration no cloud aggregation ends a run bounded by rounds
    assert sorted(p.path for p in info.value.problems) == ["data.public", "stop.virtual_time_s"]
    raw["data"]["public"] = {"size": 60, "labelled": False, "placement": "server_only"}
    raw["protocol"] = {"name": "fedmd"}
    raw["training"]["trainer"] = "fedprox"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert sorted(p.path for p in info.value.problems) == ["data.public.labelled", "data.public.placement",
                                                           "training.trainer"]
