"""Update compressors as transfer channels (``qsgd``, ``sign_ef``, ``topk_ef``, ``randk_ef``, ``dgc``): the bytes
charged are the encoder's byte string, QSGD is unbiased, error feedback conserves mass, DGC's accumulators by hand,
the update against the reference both ends hold, a migration's reset, bad settings, and a resumed run."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.channels.math.codec import kept, level_bits, top_indices
from hierfl.channels.rules import CHANNELS
from hierfl.channels.driver import ChannelLinks
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY
from tests.driver.test_recovery import assert_resumes_as_uninterrupted

PARAMS = 5 * 3 + 3  # TINY's logreg

SETTINGS: list[dict[str, Any]] = [
    {"name": "qsgd"}, {"name": "qsgd", "levels": 1, "bucket": 7}, {"name": "qsgd", "levels": 255, "bucket": 64},
    {"name": "sign_ef"},
    {"name": "topk_ef"}, {"name": "topk_ef", "ratio": 0.3, "indices": "int32", "values": "fp16"},
    {"name": "topk_ef", "ratio": 0.5, "indices": "bitmap"}, {"name": "topk_ef", "ratio": 0.001, "indices": "auto"},
    {"name": "randk_ef", "ratio": 0.1}, {"name": "randk_ef", "ratio": 0.5, "values": "fp16", "rescale": True},
    {"name": "dgc"}, {"name": "dgc", "ratio": 0.2, "values": "fp16", "indices": "int32"},
]


def _channel(spec: dict[str, Any]) -> Any:
    return CHANNELS.get(spec["name"]).model_validate(spec)


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_the_bytes_charged_are_the_encoder_s_byte_string(spec):
    """For each size, two messages in a row (the second after error feedback): the encoded byte string's length is
    ``encoded_bytes(m)``, the same for any values; decoding gives ``m`` float32 values."""
    ch = _channel(spec)
    rng = np.random.default_rng(5)
    for m in (1, 7, 100, 1537):
        state: dict[str, Any] = {}
        for scale in (1.0, 1e-3):
            x = (rng.standard_normal(m) * scale).astype(np.float32)
            message = ch.encode(x, state, np.random.default_rng(m))
            assert isinstance(message, bytes) and len(message) == ch.encoded_bytes(m), (m, len(message))
            out = ch.decode(message, m)
            assert out.dtype == np.float32 and out.shape == (m,) and np.isfinite(out).all()
        assert bool(state) == ch.keeps_state
    assert ch.encoded_bytes(10_000) < 4 * 10_000  # it compresses


def test_byte_formulas_by_hand():
    m = 10_000
    assert _channel({"name": "qsgd"}).encoded_bytes(m) == 4 * 20 + m * 6 // 8   # 20 norms, 1 + 5 bits a value
    assert level_bits(16) == 5 and level_bits(1) == 1 and level_bits(15) == 4
    assert _channel({"name": "sign_ef"}).encoded_bytes(m) == 4 + m // 8
    assert _channel({"name": "topk_ef"}).encoded_bytes(m) == 1 + 4 * 100 + 4 * 100           # indices beat a bitmap
    assert _channel({"name": "topk_ef", "ratio": 0.1}).encoded_bytes(m) == 1 + m // 8 + 4 * 1000   # bitmap wins
    assert _channel({"name": "randk_ef", "values": "fp16"}).encoded_bytes(m) == 8 + 2 * 100
    assert _channel({"name": "dgc"}).encoded_bytes(m) == 1 + 4 * 10 + 4 * 10
    assert kept(5, 0.01) == 1 and kept(5, 1.0) == 5


def test_qsgd_is_unbiased_and_within_its_variance_bound():
    """E[Q(v)] = v (3 000 draws, each coordinate within 5 standard errors) and
    E‖Q(v) − v‖² ≤ min(m/s², √m/s)‖v‖²."""
    ch = _channel({"name": "qsgd", "levels": 4, "bucket": 64})
    v = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    draws = np.stack([ch.decode(ch.encode(v, {}, np.random.default_rng(i)), 64) for i in range(3000)])
    mean, se = draws.mean(axis=0), draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - v) <= 5 * se + 1e-6)
    assert np.abs(mean - v).max() > 0  # a real random quantiser, not the identity
    err = np.square(draws - v).sum(axis=1).mean()
    bound = min(64 / 4**2, np.sqrt(64) / 4) * float(np.square(v.astype(np.float64)).sum())
    assert 0 < err <= bound
    # every decoded value is the bucket's norm times a level over s
    levels = np.abs(draws[0]) / np.linalg.norm(v) * 4
    assert np.allclose(levels, np.round(levels), atol=1e-4) and levels.max() <= 4 + 1e-4


@pytest.mark.parametrize("spec", [{"name": "sign_ef"}, {"name": "topk_ef", "ratio": 0.1},
                                  {"name": "randk_ef", "ratio": 0.2, "rescale": True}])
def test_error_feedback_conserves_mass(spec):
    """Each message: decoded + new residual = vector + old residual; over a run of messages, the decoded messages
    and the last residual add up to the vectors sent."""
    ch = _channel(spec)
    rng = np.random.default_rng(1)
    state: dict[str, Any] = {}
    sent, total = np.zeros(50), np.zeros(50)
    for i in range(6):
        v = rng.standard_normal(50).astype(np.float32)
        p = v + state.get("residual", np.zeros(50, dtype=np.float32))
        out = ch.decode(ch.encode(v, state, np.random.default_rng(i)), 50)
        assert np.allclose(out + state["residual"], p, rtol=1e-6, atol=1e-6)
        sent += out
        total += v
    assert np.allclose(sent + state["residual"], total, rtol=1e-5, atol=1e-5)
    assert np.abs(state["residual"]).max() > 0


def test_what_each_compressor_sends():
    p = np.array([0.5, -3.0, 0.1, 2.0, -0.2, 0.7], dtype=np.float32)
    top = _channel({"name": "topk_ef", "ratio": 0.3})  # k = 2: the two largest magnitudes
    assert np.array_equal(top.decode(top.encode(p, {}, np.random.default_rng(0)), 6), [0, -3.0, 0, 2.0, 0, 0])
    assert list(top_indices(p, 2)) == [1, 3]
    sign = _channel({"name": "sign_ef"})
    scale = np.float32(np.abs(p.astype(np.float64)).sum() / 6)  # ‖p‖₁/d, summed in float64
    assert np.array_equal(sign.decode(sign.encode(p, {}, np.random.default_rng(0)), 6),
                          np.array([1, -1, 1, 1, -1, 1], dtype=np.float32) * scale)
    rk = _channel({"name": "randk_ef", "ratio": 0.5})
    out = rk.decode(rk.encode(p, {}, np.random.default_rng(3)), 6)
    assert np.count_nonzero(out) == 3 and np.all((out == 0) | (out == p))  # 3 values, unscaled, at their places


def test_dgc_momentum_correction_and_masking_by_hand():
    """u ← μu + g; w ← w + u; the top-k of w sent; u and w zeroed where sent."""
    ch = _channel({"name": "dgc", "ratio": 0.25, "momentum": 0.5})  # k = 1 of 4
    state: dict[str, Any] = {}
    g1 = np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float32)
    assert np.array_equal(ch.decode(ch.encode(g1, state, None), 4), [0, -2.0, 0, 0])
    assert np.array_equal(state["momentum"], [1.0, 0, 0.5, 0])
    assert np.array_equal(state["accumulated"], [1.0, 0, 0.5, 0])
    g2 = np.array([0.5, 1.0, 0.0, 0.25], dtype=np.float32)
    # u = [1.0, 1.0, 0.25, 0.25]; w = [2.0, 1.0, 0.75, 0.25]: index 0 is sent
    assert np.array_equal(ch.decode(ch.encode(g2, state, None), 4), [2.0, 0, 0, 0])
    assert np.array_equal(state["momentum"], [0, 1.0, 0.25, 0.25])
    assert np.array_equal(state["accumulated"], [0, 1.0, 0.75, 0.25])


# -- in the driver: the reference model, a migration ------------------------------------------------------------

class _Servers:
    """The executor's cloud role, reduced to the channel task run in this process (its calls recorded)."""

    def __init__(self) -> None:
        from hierfl.channels.server import channel
        self.calls: list[tuple[dict, list]] = []
        self.state: dict[tuple[str, int], dict] = {}
        self._task = channel

    def run_task(self, name: str, params: dict, seed: int, tier: str, entity: int, inputs: list) -> tuple:
        from types import SimpleNamespace
        self.calls.append((params, inputs))
        ctx = SimpleNamespace(state=self.state.setdefault((tier, entity), {}))
        result = self._task(ctx, inputs, params, np.random.default_rng(seed))
        return result.outputs, 0.0, {}, 0


