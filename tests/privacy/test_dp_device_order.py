"""Local DP in the deployment's order (``privacy.dp.mode: local``, synchronous rounds and the edge tier): each
device clips its update and adds its own noise as the upload leaves it, drawn from its own named stream per
upload; a transfer channel then quantises the noised upload (SecAgg would mask those levels); the aggregator
only forms the fixed-denominator mean and never clips again. The releases are recomputed here from the named
streams; local == Ray bits are the golden tests of ``dp_fedavg_local`` and ``hier_qsgd_dp_secagg``
(tests/determinism/test_golden.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hierfl.channels.driver import ChannelLinks
from hierfl.channels.math import DIRECTIONS
from hierfl.core.aggregate import RuleContext
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.privacy.rules import DpMeanRule
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY

Z, S = 1.0, 0.5
LOCAL_DP = {"protocol": {"name": "fedavg", "fraction": 1.0, "weighting": "uniform"}, "stop": {"rounds": 1},
            "evaluation": {"every_s": 1000.0},
            "privacy": {"dp": {"mode": "local", "noise_multiplier": Z, "clip": S}}}


def _record(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each device upload as a test sees it: the trained model, the model the device trained from, the device's
    release (after the DP transform) and what its receiver gets (after the channel)."""
    seen: list[dict[str, Any]] = []
    transformed, coded = ChannelLinks._transformed, ChannelLinks.coded

    def on_transform(self: ChannelLinks, src: Any, dst: Any, handle: Any) -> Any:
        out = transformed(self, src, dst, handle)
        if src[0] == "device":
            fetch = self.executor.fetch
            seen.append({"device": int(src[1]), "k": self._sent[("transform:device_uplink", int(src[1]))] - 1,
                         "trained": fetch(handle).copy(), "start": fetch(self._held[src]).copy(),
                         "release": fetch(out).copy()})
        return out

    def on_coded(self: ChannelLinks, src: Any, dst: Any, handle: Any) -> Any:
        out = coded(self, src, dst, handle)
        if src[0] == "device":
            seen[-1]["received"] = self.executor.fetch(out).copy()
        return out

    monkeypatch.setattr(ChannelLinks, "_transformed", on_transform)
    monkeypatch.setattr(ChannelLinks, "coded", on_coded)
    return seen


def _expected_release(seed: int, up: dict[str, Any]) -> np.ndarray:
    """``θ₀ + clip_S(θ − θ₀) + N(0, (zS)²)`` with the noise of the device's own stream for its k-th upload."""
    start = up["start"].astype(np.float64)
    delta = up["trained"].astype(np.float64) - start
    delta *= min(1.0, S / float(np.linalg.norm(delta)))
    draw = int(stream(seed, "transform", DIRECTIONS.index("device_uplink"), up["device"], up["k"]).integers(2**63 - 1))
    return start + delta + np.random.default_rng(draw).normal(0.0, Z * S, size=delta.size)


def test_the_local_rule_only_forms_the_fixed_denominator_mean():
    """Rows arrive noised by their devices: no clipping (norms 5 ≫ S), no draw (any seed), divided by C = 4."""
    base = np.ones(6)
    V = base + np.array([[3.0, 4.0, 0, 0, 0, 0], [0, 0, 0, 3.0, 4.0, 0]])
    rule = DpMeanRule(mode="local", noise_multiplier=Z, clip=S)
    outs = [rule.apply_in(RuleContext(stream(s, "t", 0), {}, 4, 0), V, np.ones(2), base, None) for s in (1, 2)]
    want = base + np.array([3.0, 4.0, 0, 3.0, 4.0, 0]) / 4
    assert np.array_equal(outs[0].aggregate, want) and np.array_equal(outs[1].aggregate, want)
    assert outs[0].clipped == 0
    assert outs[0].extra == {"dp_clip": S, "dp_noise_std": pytest.approx(Z * S * np.sqrt(2) / 4)}


