"""The device energy model (``energy:``, hierfl.energy.math): hand-computed joules, outputs, off by default, bad input."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hierfl.driver import run_scenario
from hierfl.energy.math import RADIO_DEFAULTS, EnergyLedger, RadioPower, compute_j, job_flops, transfer_j
from hierfl.scenario.loader import load_scenario, validate_raw
from tests.badinput import assert_refused

ROOT = Path(__file__).resolve().parents[2]


def test_formulas_by_hand():
    lte = RADIO_DEFAULTS["4g"]
    # 1 Mbit sent in 0.5 s on LTE: 438.39 mJ + 1288.04 mW × 0.5 s = 1.08241 J
    assert transfer_j(lte, 1e6, 0.5, upload=True) == pytest.approx(0.43839 + 0.64402, rel=1e-12)
    # 2 Mbit received in 0.1 s: 2 × 51.97 mJ + 128.804 mJ
    assert transfer_j(lte, 2e6, 0.1, upload=False) == pytest.approx(0.10394 + 0.128804, rel=1e-12)
    assert job_flops(50, 400) == 60000.0            # 3 × F_fwd × samples
    assert compute_j(60000.0, 1e-9) == pytest.approx(6e-5)


def test_ledger_charges_finished_jobs_and_transfers_only():
    counters: dict[str, float] = {}
    radio = RadioPower(100.0, 10.0, 1000.0)
    led = EnergyLedger([1e-9, 2e-9], [radio, radio], forward_flops=1000.0, counters=counters)
    led.job_started(0, 0, samples=10)   # 30,000 FLOPs
    led.job_started(1, 0, samples=10)
    led.job_finished(0, 0)              # 3e-5 J
    led.job_lost(1)                     # never charged
    led.job_finished(1, 0)
    led.transfer(1, 8e6, 2.0, upload=True)   # 100 mJ/Mbit × 8 + 1000 mW × 2 s = 2.8 J
    led.transfer(0, 0.0, 0.5, upload=False)  # cut off: time on air only, 0.5 J
    assert led.compute.tolist() == pytest.approx([3e-5, 0.0])
    assert led.comm.tolist() == pytest.approx([0.5, 2.8])
    assert counters["energy_device_j"] == pytest.approx(3.30003)
    assert counters["energy_compute_j"] == pytest.approx(3e-5)
    assert counters["energy_comm_j"] == pytest.approx(3.3)


def test_ledger_charges_each_devices_own_model_flops():
    """Devices running different models (``models:``): device 1's model has 4x the forward FLOPs."""
    counters: dict[str, float] = {}
    radio = RadioPower(100.0, 10.0, 1000.0)
    led = EnergyLedger([1e-9, 1e-9], [radio, radio], forward_flops=np.array([1000.0, 4000.0]), counters=counters)
    for d in (0, 1):
        led.job_started(d, 0, samples=10)
        led.job_finished(d, 0)
    assert led.compute.tolist() == pytest.approx([3e-5, 1.2e-4])  # 3 × F × 10 × 1e-9


def _scenario(energy: dict | None = None) -> dict:
    raw = {
        "name": "energy_hand", "seed": 3,
        "data": {"dataset": {"name": "blobs", "num_samples": 400, "test_samples": 100, "num_features": 20,
                             "num_classes": 4}},
        "model": {"name": "logreg"},
        "devices": {"count": 2, "speed_sps": 100.0, "uplink_mbps": 8.0, "downlink_mbps": 16.0, "latency_ms": 10.0},
        "protocol": {"name": "fedavg", "fraction": 1.0},
        "training": {"steps": 5, "batch_size": 10, "trainer": {"name": "none"}},
        "stop": {"rounds": 2},
        "runtime": {"executor": "local"},
    }
    if energy is not None:
        raw["energy"] = energy
    return raw


def test_a_fedavg_run_by_hand(tmp_path):
    """2 devices, 2 FedAvg rounds, unlimited cloud capacity: every joule computed by hand."""
    sc = validate_raw(_scenario({"j_per_flop": {"custom": 1e-9}}))
    res = run_scenario(sc, tmp_path / "run")
    params = 20 * 4 + 4                       # logreg weights + biases
    bits = 4 * params * 8                      # float32 message
    fwd = 2 * 20 * 4                           # 2 FLOPs per multiply-add, biases not counted
    lte = RADIO_DEFAULTS["4g"]                 # energy.device_link default
    down = (lte.down_mw_per_mbps * bits / 1e6 + lte.base_mw * (0.010 + bits / 16e6)) / 1000
    up = (lte.up_mw_per_mbps * bits / 1e6 + lte.base_mw * (0.010 + bits / 8e6)) / 1000
    comp = 3 * fwd * (5 * 10) * 1e-9          # 5 steps of 10 samples
    per_device = 2 * (down + up + comp)
    totals = res.summary["totals"]
    assert totals["energy_compute_j"] == pytest.approx(2 * 2 * comp, rel=1e-9)
    assert totals["energy_comm_j"] == pytest.approx(2 * 2 * (down + up), rel=1e-9)
    assert totals["energy_device_j"] == pytest.approx(2 * per_device, rel=1e-9)
    rows = list(csv.DictReader(open(tmp_path / "run" / "devices.csv")))
    assert [float(r["energy_j"]) for r in rows] == pytest.approx([per_device] * 2, rel=1e-5)
    assert [float(r["energy_compute_j"]) for r in rows] == pytest.approx([2 * comp] * 2, rel=1e-5)
    energy = res.summary["energy"]
    assert energy["per_tier"]["custom"]["devices"] == 2
    assert energy["device_j"] == pytest.approx(2 * per_device, rel=1e-9)
    last = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl") if '"eval"' in x][-1]
    assert last["energy_device_j"] == pytest.approx(2 * per_device, rel=1e-9)


