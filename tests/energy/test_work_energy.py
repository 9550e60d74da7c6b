"""Device energy of the work charged in seconds (hierfl.energy.math, EnergyLedger.work): secure aggregation's
crypto and mask arithmetic, a transfer channel's encoding, privacy.dp's clipping and local noise — each at the
device's active power, P = J/FLOP × its training FLOP/s — and the sub-protocol's messages at the radio model.

The tiny scenario's devices have no tier: 100 samples/s of logreg on 5 features and 3 classes (30 forward FLOPs
a sample), so 100 · 3 · 30 = 9000 FLOP/s; ``energy.j_per_flop.custom: 1e-3`` makes P = 9 W. Their link is
``4g`` (Huang et al. 2012: α_u 438.39, α_d 51.97 mW per Mbit/s, β 1288.04 mW), 0.5 Mbit/s up, 1 Mbit/s down,
20 ms latency. The numbers below are written out by hand, not taken from the code."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from hierfl.driver import run_scenario
from tests.conftest import tiny
from tests.golden import VOLATILE

P = 1e-3 * 100 * 3 * 30                    # 9 W: J/FLOP × speed_sps × 3 × F_fwd
ENERGY = {"j_per_flop": {"custom": 1e-3}}
A_UP, A_DOWN, BETA = 438.39, 51.97, 1288.04  # 4g, mW per Mbit/s and mW
UP, DOWN, LAT = 0.5e6, 1e6, 0.020
SECAGG = {"cloud": {"name": "secagg", "sender_gflops": 10.0, "sender_crypto_tier": "phone_high"}}


def _devices(run: Path) -> list[dict[str, str]]:
    with (run / "devices.csv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _col(run: Path, key: str) -> list[float]:
    return [float(r[key]) for r in _devices(run)]


def _energy(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())["energy"]


def _run(path: Path, **kw: Any) -> Path:
    run_scenario(tiny(stop={"rounds": 1}, **kw), path)
    return path


def test_secagg_crypto_and_messages_cost_joules_by_hand(tmp_path: Path) -> None:
    """4 devices, SecAgg over the complete graph: k = 3 neighbours, t = 4, m = 18 + 1 field elements of
    b = ⌈log2(4 · 65536)⌉ = 18 bits (3 PRG bytes each); phone_high's rates (P-256 0.12 ms, AES-GCM 1200 MB/s,
    AES-CTR 1368 MB/s, Shamir 2 ns a multiply-add), mask adds at a quarter of 10 GFLOP/s."""
    plain = _run(tmp_path / "plain", energy=ENERGY)
    sub = _run(tmp_path / "sub", energy=ENERGY, subprotocol=SECAGG)
    k, t, m = 3, 4, 19
    seconds = (2 * 0.12e-3                                   # R0: two key pairs
               + 2 * k * 0.12e-3                             # R1: two agreements per neighbour
               + 2 * 9 * (k + 1) * (t - 1) * 2e-9            # R1: Shamir, 2 secrets · 9 sub-secrets to k + 1 holders
               + 76 * k / 1200e6                             # R1: k share pairs encrypted
               + 76 * k / 1200e6                             # R2: k share pairs decrypted
               + (k + 1) * m * 3 / 1368e6                    # R2: k + 1 PRG streams of m · 3 bytes
               + (k + 1) * m / 0.25 / 10e9)                  # R2: (k + 1) · m mask adds at 25 % of 10 GFLOP/s
    assert seconds == pytest.approx(9.6101e-4, rel=1e-4)     # 0.96 ms of key agreements dominate
    crypto_j = seconds * P                                   # ≈ 8.649 mJ a device
    assert _energy(sub)["compute_j"] - _energy(plain)["compute_j"] == pytest.approx(4 * crypto_j, rel=1e-9)
    for a, b in zip(_col(plain, "energy_compute_j"), _col(sub, "energy_compute_j")):  # (devices.csv: 6 digits)
        assert b - a == pytest.approx(crypto_j, abs=1e-4)
    # the radio: up 138 + 382 + 115 + 184 = 819 B (R0, R1, the masked input, R3; the plain upload's 72 B gone),
    # down 325 + 382 + 72 = 779 B; on air 4 + 3 messages' latency and their bits' time, less the plain upload's
    up_b, down_b, plain_b = 819, 779, 72
    on_air = 8 * up_b / UP + 4 * LAT + 8 * down_b / DOWN + 3 * LAT - 8 * plain_b / UP
    comm_j = (A_UP * 8 * (up_b - plain_b) / 1e6 + A_DOWN * 8 * down_b / 1e6 + BETA * on_air) / 1000
    assert _energy(sub)["comm_j"] - _energy(plain)["comm_j"] == pytest.approx(4 * comm_j, rel=1e-9)


def test_channel_encoding_and_local_dp_cost_joules_by_hand(tmp_path: Path) -> None:
    """qsgd encodes 18 values at 10 FLOP each, 180 FLOP at 25 % of 9000 FLOP/s: 0.08 s, 0.72 J at 9 W; local DP
    clips (3 FLOP) and noises (20 + 1 FLOP) each of the 18 values: 432 FLOP at 25 %: 0.192 s, 1.728 J. The
    cloud's decoding is not device energy."""
    plain = _run(tmp_path / "plain", energy=ENERGY)
    coded = _run(tmp_path / "qsgd", energy=ENERGY, channels={"device_uplink": {"name": "qsgd", "levels": 4}})
    assert _energy(coded)["compute_j"] - _energy(plain)["compute_j"] == pytest.approx(4 * 0.08 * P, rel=1e-9)
    dp = _run(tmp_path / "dp", energy=ENERGY, protocol={"weighting": "uniform"},
              privacy={"dp": {"mode": "local", "noise_multiplier": 1.0, "clip": 1.0, "delta": 1e-5}})
    assert _energy(dp)["compute_j"] - _energy(plain)["compute_j"] == pytest.approx(4 * 432 / (0.25 * 9000) * P,
                                                                                  rel=1e-9)


def test_energy_off_changes_nothing(tmp_path: Path) -> None:
    """The same SecAgg run with and without energy: the same timeline and model, no energy output."""
    on = _run(tmp_path / "on", energy=ENERGY, subprotocol=SECAGG)
    off = _run(tmp_path / "off", subprotocol=SECAGG)
    drop = {"energy_device_j", "energy_compute_j", "energy_comm_j", *VOLATILE}  # (and the wall clock's fields)
    lines = [[{k: v for k, v in json.loads(s).items() if k not in drop}
              for s in (r / "metrics.jsonl").read_text().splitlines()] for r in (on, off)]
    assert lines[0] == lines[1]
    assert not any(k.startswith("energy") for k in _devices(off)[0])
    assert "energy" not in json.loads((off / "summary.json").read_text())
