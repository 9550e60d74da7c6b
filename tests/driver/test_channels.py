"""Transfer channels (``channels:``): bytes and times by hand, the decoded model, the identity's bits,
bad keys, a plug-in channel with per-sender state, checkpoint and resume, local against Ray."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.channels.math import FP16_MAX, bf16_round, bf16_to_float32, fp16_round
from hierfl.channels.rules import CHANNELS, Bf16Channel, Fp16Channel
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.driver import resume_run, run_scenario
from hierfl.driver.checkpoint import load_checkpoint
from hierfl.plugin.testing import comparable_lines
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY
from tests.driver.test_recovery import _stop_at, assert_resumes_as_uninterrupted, assert_same_run

PARAMS = 5 * 3 + 3                 # TINY's logreg: 5 features, 3 classes
F_FWD = 2 * 5 * 3                  # its forward FLOPs per sample (2 × multiply-adds)
SPEED_SPS, UP_MBPS, DOWN_MBPS, LATENCY_S = 100.0, 0.5, 1.0, 0.020


def _raw(**override: object) -> dict:
    return deep_merge(copy.deepcopy(TINY), override)


def _run(tmp_path: Path, name: str, **override: object) -> Path:
    out = tmp_path / name
    run_scenario(validate_raw(_raw(**override)), out)
    return out


def _spans(run: Path, name: str) -> list[dict]:
    events = json.loads((run / "trace.json").read_text())
    return [e for e in events if e.get("ph") == "X" and e.get("name") == name]


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY without a channel."""
    return _run(tmp_path_factory.mktemp("plain"), "plain")


@pytest.fixture(scope="module")
def fp16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY with fp16 on the devices' uplinks."""
    return _run(tmp_path_factory.mktemp("fp16"), "fp16", channels={"uplink": "fp16"})


# -- the rounding itself --------------------------------------------------------------------------------------

def _awkward(n: int = 20000) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))).astype(np.float32)
    ties = (np.arange(1, 257, dtype=np.uint32) << 16 | 0x8000).view(np.float32)   # exactly half-way cases
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45, 1e-39, 65504.0, 65520.0],
                       dtype=np.float32)
    return np.concatenate([x, ties, -ties, special])


def test_bf16_rounding_is_torch_s():
    torch = pytest.importorskip("torch")
    x = _awkward()
    ours = bf16_round(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(ours[~nan], theirs[~nan])  # every number bit for bit (NaN payloads are free)
    back = bf16_to_float32(ours)
    assert np.isnan(back[nan]).all()
    assert np.array_equal(back, torch.from_numpy(x).to(torch.bfloat16).float().numpy(), equal_nan=True)


def test_fp16_rounds_to_nearest_even_and_saturates():
    x = _awkward()
    got = fp16_round(x)
    finite = np.abs(x) <= FP16_MAX
    assert np.array_equal(got[finite], x[finite].astype(np.float16))  # numpy's cast: nearest, ties to even
    big = np.isfinite(x) & ~finite
    assert np.array_equal(np.abs(got[big]), np.full(big.sum(), FP16_MAX, dtype=np.float16))
    assert np.isnan(got[np.isnan(x)]).all()


def test_a_cast_s_bytes_and_work_depend_on_the_shape_only():
    for ch in (Fp16Channel(), Bf16Channel(header_bytes=16, encode_ops=2.0)):
        assert ch.encoded_bytes(1000) == 2000 + ch.header_bytes
        assert ch.encode_flops(1000) == 1000 * ch.encode_ops and ch.decode_flops(1000) == 1000.0
    assert CHANNELS.get("none")().encoded_bytes(1000) == 4000


# -- a run: times by hand, bytes, the decoded model ----------------------------------------------------------

def test_fp16_uplink_times_are_the_bytes_over_the_link(fp16):
    """Every upload: encode m·1 FLOP at the device (speed × 3 × F_fwd FLOP/s, 25 % efficiency), then 2m bytes
    over the 0.5 Mbit/s uplink and its latency, then decode at the cloud (cloud_gpu, 3 500 GFLOP/s)."""
    encode_s = PARAMS * 1.0 / (SPEED_SPS * 3 * F_FWD * 0.25)
    decode_s = PARAMS * 1.0 / (3500e9 * 0.25)
    upload_s = 2 * PARAMS * 8 / 1e6 / UP_MBPS + LATENCY_S
    download_s = 4 * PARAMS * 8 / 1e6 / DOWN_MBPS + LATENCY_S
    enc, up, dec, down = (_spans(fp16, n) for n in ("encode", "upload", "decode", "download"))
    rounds = _summary(fp16)["rounds"]
    assert len(enc) == len(up) == len(dec) == 4 * rounds and len(down) == 4 * rounds
    assert all(e["args"]["bytes"] == 2 * PARAMS for e in up) and all(e["args"]["bytes"] == 4 * PARAMS for e in down)
    for e in enc:
        assert e["dur"] == pytest.approx(encode_s * 1e6, rel=1e-9)
    for e in up:
        assert e["dur"] == pytest.approx(upload_s * 1e6, rel=1e-9)
    for e in dec:
        assert e["dur"] == pytest.approx(decode_s * 1e6, rel=1e-9)
    for e in down:  # no channel downstream: today's download
        assert e["dur"] == pytest.approx(download_s * 1e6, rel=1e-9)
    # each upload starts when its encoding ends; its arrival (its decoding's end) is in the same order
    for a, b in zip(sorted(enc, key=lambda e: (e["tid"], e["ts"])), sorted(up, key=lambda e: (e["tid"], e["ts"]))):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], rel=1e-12)