def test_tiers_take_their_link_and_j_per_flop(tmp_path):
    """A laptop (Wi-Fi) and a phone (4G): each device is charged its own tier's figures."""
    raw = _scenario({})
    raw["devices"] = {"count": 2, "tiers": {"laptop": 1, "phone_low": 1}}
    res = run_scenario(validate_raw(raw), tmp_path / "run")
    rows = {r["tier"]: r for r in csv.DictReader(open(tmp_path / "run" / "devices.csv"))}
    fwd, bits = 2 * 20 * 4, 4 * 84 * 8
    for tier, link, jpf in (("laptop", "wifi_fixed", 45.0 / 150e9), ("phone_low", "4g", 3.0 / 2e9)):
        r, radio = rows[tier], RADIO_DEFAULTS[link]
        assert float(r["energy_compute_j"]) == pytest.approx(2 * 3 * fwd * 50 * jpf, rel=1e-5)
        # each transfer: per-bit energy + base power × (latency + serialisation at the tier's bandwidth)
        lat = float(r["latency_ms"]) / 1000
        down = radio.down_mw_per_mbps * bits / 1e6 + radio.base_mw * (lat + bits / (float(r["downlink_mbps"]) * 1e6))
        up = radio.up_mw_per_mbps * bits / 1e6 + radio.base_mw * (lat + bits / (float(r["uplink_mbps"]) * 1e6))
        assert float(r["energy_comm_j"]) == pytest.approx(2 * (down + up) / 1000, rel=1e-5)
    assert set(res.summary["energy"]["per_tier"]) == {"laptop", "phone_low"}


def test_off_by_default_writes_nothing_new(tmp_path):
    res = run_scenario(validate_raw(_scenario()), tmp_path / "run")
    assert not any(k.startswith("energy") for k in res.summary["totals"])
    assert "energy" not in res.summary
    header = (tmp_path / "run" / "devices.csv").read_text().splitlines()[0]
    assert "energy" not in header and header.endswith("availability,slowdowns")
    assert all("energy" not in line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())


@pytest.mark.parametrize("energy,devices,key", [
    ({"device_link": "6g"}, None, "energy.device_link"),
    ({"tier_links": {"phone_low": "pigeon"}}, None, "energy.tier_links"),
    ({"j_per_flop": {"custom": -1}}, None, "energy.j_per_flop.custom"),
    ({}, {"count": 2, "tiers": {"mote": 1}, "custom_tiers": {"mote": {"gflops": 1, "uplink_mbps": 1,
                                                                      "downlink_mbps": 1, "rtt_ms": 10}}},
     "energy.j_per_flop.mote"),
    ({}, {"count": 2, "tiers": {"mote": 1}, "custom_tiers": {"mote": {"gflops": 1, "uplink_mbps": 1, "link": "lora",
                                                                      "downlink_mbps": 1, "rtt_ms": 10}}},
     "energy.tier_links.mote"),
])
def test_bad_energy_input_is_refused(tmp_path, capsys, energy, devices, key):
    raw = _scenario(energy)
    if devices is not None:
        raw["devices"] = devices
        if key.endswith("mote") and "j_per_flop" not in key:
            raw["energy"]["j_per_flop"] = {"mote": 1e-9}
    assert_refused(tmp_path, capsys, raw, key)


def test_shipped_energy_scenario_runs(tmp_path):
    """scenarios/energy_hierfavg.yaml: comm dominates for phones, joules add up per tier and per device."""
    sc = load_scenario(ROOT / "scenarios" / "energy_hierfavg.yaml", ["stop.rounds=2", "runtime.executor=local"])
    res = run_scenario(sc, tmp_path / "run")
    e = res.summary["energy"]
    assert e["device_j"] == pytest.approx(e["compute_j"] + e["comm_j"])
    assert sum(t["compute_j"] + t["comm_j"] for t in e["per_tier"].values()) == pytest.approx(e["device_j"])
    rows = list(csv.DictReader(open(tmp_path / "run" / "devices.csv")))
    assert sum(float(r["energy_j"]) for r in rows) == pytest.approx(e["device_j"], rel=1e-5)
    assert all(float(r["energy_j"]) > 0 and math.isfinite(float(r["energy_j"])) for r in rows)


def test_energy_survives_interrupt_and_resume(tmp_path):
    """Ctrl-C in round 2 of checkpoint_resume.yaml with energy on, resume: the uninterrupted run's joules, bit for bit."""
    from hierfl.driver import resume_run
    from tests.driver.test_recovery import SCENARIO, _stop_at, assert_same_run

    ref = tmp_path / "ref"
    run_scenario(load_scenario(str(SCENARIO), ["energy={}"]), ref, source=str(SCENARIO))
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(str(SCENARIO), ["energy={}"]), out, progress=_stop_at(2), source=str(SCENARIO))
    res = resume_run(out)
    assert res.summary["status"] == "completed" and res.summary["energy"]["device_j"] > 0
    assert_same_run(ref, out)
