"""Secure aggregation with a quantising upload channel (quantise, then mask): the unmasked sum of the quantised
values is exact in real finite-field masking arithmetic, the field is as wide as the senders' grid needs, a
4-device run's bytes and times against a hand calculation, and every other pairing refused with its key path.

The hand numbers use the tiny scenario (4 devices, logreg on 5 features and 3 classes: 18 parameters, 100
samples/s, 0.5 Mbit/s up, 20 ms latency) and phone_high's crypto rates (AES-CTR 1368 MB/s), written out here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hierfl.channels.math.field import FP16_LEVELS, field_bits, fp16_to_grid, grid_to_fp16_sum
from hierfl.channels.rules import CHANNELS
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.methods.secagg.math import harary_neighbours
from hierfl.methods.secagg.math_masking import aggregate
from tests.conftest import TINY, tiny

PARAMS, N, S, C = 18, 4, 4, 0.5           # the tiny model; devices; qsgd levels; the shared scale
QSGD = {"name": "qsgd", "levels": S, "shared_scale": C}


def _sa(**kw: Any) -> dict[str, Any]:
    return {"cloud": {"name": "secagg", "sender_gflops": 10.0, "sender_crypto_tier": "phone_high", **kw}}


def _updates(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(PARAMS) * 0.3).astype(np.float32) for _ in range(N)]


def _unmask(fields: dict[int, np.ndarray], bits: int, lost: tuple[int, ...] = ()) -> np.ndarray:
    """The server's sum after SecAgg's four rounds over the complete graph of the senders (t = 3)."""
    return aggregate(fields, harary_neighbours(sorted(fields), len(fields) - 1), 3, 1 << bits,
                     lost_after_sharing=lost, seed=7)


# -- (1) the arithmetic -------------------------------------------------------------------------------------------

def test_the_unmasked_sum_of_qsgd_levels_is_exact() -> None:
    """Each device quantises on the shared grid (levels −4 … 4 of 0.5/4), shifts into 0 … 8 and masks in
    Z_(2^b), b = ⌈log2(4·9)⌉ = 6: the server's unmasked sum minus the shifts is exactly the sum of the levels, and
    decodes to the sum of the values each device's message decodes to. A device lost after sharing its keys
    leaves exactly the survivors' sum."""
    ch = CHANNELS.get("qsgd").model_validate(QSGD)
    assert ch.field_levels() == 9 and field_bits(N, 9) == 6
    messages = [ch.encode(u, {}, np.random.default_rng(10 + i)) for i, u in enumerate(_updates())]
    levels = [ch.levels_of(msg, PARAMS) for msg in messages]
    assert all(lv.min() >= -S and lv.max() <= S for lv in levels) and any(lv.min() < 0 for lv in levels)
    fields = {u: (lv + S).astype(np.uint64) for u, lv in enumerate(levels)}
    total = _unmask(fields, 6).astype(np.int64) - N * S
    assert np.array_equal(total, np.sum(levels, axis=0))
    decoded = np.sum([ch.decode(msg, PARAMS).astype(np.float64) for msg in messages], axis=0)
    assert np.allclose(total * (C / S), decoded, rtol=0, atol=1e-6)
    survivors = _unmask(fields, 6, lost=(2,)).astype(np.int64) - 3 * S
    assert np.array_equal(survivors, levels[0] + levels[1] + levels[3])


def test_one_bit_less_wraps_around() -> None:
    """Values beyond ±c all quantise to +4: four senders' shifted sum is 32, which Z_(2^6) holds and Z_(2^5)
    wraps to 0: the width ⌈log2(n·L)⌉ is needed."""
    ch = CHANNELS.get("qsgd").model_validate(QSGD)
    top = {u: (ch.levels_of(ch.encode(np.full(PARAMS, 2 * C, np.float32), {}, np.random.default_rng(u)), PARAMS)
               + S).astype(np.uint64) for u in range(N)}
    assert np.all(_unmask(top, 6) == 32) and np.all(_unmask(top, 5) == 0)