def test_the_summary_counts_bytes_sent_and_saved(fp16, plain):
    s, p = _summary(fp16), _summary(plain)
    block = s["channels"]["device_uplink"]
    n = block["messages"]
    assert block["channel"] == "fp16" and n == 4 * s["rounds"]
    assert block["bytes"] == n * 2 * PARAMS and block["raw_bytes"] == n * 4 * PARAMS
    assert block["saved_bytes"] == n * 2 * PARAMS == s["channels"]["bytes_saved"]["device_tier"]
    assert s["channels"]["bytes_saved"]["edge_tier"] == 0
    assert block["encode_s"] == pytest.approx(n * PARAMS / (SPEED_SPS * 3 * F_FWD * 0.25))
    # the device tier's byte counter carries the encoded uploads (downloads unchanged)
    assert s["totals"]["bytes_device_tier"] == n * 2 * PARAMS + n * 4 * PARAMS
    assert p["totals"]["bytes_device_tier"] == 2 * n * 4 * PARAMS and "channels" not in p


def test_the_receiver_learns_from_the_rounded_model(fp16, plain, tmp_path):
    a, b = np.load(plain / "final_model.npy"), np.load(fp16 / "final_model.npy")
    assert not np.array_equal(a, b)
    assert np.allclose(a, b, atol=0.05)  # the same learning, up to half precision's rounding
    # fp16 on the downlink as well: devices train from a model every value of which is a float16
    both = _run(tmp_path, "both", channels={"uplink": "fp16", "downlink": "fp16"}, stop={"rounds": 1})
    up_only = _run(tmp_path, "up", channels={"uplink": "fp16"}, stop={"rounds": 1})
    assert not np.array_equal(np.load(both / "final_model.npy"), np.load(up_only / "final_model.npy"))
    # one round: each of the 4 devices downloaded the model once through the downlink's channel
    assert _summary(both)["channels"]["device_downlink"]["messages"] == 4


def test_none_is_today_s_bits(plain, tmp_path):
    none = _run(tmp_path, "none", channels={"uplink": "none", "device_downlink": {"name": "none"}})
    assert comparable_lines(none) == comparable_lines(plain)
    for name in ("trace.json", "devices.csv", "clusters.jsonl"):
        assert (none / name).read_bytes() == (plain / name).read_bytes(), name
    assert np.load(none / "final_model.npy").tobytes() == np.load(plain / "final_model.npy").tobytes()
    assert "channels" not in _summary(none)