def test_each_device_clips_and_noises_its_own_upload_and_the_cloud_only_averages(tmp_path, monkeypatch):
    seen = _record(monkeypatch)
    run_scenario(validate_raw(deep_merge(copy.deepcopy(TINY), LOCAL_DP)), tmp_path / "run")
    assert sorted(u["device"] for u in seen) == [0, 1, 2, 3] and all(u["k"] == 0 for u in seen)
    start = seen[0]["start"]
    for up in seen:
        assert np.array_equal(up["start"], start)       # every device trained from the round's model
        assert np.allclose(up["release"], _expected_release(TINY["seed"], up), rtol=0, atol=1e-6)
        assert np.array_equal(up["received"], up["release"])  # no channel: the cloud gets the release itself
        # the noise (std zS per value, 18 values) carries the release well past the clip norm: a second clipping
        # at the aggregator would show below
        assert np.linalg.norm(up["release"].astype(np.float64) - start) > 2 * S
    final = np.load(tmp_path / "run" / "final_model.npy").astype(np.float64)
    mean = start + sum(u["received"].astype(np.float64) - start for u in seen) / 4
    assert np.allclose(final, mean, rtol=0, atol=1e-6)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["robustness"]["tiers"]["cloud"]["clipped"] == 0      # the aggregator clipped nothing
    clipped = sum(float(np.linalg.norm(u["trained"].astype(np.float64) - start)) > S for u in seen)
    assert summary["privacy"]["clipped_fraction"] == clipped / 4        # counted where it happened: the devices


def test_the_channel_quantises_the_noised_upload_and_the_sum_is_of_quantised_releases(tmp_path, monkeypatch):
    """Noise first, then the shared-scale QSGD grid on the update (c = 2, 16 levels: steps of 1/8), under SecAgg
    at the cloud: each received upload is on the grid and within one step of the device's release, and the
    aggregate is the mean of the quantised releases."""
    seen = _record(monkeypatch)
    raw = deep_merge(copy.deepcopy(TINY), deep_merge(copy.deepcopy(LOCAL_DP), {
        "channels": {"device_uplink": {"name": "qsgd", "levels": 16, "shared_scale": 2.0, "applies_to": "update"}},
        "subprotocol": {"cloud": {"name": "secagg", "sender_gflops": 1.0, "sender_crypto_tier": "laptop"}}}))
    run_scenario(validate_raw(raw), tmp_path / "run")
    assert len(seen) == 4
    start, step = seen[0]["start"].astype(np.float64), 2.0 / 16
    for up in seen:
        release = up["release"].astype(np.float64)
        assert np.allclose(release, _expected_release(TINY["seed"], up), rtol=0, atol=1e-6)
        got = up["received"].astype(np.float64)
        levels = (got - start) / step                                            # the update is what is coded
        assert np.allclose(levels, np.round(levels), rtol=0, atol=1e-4)          # on the public grid
        inside = np.abs(release - start) < 2.0                                   # (beyond ±c the grid clips)
        assert np.all(np.abs(got - release)[inside] <= step + 1e-6) and not np.array_equal(got, release)
    final = np.load(tmp_path / "run" / "final_model.npy").astype(np.float64)
    mean = start + sum(u["received"].astype(np.float64) - start for u in seen) / 4
    assert np.allclose(final, mean, rtol=0, atol=1e-6)


def test_edge_tier_local_dp_resumes_bit_for_bit(tmp_path):
    """HierFAVG with local DP at the edge tier: the devices' upload streams and the accountant's counts travel
    with the checkpoint."""
    from tests.driver.test_recovery import assert_resumes_as_uninterrupted

    raw = deep_merge(copy.deepcopy(TINY), {
        "topology": {"edge_servers": 2}, "stop": {"rounds": 4},
        "protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 2, "fraction": 1.0, "weighting": "uniform"},
        "privacy": {"dp": {"mode": "local", "tier": "edge", "noise_multiplier": 2.0, "clip": 0.5}},
        "runtime": {"checkpoint": {"every_cloud_aggregations": 1, "every_s": None}}})
    assert_resumes_as_uninterrupted(tmp_path, raw, stop_round=2)
    block = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert block["releases"] > 0 and block["epsilon"] > 0 and block["clipped_fraction"] is not None


def test_local_mode_is_refused_where_uploads_bypass_the_device_uplink(monkeypatch):
    """A protocol whose uploads do not cross the device uplink (no ``device_uplink`` in its ``channel_links``)
    would never noise them: local mode is refused with its key, central mode still validates."""
    from hierfl.config.errors import ConfigError
    from hierfl.methods.fedavg.protocol import FedAvgConfig

    monkeypatch.setattr(FedAvgConfig, "channel_links", ("device_downlink",))
    raw = deep_merge(copy.deepcopy(TINY), LOCAL_DP)
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert any(p.path == "privacy.dp.mode" and "device uplink" in p.message for p in info.value.problems)
    central = deep_merge(raw, {"privacy": {"dp": {"mode": "central", "adaptive": {"enabled": False}}}})
    assert validate_raw(central).privacy.dp.mode == "central"