def test_fp16_is_an_exact_fixed_point_grid() -> None:
    """fp16 values as integers of 2^−24 (2^41 − 2^30 + 1 of them): masked in Z_(2^43) by four senders, the
    unmasked sum is the exact sum of their fp16 values (float64 holds it exactly), largest and subnormal
    values included."""
    ch = CHANNELS.get("fp16").model_validate({"name": "fp16"})
    assert ch.field_levels() == FP16_LEVELS == 2**41 - 2**30 + 1 and field_bits(N, FP16_LEVELS) == 43
    ups = _updates(1)
    ups[0][:3] = [65504.0, -65504.0, 2.0**-24]
    halves = [np.asarray(ch.decode(ch.encode(u, {}, None), PARAMS), dtype=np.float16) for u in ups]
    shift = (FP16_LEVELS - 1) // 2
    fields = {u: (fp16_to_grid(h) + shift).astype(np.uint64) for u, h in enumerate(halves)}
    total = _unmask(fields, 43).astype(np.int64) - N * shift
    assert np.array_equal(grid_to_fp16_sum(total), np.sum([h.astype(np.float64) for h in halves], axis=0))


# -- (2) a run: bytes and times by hand ----------------------------------------------------------------------------

def _spans(run: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in json.loads((run / "trace.json").read_text()) if e.get("ph") == "X" and e.get("name") == name]


def test_four_devices_bytes_and_times_by_hand(tmp_path: Path) -> None:
    """qsgd with levels 4 and a shared scale under SecAgg, 4 devices:

    * the channel's message: a sign bit and 3 level bits per value, no norms: ⌈18·4/8⌉ = 9 B, encoded at 10 FLOP
      a value: 180 / (100 samples/s · 3 · 30 FLOP · 0.25) = 0.08 s; its levels go up once, masked in round 2,
      so the ordinary upload moves 0 B and takes only its 20 ms latency (it took 9·8/0.5 Mbit/s + 20 ms when
      the update was also sent in the clear);
    * the masked vector: 18 values and the weight at b = ⌈log2(4·9)⌉ = 6 bits: ⌈19·6/8⌉ + 8 + 64 = 87 B
      (without the channel b = ⌈log2(4·65536)⌉ = 18: 43 + 72 = 115 B);
    * its PRG work: 4 streams (3 neighbours, the self mask) of 19 one-byte elements = 76 B at 1368 MB/s
      (without the channel, 3 bytes an element: 228 B)."""
    run, plain = tmp_path / "q", tmp_path / "plain"
    run_scenario(tiny(stop={"rounds": 1}, subprotocol=_sa(), channels={"device_uplink": QSGD}), run)
    run_scenario(tiny(stop={"rounds": 1}, subprotocol=_sa()), plain)
    up, enc = _spans(run, "upload"), _spans(run, "encode")
    assert len(up) == len(enc) == N and all(e["args"]["bytes"] == 0 for e in up)
    assert all(e["dur"] == pytest.approx(0.020 * 1e6, rel=1e-9) for e in up)
    assert all(e["dur"] == pytest.approx(180 / (100 * 3 * 30 * 0.25) * 1e6, rel=1e-9) for e in enc)
    for path, size, prg in ((run, 87, 76), (plain, 115, 228)):
        masked = _spans(path, "sub:secagg:masked_input:up")
        assert len(masked) == N and all(e["args"]["bytes"] == size for e in masked)
        assert all(e["dur"] == pytest.approx((size * 8 / 0.5e6 + 0.020) * 1e6, rel=1e-9) for e in masked)
        ctr = [e for e in _spans(path, "sub:secagg:masked_input:aes_ctr") if e["cat"] == "device"]
        assert len(ctr) == N and all(e["dur"] == pytest.approx(prg / 1368e6 * 1e6, rel=1e-9) for e in ctr)
    # the channel's block reports its encoding (9 B a message); the bytes on the links are the masked vectors'
    block = json.loads((run / "summary.json").read_text())["channels"]["device_uplink"]
    assert block["bytes"] == N * 9 and block["raw_bytes"] == N * 4 * PARAMS