def test_timing_only_charges_the_same_bytes_and_times(fp16, tmp_path):
    timing = _run(tmp_path, "timing", channels={"uplink": "fp16"}, training={"trainer": "none"})
    def strip(run: Path) -> list[dict]:
        return [{k: v for k, v in x.items() if k not in ("accuracy", "loss")} for x in comparable_lines(run)]

    assert strip(timing) == strip(fp16)
    assert _summary(timing)["channels"] == _summary(fp16)["channels"]


def test_hierfavg_device_tier_channels(tmp_path):
    out = _run(tmp_path, "hier", protocol={"name": "hierfavg", "kappa1": 1, "kappa2": 2}, topology={"edge_servers": 2},
               channels={"device_uplink": "bf16", "device_downlink": "fp16"}, stop={"rounds": 2})
    s = _summary(out)["channels"]
    assert s["device_uplink"]["bytes"] == s["device_uplink"]["messages"] * 2 * PARAMS > 0
    assert s["device_downlink"]["messages"] > 0 and s["bytes_saved"]["edge_tier"] == 0
    # an edge server decodes at its servers: figure (edge_cpu, 400 GFLOP/s)
    assert all(e["dur"] == pytest.approx(PARAMS / (400e9 * 0.25) * 1e6, rel=1e-9) for e in _spans(out, "decode")
               if e["cat"] == "edge")


# -- bad keys -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("channels", "key", "words"), [
    ({"device_uplink": "bogus"}, "channels.device_uplink", ["fp16", "bf16", "none"]),
    ({"uplink": {"name": "fp16", "header_bytes": -1}}, "channels.uplink", ["header_bytes"]),
    ({"sideways": "fp16"}, "channels.sideways", []),
    ({"edge_uplink": "fp16"}, "channels.edge_uplink", ["cannot honour", "allowed: none"]),
])
def test_bad_channels_exit_2_with_the_key_path(tmp_path, capsys, channels, key, words):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_raw(channels=channels)), encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "x"), "-q"]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and not (tmp_path / "x").exists()
    assert all(w in err for w in words), err


def test_a_protocol_that_cannot_honour_a_channel_refuses_it():
    for proto in ("dpsgd", "fedmd", "wscc"):  # serverless, outputs-exchanging, not declared (its own transfers)
        raw = _raw(protocol={"name": proto}, channels={"uplink": "fp16"})
        if proto == "dpsgd":
            raw["topology"] = {"device_graph": {"name": "ring"}}
        with pytest.raises(ConfigError) as info:
            validate_raw(raw)
        hits = [p for p in info.value.problems if p.path == "channels.uplink"]
        assert hits and "cannot honour" in hits[0].message, info.value.report()


# -- a plug-in channel with per-sender state, checkpointed ----------------------------------------------------

PLUGIN = '''
from typing import Any, ClassVar, Literal

import numpy as np

from hierfl.plugin import CHANNELS, Channel


@CHANNELS.register
class Tenths(Channel):
    """``tenths``: each value rounded to a multiple of ``step``, the rounding error fed back into the
    sender's next message (error feedback): one byte per value."""

    name: Literal["tenths"] = "tenths"
    keeps_state: ClassVar[bool] = True
    step: float = 0.1

    def encoded_bytes(self, elements: int) -> int:
        return int(elements) + 8

    def encode_flops(self, elements: int) -> float:
        return 3.0 * elements

    def encode(self, vector: Any, state: dict, rng: Any) -> Any:
        residual = state.get("residual", np.zeros_like(vector))
        p = vector + residual
        q = np.round(p / self.step) * self.step
        state["residual"] = (p - q).astype(np.float32)
        state["messages"] = state.get("messages", np.zeros(1)) + 1
        return q.astype(np.float32)

    def decode(self, message: Any, elements: int) -> Any:
        return message
'''