def _links(placed: dict[str, Any]) -> tuple[ChannelLinks, _Servers]:
    from types import SimpleNamespace
    servers = _Servers()
    flops = SimpleNamespace(flops_per_s=lambda tier: 1e9)
    return ChannelLinks(placed, 8, 32, np.full(4, 1e9), flops, SimpleNamespace(servers=servers), 7, True), servers


def test_the_update_is_taken_from_the_model_the_device_received():
    """A device downloads ``a`` (no downlink channel), uploads ``b``: the channel encodes ``b − a`` and the server
    gets ``a + decode(…)``; top-k with k = 8 of 8 is exact, so the server gets ``b`` itself."""
    links, servers = _links({"device_uplink": _channel({"name": "topk_ef", "ratio": 1.0})})
    a = np.arange(8, dtype=np.float32)
    b = a + np.float32(0.25)
    assert links.coded(("cloud", 0), ("device", 2), a) is a
    got = links.coded(("device", 2), ("cloud", 0), b)
    params, inputs = servers.calls[-1]
    assert inputs[1] is a and np.array_equal(got, b) and "reset" not in params
    # with k = 1 of 8 the server gets a plus one coordinate of the update
    links, servers = _links({"device_uplink": _channel({"name": "topk_ef", "ratio": 0.1})})
    links.coded(("cloud", 0), ("device", 2), a)
    diff = links.coded(("device", 2), ("cloud", 0), b) - a
    assert np.count_nonzero(diff) == 1 and diff.max() == np.float32(0.25)
    # applies_to: model encodes the model (no reference passed)
    links, servers = _links({"device_uplink": _channel({"name": "topk_ef", "ratio": 0.1, "applies_to": "model"})})
    links.coded(("cloud", 0), ("device", 2), a)
    assert np.count_nonzero(links.coded(("device", 2), ("cloud", 0), b)) == 1 and len(servers.calls[-1][1]) == 1