# -- (3) what is refused ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("channels", "sa", "key", "words"), [
    ({"device_uplink": "qsgd"}, {}, "channels.device_uplink", "shared_scale"),
    ({"uplink": "bf16"}, {}, "channels.uplink", "270 bits"),
    ({"device_uplink": {"name": "topk_ef"}}, {}, "channels.device_uplink", "positions"),
    ({"device_uplink": {"name": "randk_ef"}}, {}, "channels.device_uplink", "positions"),
    ({"device_uplink": {"name": "dgc"}}, {}, "channels.device_uplink", "positions"),
    ({"device_uplink": "sign_ef"}, {}, "channels.device_uplink", "own scale"),
    ({"device_uplink": {"name": "polyline", "exact_bytes": True}}, {}, "channels.device_uplink", "variable-length"),
    ({"device_uplink": {"name": "qsgd", "exact_bytes": True}}, {}, "channels.device_uplink", "variable-length"),
    ({"device_uplink": QSGD}, {"bits": 5}, "subprotocol.cloud.bits", "at least 6"),
    ({"device_uplink": QSGD}, {"quant_levels": 256}, "subprotocol.cloud.quant_levels", "ignored"),
    ({"device_uplink": {**QSGD, "bucket": 64}}, {}, "channels.device_uplink.bucket", "ignored"),
])
def test_pairings_that_cannot_be_summed_are_refused(channels: dict, sa: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        tiny(subprotocol=_sa(**sa), channels=channels)
    hits = [p for p in info.value.problems if p.path == key]
    assert hits and words in hits[0].message, info.value.report()


def test_a_refusal_exits_2_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**TINY, "subprotocol": _sa(), "channels": {"device_uplink": "sign_ef"}}),
                    encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "x"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "channels.device_uplink" in err and "allowed: none, fp16, qsgd with shared_scale" in err
    assert "Traceback" not in err


# -- (4) with local DP at the edge tier of a hierarchy --------------------------------------------------------------

def test_local_dp_at_the_edges_with_secagg_and_quantised_uploads(tmp_path: Path) -> None:
    """HierFAVG, 2 edge servers of 2 devices, SecAgg at each edge, qsgd on the shared grid, local DP at the edge
    tier (z = 2): every edge aggregation is a release, a device's ε is dp-accounting's GaussianDpEvent(z/2)
    composed over the edge releases it was in (computed here independently), and the masked vector is sized by
    the channel's grid (2 senders of 9 levels: 5 bits)."""
    import dp_accounting as dpa
    from dp_accounting import rdp

    hier = tiny(protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 1, "weighting": "uniform"},
                topology={"edge_servers": 2, "grouping": "round_robin"}, stop={"rounds": 2},
                subprotocol={"edge": _sa()["cloud"]}, channels={"device_uplink": QSGD},
                privacy={"dp": {"mode": "local", "tier": "edge", "noise_multiplier": 2.0, "clip": 0.5,
                                "delta": 1e-5}})
    run_scenario(hier, tmp_path / "run")
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    p, totals = s["privacy"], s["totals"]
    assert p["mode"] == "local" and p["last_clip"] == 0.5
    assert p["releases"] == totals["edge_aggregations"] == 4
    assert p["max_participations"] == totals["train_jobs"] // N == 2
    acc = rdp.RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(1.0), 2)
    assert p["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    masked = _spans(tmp_path / "run", "sub:secagg:masked_input:up")
    assert masked and all(e["args"]["bytes"] == math.ceil(19 * 5 / 8) + 72 for e in masked)


def test_the_combined_stack_resumes_bit_for_bit(tmp_path: Path) -> None:
    """Local DP at the edge tier, shared-scale qsgd uploads, SecAgg at each edge server, qsgd and fp16 on the edge
    tier: a run stopped after its second cloud round and resumed from its checkpoint writes the uninterrupted
    run's files (the accountant's counts, the channels' references and seed counters, HierFAVG's coded uploads)."""
    from hierfl.scenario.loader import deep_merge
    from tests.driver.test_recovery import assert_resumes_as_uninterrupted

    raw = deep_merge(json.loads(json.dumps(TINY)), {
        "protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 1, "weighting": "uniform"},
        "topology": {"edge_servers": 2, "grouping": "round_robin"}, "stop": {"rounds": 4},
        "subprotocol": {"edge": _sa()["cloud"]},
        "channels": {"device_uplink": QSGD, "edge_uplink": "qsgd", "edge_downlink": "fp16"},
        "privacy": {"dp": {"mode": "local", "tier": "edge", "noise_multiplier": 2.0, "clip": 0.5, "delta": 1e-5}},
        "runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1, "every_s": None}}})
    assert_resumes_as_uninterrupted(tmp_path, raw)