def _plugin(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir(exist_ok=True)
    path = folder / "tenths.py"
    path.write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    return path


def test_a_plugin_channel_with_state_runs_and_resumes(tmp_path):
    import hierfl

    plugin = _plugin(tmp_path)
    raw = _raw(plugins=[str(plugin)], channels={"device_uplink": {"name": "tenths", "step": 0.05}},
               runtime={"executor": "local", "checkpoint": {"every_cloud_aggregations": 1, "every_s": None}})
    ref = hierfl.run(copy.deepcopy(raw), out=tmp_path / "ref")
    block = ref.summary["channels"]["device_uplink"]
    assert block["channel"] == "tenths" and block["bytes"] == block["messages"] * (PARAMS + 8)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_raw(copy.deepcopy(raw)), out, progress=_stop_at(2))
    # the checkpoint holds each sender's residual and message count, kept between its messages
    kept = load_checkpoint(out).roles["cloud"]["server_state"]
    senders = sorted(e for t, e in kept if t == "channel:device_uplink")
    assert senders == [0, 1, 2, 3]
    for d in senders:
        state = kept[("channel:device_uplink", d)]
        assert state["residual"].shape == (PARAMS,) and state["messages"][0] >= 1
        assert 0 < np.abs(state["residual"]).max() <= 0.025 + 1e-6  # at most half a step, and not all zero
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(tmp_path / "ref", out, same_config=False)


def test_checkpoint_and_resume_with_fp16(tmp_path):
    raw = _raw(channels={"uplink": "fp16", "downlink": "bf16"}, stop={"rounds": 4},
               runtime={"executor": "local", "checkpoint": {"every_cloud_aggregations": 1, "every_s": None}})
    assert_resumes_as_uninterrupted(tmp_path, raw)


# -- Ray ------------------------------------------------------------------------------------------------------

@pytest.mark.ray
def test_local_and_ray_give_the_same_bits_with_a_channel(tmp_path, fp16, ray_session):
    on_ray = _run(tmp_path, "ray", channels={"uplink": "fp16"}, runtime={"executor": "ray", "workers": 2})
    assert comparable_lines(on_ray) == comparable_lines(fp16)
    assert np.load(on_ray / "final_model.npy").tobytes() == np.load(fp16 / "final_model.npy").tobytes()
    assert _summary(on_ray)["channels"] == _summary(fp16)["channels"]


# -- the edge tier: a protocol that declares edge_uplink gets its edge → cloud messages charged ----------------

EDGE_PLUGIN = '''
from typing import ClassVar, Literal

from hierfl.plugin import PROTOCOLS

HierFAVGConfig = PROTOCOLS.get("hierfavg")


@PROTOCOLS.register
class EdgeCoded(HierFAVGConfig):
    """HierFAVG declaring the edge uplink too (its edge models are charged, their values are not decoded)."""

    name: Literal["edge_coded"] = "edge_coded"
    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink", "edge_uplink")
'''


def test_edge_uplink_bytes_and_times_by_hand(tmp_path):
    import hierfl

    path = tmp_path / "edge_coded.py"
    path.write_text(textwrap.dedent(EDGE_PLUGIN), encoding="utf-8")
    raw = _raw(plugins=[str(path)], protocol={"name": "edge_coded", "kappa1": 1, "kappa2": 1},
               topology={"edge_servers": 2}, channels={"edge_uplink": {"name": "bf16", "header_bytes": 8}},
               stop={"rounds": 2})
    run = hierfl.run(raw, out=tmp_path / "run")
    block, size = run.summary["channels"]["edge_uplink"], 2 * PARAMS + 8
    assert block["messages"] == 2 * run.summary["rounds"] and block["bytes"] == block["messages"] * size
    saved = block["messages"] * (4 * PARAMS - size)
    assert run.summary["channels"]["bytes_saved"] == {"device_tier": 0, "edge_tier": saved}
    out = tmp_path / "run"
    enc = [e for e in _spans(out, "encode") if e["cat"] == "edge"]
    dec = [e for e in _spans(out, "decode") if e["cat"] == "cloud"]
    up = [e for e in _spans(out, "upload") if e["cat"] == "edge"]
    assert len(enc) == len(dec) == len(up) == block["messages"]
    assert all(e["dur"] == pytest.approx(PARAMS / (400e9 * 0.25) * 1e6, rel=1e-9) for e in enc)    # edge_cpu
    assert all(e["dur"] == pytest.approx(PARAMS / (3500e9 * 0.25) * 1e6, rel=1e-9) for e in dec)   # cloud_gpu
    # the edge → cloud link: 1 000 Mbit/s and 20 ms (topology.edge_cloud's defaults)
    assert all(e["dur"] == pytest.approx((size * 8 / 1e6 / 1000.0 + 0.020) * 1e6, rel=1e-9) for e in up)
    assert all(e["args"]["bytes"] == size for e in up)