def test_a_migration_resets_the_residual_when_configured():
    for reset in (True, False):
        links, servers = _links({"device_uplink": _channel({"name": "sign_ef", "reset_on_migration": reset,
                                                            "applies_to": "model"})})
        x = np.linspace(-1, 1, 8, dtype=np.float32)
        for edge in (0, 0, 1, 1):
            links.coded(("device", 3), ("edge", edge), x)
        flags = [bool(p.get("reset")) for p, _ in servers.calls]
        assert flags == ([False, False, True, False] if reset else [False] * 4)
        outputs = [links.coded(("device", 3), ("edge", e), x) for e in (0, 0)]  # back to edge 0
        fresh, _ = _links({"device_uplink": _channel({"name": "sign_ef", "applies_to": "model"})})
        first = fresh.coded(("device", 3), ("edge", 0), x)
        # after a reset the next message is encoded from a zero residual: a fresh sender's first message
        assert np.array_equal(outputs[0], first) == reset


# -- runs -------------------------------------------------------------------------------------------------------

def _raw(**override: Any) -> dict:
    return deep_merge(copy.deepcopy(TINY), override)


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_a_run_charges_the_encoded_bytes_and_timing_only_charges_the_same(tmp_path):
    channels = {"uplink": {"name": "qsgd", "bucket": 8}, "downlink": "qsgd"}
    run_scenario(validate_raw(_raw(channels=channels)), tmp_path / "a")
    run_scenario(validate_raw(_raw(channels=channels, training={"trainer": "none"})), tmp_path / "t")
    s, t = _summary(tmp_path / "a"), _summary(tmp_path / "t")
    up, down = s["channels"]["device_uplink"], s["channels"]["device_downlink"]
    assert up["bytes"] == up["messages"] * (4 * 3 + (PARAMS * 6 + 7) // 8)  # 3 norms, 6 bits a value
    assert down["bytes"] == down["messages"] * (4 + (PARAMS * 6 + 7) // 8)
    assert s["channels"]["bytes_saved"]["device_tier"] == up["saved_bytes"] + down["saved_bytes"] > 0
    assert t["channels"] == s["channels"] and t["virtual_time_s"] == s["virtual_time_s"]


def test_bad_compressor_settings_are_refused():
    bad = [({"downlink": "topk_ef"}, "channels.downlink", "per-sender state"),
           ({"device_downlink": {"name": "dgc"}}, "channels.device_downlink", "per-sender state"),
           ({"uplink": {"name": "none", "applies_to": "update"}}, "channels.uplink.applies_to", "allowed: model"),
           ({"uplink": {"name": "qsgd", "levels": 0}}, "channels.uplink.levels", ""),
           ({"uplink": {"name": "topk_ef", "ratio": 1.5}}, "channels.uplink.ratio", ""),
           ({"uplink": {"name": "topk_ef", "indices": "varint"}}, "channels.uplink.indices", "bitmap")]
    for channels, key, words in bad:
        with pytest.raises(ConfigError) as info:
            validate_raw(_raw(channels=channels))
        hits = [p for p in info.value.problems if p.path.startswith(key)]
        assert hits and words in hits[0].message, (channels, info.value.report())


EDGE_ONLY = '''
from typing import ClassVar, Literal

from hierfl.plugin import PROTOCOLS


@PROTOCOLS.register
class EdgeUp(PROTOCOLS.get("hierfavg")):
    """HierFAVG declaring the edge uplink too, not the edge downlink."""

    name: Literal["edge_up"] = "edge_up"
    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink", "edge_uplink")
'''


def test_an_update_needs_the_matching_downlink(tmp_path):
    path = tmp_path / "edge_up.py"
    path.write_text(EDGE_ONLY, encoding="utf-8")
    base = {"plugins": [str(path)], "protocol": {"name": "edge_up", "kappa1": 1, "kappa2": 1},
            "topology": {"edge_servers": 2}}
    with pytest.raises(ConfigError) as info:
        validate_raw(_raw(**base, channels={"edge_uplink": "qsgd"}))
    hits = [p for p in info.value.problems if p.path == "channels.edge_uplink.applies_to"]
    assert hits and "edge_downlink" in hits[0].message and "allowed: model" in hits[0].message
    validate_raw(_raw(**base, channels={"edge_uplink": {"name": "qsgd", "applies_to": "model"},
                                        "device_uplink": "qsgd"}))


def test_error_feedback_and_references_resume_bit_for_bit(tmp_path):
    """topk_ef on the update with a qsgd downlink: the residuals (server-role state) and the references (driver
    state) are checkpointed; the resumed run is the uninterrupted one, bit for bit."""
    raw = _raw(channels={"uplink": {"name": "topk_ef", "ratio": 0.2}, "downlink": "qsgd"}, stop={"rounds": 4},
               runtime={"executor": "local", "checkpoint": {"every_cloud_aggregations": 1, "every_s": None}})
    assert_resumes_as_uninterrupted(tmp_path, raw)
    # and the update is not the model: the same channel on the model itself learns differently
    model = _raw(channels={"uplink": {"name": "topk_ef", "ratio": 0.2, "applies_to": "model"}, "downlink": "qsgd"},
                 stop={"rounds": 4})
    run_scenario(validate_raw(model), tmp_path / "model")
    assert not np.array_equal(np.load(tmp_path / "model" / "final_model.npy"), np.load(tmp_path / "run" / "final_model.npy"))


def test_exact_bytes_charges_the_measured_length(tmp_path):
    """topk_ef with exact_bytes: each upload is charged its encoded length (varint gaps where shorter), at most
    the fixed length; timing-only runs charge the fixed length."""
    from hierfl.channels.math.codec import varint_decode, varint_encode

    idx = np.array([0, 3, 300, 301, 20000])
    assert varint_encode(idx) == bytes([1, 3, 0xA9, 0x02, 1, 0xF3, 0x99, 0x01])  # gaps 1, 3, 297, 1, 19699
    assert np.array_equal(varint_decode(varint_encode(idx)), idx)
    ch = _channel({"name": "topk_ef", "ratio": 0.01, "exact_bytes": True})
    x = np.random.default_rng(2).standard_normal(10_000).astype(np.float32)
    message = ch.encode(x, {}, None)
    assert message[0] == 2 and len(message) < ch.encoded_bytes(10_000)  # 100 gaps of ~100: one or two bytes each
    assert np.count_nonzero(ch.decode(message, 10_000)) == 100
    spec = {"name": "topk_ef", "ratio": 0.2, "exact_bytes": True, "indices": "int32"}
    run_scenario(validate_raw(_raw(channels={"uplink": spec})), tmp_path / "exact")
    run_scenario(validate_raw(_raw(channels={"uplink": spec}, training={"trainer": "none"})), tmp_path / "timing")
    events = json.loads((tmp_path / "exact" / "trace.json").read_text())
    uploads = [e["args"]["bytes"] for e in events if e.get("ph") == "X" and e.get("name") == "upload"]
    block = _summary(tmp_path / "exact")["channels"]["device_uplink"]
    fixed = 1 + 4 * 4 + 4 * 4  # k = 4 of 18: int32 indices
    assert block["bytes"] == sum(uploads) and all(b < fixed for b in uploads) and len(uploads) == block["messages"]
    assert _summary(tmp_path / "timing")["channels"]["device_uplink"]["bytes"] == block["messages"] * fixed
    with pytest.raises(ConfigError):  # a download is coded on arrival: its length cannot be measured first
        validate_raw(_raw(channels={"device_downlink": {"name": "dgc", "exact_bytes": True}}))


def test_qsgd_exact_bytes_is_the_elias_coded_message():
    """The same draws as the fixed layout (the same decoded vector), Elias-γ coded: its measured length."""
    v = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    fixed, exact = _channel({"name": "qsgd", "bucket": 64}), _channel({"name": "qsgd", "bucket": 64,
                                                                         "exact_bytes": True})
    a = fixed.decode(fixed.encode(v, {}, np.random.default_rng(9)), 1000)
    message = exact.encode(v, {}, np.random.default_rng(9))
    assert np.array_equal(exact.decode(message, 1000), a) and exact.measures_bytes and not fixed.measures_bytes
    # γ(x) takes 2⌊log₂x⌋+1 bits: the count of non-zero levels + 1, then per non-zero its run, sign and level
    level = np.round(np.abs(a) / np.repeat(np.frombuffer(message, np.float32, count=16), 64)[:1000] * 16)
    nz = np.flatnonzero(level)
    gamma = lambda x: 2 * np.floor(np.log2(x)).astype(int) + 1  # noqa: E731
    bits = gamma(nz.size + 1) + gamma(np.diff(nz, prepend=-1)).sum() + nz.size + gamma(level[nz]).sum()
    assert len(message) == 4 * 16 + -(-bits // 8) < fixed.encoded_bytes(1000)
    assert exact.encode_flops(1000) == 20 * 1000 and exact.encoded_bytes(1000) == fixed.encoded_bytes(1000)


def test_polyline_is_google_s_algorithm_and_charged_as_measured(tmp_path):
    from hierfl.channels.math.codec import polyline_encode

    # the algorithm's documented examples: one value, and the latitudes and longitudes of its three-point path
    assert polyline_encode(np.array([-179.9832104]), 5) == b"`~oia@"
    assert polyline_encode(np.array([38.5, 40.7, 43.252]), 5) == b"_p~iF_ulL_mqN"
    assert polyline_encode(np.array([-120.2, -120.95, -126.453]), 5) == b"~ps|UnnqCvxq`@"
    ch = _channel({"name": "polyline", "exact_bytes": True})
    v = np.array([0.1, 0.10005, -0.2, 3.0, 3.0], dtype=np.float32)
    message = ch.encode(v, {}, None)
    # steps of 1000, 0 (0.10005 in float32 is just under 1000.5 units), −3000, 32000, 0: zig-zagged 2000, 0, 5999,
    # 64000, 0: 3, 1, 3, 4 and 1 groups of 5 bits
    assert len(message) == 3 + 1 + 3 + 4 + 1
    assert np.allclose(ch.decode(message, 5), np.round(v.astype(np.float64), 4), atol=1e-6)
    with pytest.raises(ConfigError) as info:  # its length depends on the values: opt in
        validate_raw(_raw(channels={"uplink": "polyline"}))
    assert any(p.path == "channels.uplink.exact_bytes" for p in info.value.problems)
    spec = {"name": "polyline", "exact_bytes": True}
    run_scenario(validate_raw(_raw(channels={"uplink": spec})), tmp_path / "p")
    events = json.loads((tmp_path / "p" / "trace.json").read_text())
    uploads = [e["args"]["bytes"] for e in events if e.get("ph") == "X" and e.get("name") == "upload"]
    assert _summary(tmp_path / "p")["channels"]["device_uplink"]["bytes"] == sum(uploads) > 0