def test_hierfavg_codes_its_edge_tier_from_the_scenario(tmp_path):
    """HierFAVG honours channels on the edge tier: each edge model goes to the cloud as the change since the
    global model its edge last received, QSGD-coded (3 norms of 8 values, 6 bits a value: 12 + 14 = 26 B), and
    the global model comes down to each edge in fp16 (36 B); the values really change (another final model than
    without channels) and a timing-only run charges the same bytes and time."""
    hier = {"protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 2}, "topology": {"edge_servers": 2},
            "stop": {"rounds": 3}}
    edge = {"edge_uplink": {"name": "qsgd", "bucket": 8}, "edge_downlink": "fp16"}
    coded = _run(tmp_path, "coded", **hier, channels=edge)
    plain = _run(tmp_path, "plain", **hier)
    timing = _run(tmp_path, "timing", **hier, channels=edge, training={"trainer": "none"})
    s = _summary(coded)
    up, down = s["channels"]["edge_uplink"], s["channels"]["edge_downlink"]
    assert up["messages"] == 2 * s["rounds"] and up["bytes"] == up["messages"] * 26
    assert down["messages"] == 2 * (s["rounds"] - 1) and down["bytes"] == down["messages"] * 2 * PARAMS
    assert s["channels"]["bytes_saved"] == {"device_tier": 0,
                                           "edge_tier": up["messages"] * (72 - 26) + down["messages"] * 36}
    assert all(e["args"]["bytes"] == 26 for e in _spans(coded, "upload") if e["cat"] == "edge")
    assert not np.array_equal(np.load(coded / "final_model.npy"), np.load(plain / "final_model.npy"))
    assert _summary(timing)["channels"] == s["channels"] and _summary(timing)["virtual_time_s"] == s["virtual_time_s"]


def test_a_message_with_a_control_vector_is_coded_and_charged_whole(tmp_path):
    """SCAFFOLD's messages carry the model and its control (layout CONTROLLED): a channel codes both parts and
    charges the bytes of both, 2 × PARAMS values per message."""
    run = _run(tmp_path, "scaffold", training={"trainer": "scaffold"}, channels={"uplink": "fp16"})
    s = _summary(run)
    block = s["channels"]["device_uplink"]
    n = block["messages"]
    assert n == 4 * s["rounds"] > 0
    assert block["bytes"] == n * 2 * (2 * PARAMS) and block["raw_bytes"] == n * 4 * (2 * PARAMS)
    assert s["totals"]["bytes_device_tier"] == n * 2 * (2 * PARAMS) + n * 4 * (2 * PARAMS)


@pytest.mark.parametrize("protocol", [{"name": "fedasync", "concurrency": 2}, {"name": "fedbuff", "concurrency": 2,
                                                                                "K": 2},
                                      {"name": "fedat", "tiers": 2}])
def test_asynchronous_protocols_on_the_base_helpers_honour_device_channels(tmp_path, protocol):
    """FedAsync, FedBuff and FedAT move models only through the protocol base's download → train → upload helpers:
    every upload is coded (2 bytes a value under fp16) and no other model message is sent on the device tier."""
    run = _run(tmp_path, protocol["name"], protocol=protocol, channels={"uplink": "fp16"},
               stop={"virtual_time_s": 6.0, "rounds": None})
    s = _summary(run)
    block = s["channels"]["device_uplink"]
    n = block["messages"]
    assert n > 0 and block["bytes"] == n * 2 * PARAMS and block["saved_bytes"] == n * 2 * PARAMS
    assert s["totals"]["bytes_device_tier"] % (2 * PARAMS) == 0
