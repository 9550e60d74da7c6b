"""Secure aggregation as sub-protocols (hierfl/methods/secagg): the masking arithmetic, SecAgg+'s parameter
finder, round times and bytes against a hand calculation, refusals.

The hand numbers use the design spec's formulas (bytes per message, operation counts, the 64-byte envelope)
and the tiny scenario's links (every device 0.5 Mbit/s up, 1 Mbit/s down, 20 ms latency), the crypto rates
of the phone_high tier (P-256 0.12 ms, AES-GCM 1200 MB/s, AES-CTR 1368 MB/s, Shamir 2 ns) and of the
cloud_gpu host (P-256 0.032 ms, AES-CTR 8951 MB/s, Shamir 1 ns), written out here, not taken from the code."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pytest

from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.learn.trainers import TRAINERS, SGDTrainer
from hierfl.methods.secagg.math import find_degree_threshold
from hierfl.methods.secagg.math_masking import SecAggAbort, aggregate
from tests.conftest import tiny

UP, DOWN, LAT = 0.5, 1.0, 0.020
ENV = 64                                   # the envelope on every message
KA, GCM, CTR, SHAMIR = 0.12e-3, 1200e6, 1368e6, 2e-9          # phone_high
S_KA, S_CTR, S_SHAMIR, S_FLOPS = 0.032e-3, 8951e6, 1e-9, 3500e9  # the cloud (cloud_gpu)
G = 10e9                                   # sender_gflops: the devices' FLOP/s (mask adds at a quarter of it)
M = 18 + 1                                 # logreg on 5 features, 3 classes: 18 parameters, plus the weight
MODEL = 18 * 4                             # the plain run's upload: the 18 float32 parameters, 72 B
# Each update is sent once, as the masked vector of round 2 (y_u = x_u + masks, Bonawitz et al. 2017 §4): the
# ordinary upload before the instance moves no bytes and keeps only its 20 ms latency, so a run with secure
# aggregation reaches the sub-protocol 8 · 72 / 0.5e6 = 1.152 ms earlier than the plain run reaches its
# aggregation, and each device sends 72 B less than the plain upload plus the sub-protocol's messages.
SAVED = 8 * MODEL / (UP * 1e6)             # 0.001152 s: the plain upload's time on the wire


def _up(b: float) -> float:
    return 8 * b / (UP * 1e6) + LAT


def _down(b: float) -> float:
    return 8 * b / (DOWN * 1e6) + LAT


# -- (1) the arithmetic: the unmasked sum is exact -------------------------------------------------------------

def _inputs(n: int, m: int, modulus: int, seed: int = 1) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {u: rng.integers(0, 1000, size=m).astype(np.uint64) for u in range(n)}


def test_masked_inputs_sum_exactly_with_and_without_dropouts() -> None:
    modulus, n = 1 << 20, 5
    xs = _inputs(n, 7, modulus)
    full = {u: [v for v in range(n) if v != u] for u in range(n)}
    want = sum(xs.values()) % modulus
    assert np.array_equal(aggregate(xs, full, 3, modulus), want)
    # a client lost after sharing its keys: its masks are rebuilt from the others' shares, its input is out
    got = aggregate(xs, full, 3, modulus, lost_after_sharing=[2])
    assert np.array_equal(got, (want - xs[2]) % modulus)
    # lost before anyone masked: the others mask without it
    got = aggregate(xs, full, 3, modulus, lost_before_masking=[4], lost_after_sharing=[0])
    assert np.array_equal(got, (xs[1] + xs[2] + xs[3]) % modulus)
    # a masked input alone is not its input (the masks hide it)
    with pytest.raises(SecAggAbort):
        aggregate(xs, full, 4, modulus, lost_after_sharing=[1, 2])


def test_masking_over_a_sparse_ring_graph_recovers_a_dropout() -> None:
    modulus, n = 1 << 16, 6
    xs = _inputs(n, 5, modulus, seed=2)
    ring = {u: [(u - 1) % n, (u + 1) % n] for u in range(n)}
    got = aggregate(xs, ring, 2, modulus, lost_after_sharing=[3], seed=5)
    assert np.array_equal(got, (sum(xs.values()) - xs[3]) % modulus)


# -- SecAgg+'s degree and threshold: the production finder's expected values ------------------------------------

@pytest.mark.parametrize("n,gamma,delta,semi,k,t", [
    (10, .05, .05, False, 2, 2), (100, .05, .05, False, 12, 6), (1000, .05, .05, False, 30, 17),
    (100, .05, .05, True, 16, 11), (10, .05, .33, False, 4, 2), (100, .33, .33, False, 68, 34),
    (1000, .33, .05, False, 78, 60), (100, .45, .45, False, 92, 46), (10, 0.0, 0.0, False, 2, 2)])
def test_the_finder_reproduces_the_reference_table(n: int, gamma: float, delta: float, semi: bool, k: int,
                                                   t: int) -> None:
    found = find_degree_threshold(n, gamma, delta, semi)
    assert found is not None and found[0] == k and found[1] <= t


def test_the_finder_refuses_an_infeasible_instance() -> None:
    assert find_degree_threshold(100, 0.5, 0.5) is None


# -- (2) round times and bytes against a hand calculation -------------------------------------------------------

def _sa(name: str, **kw: Any) -> dict[str, Any]:
    return {"cloud": {"name": name, "sender_gflops": 10.0, "sender_crypto_tier": "phone_high", **kw}}


def _lines(run: Path, event: str) -> list[dict[str, Any]]:
    return [x for x in (json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()) if x["event"] == event]


def _bytes(run: Path) -> int:
    return int(json.loads((run / "summary.json").read_text())["totals"]["bytes_cloud"])


def _hand(n: int, k: int, t: int, lost: int = 0) -> tuple[float, float, int]:
    """(the time of rounds 0–2, of round 3, one device's bytes without losses) for ``n`` devices with ``k``
    neighbours each, threshold ``t``; ``lost`` devices lost in round 2, each with ``k`` surviving neighbours."""
    bits = math.ceil(math.log2(n * 65536))
    pb = math.ceil(bits / 8)
    masked = math.ceil(M * bits / 8) + 8 + ENV
    r0 = _up(74 + ENV) + 2 * KA
    r1 = (_down(72 * k + 45 + ENV) + 2 * k * KA + 2 * 9 * (k + 1) * (t - 1) * SHAMIR + 76 * k / GCM
          + _up(106 * k + ENV))
    r2 = _down(106 * k + ENV) + 76 * k / GCM + (k + 1) * M * pb / CTR + (k + 1) * M / (0.25 * G) + _up(masked)
    dead = 1 if lost else 0  # a neighbour of a lost device is told of one loss, and still answers for it
    survivors, pairs = n - lost, lost * k
    streams = survivors + pairs
    server = ((t * t + 9 * t * n) * S_SHAMIR + pairs * S_KA + streams * M * pb / S_CTR
              + (survivors + streams) * M / (0.25 * S_FLOPS))
    r3 = _down(4 * dead + 8 + ENV) + _up(40 * k + ENV) + server
    per_device = (74 + ENV) + (72 * k + 45 + ENV) + (106 * k + ENV) + (106 * k + ENV) + masked + (8 + ENV) \
        + (40 * k + ENV)
    return r0 + r1 + r2, r3, per_device


@pytest.mark.parametrize("name,n,k,t,extra", [("secagg", 4, 3, 4, {}), ("secagg_plus", 6, 2, 2, {})])
def test_round_times_and_bytes_match_the_hand_calculation(tmp_path: Path, name: str, n: int, k: int, t: int,
                                                          extra: dict[str, Any]) -> None:
    plain, sub = tmp_path / "plain", tmp_path / "sub"
    run_scenario(tiny(devices={"count": n}, stop={"rounds": 1}), plain)
    run_scenario(tiny(devices={"count": n}, stop={"rounds": 1}, subprotocol=_sa(name, **extra)), sub)
    head, r3, per_device = _hand(n, k, t)
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    agg = _lines(sub, "cloud_aggregate")
    assert agg[0]["t"] == pytest.approx(t0 - SAVED + head + r3, abs=1e-9)
    assert agg[0]["participants"] == n
    # secagg, n = 4, k = 3: b = ⌈log2(4 · 65536)⌉ = 18 bits, the masked vector ⌈19 · 18 / 8⌉ + 8 + 64 = 115 B;
    # per device 138 + 325 + 382 + 382 + 115 + 72 + 184 = 1598 B, less the plain upload's 72 B: 1526 B
    assert _bytes(sub) - _bytes(plain) == n * (per_device - MODEL)
    if name == "secagg":
        assert per_device - MODEL == 1526
    names = [e["name"] for e in json.loads((sub / "trace.json").read_text()) if "name" in e]
    for step in ("advertise_keys", "share_keys", "masked_input", "unmasking"):
        assert names.count(f"sub:{name}:{step}") == 1
    assert names.count(f"sub:{name}:share_keys:shamir_muladd") == n   # each crypto step is a span
    assert names.count(f"sub:{name}:unmasking:server:aes_ctr") == 1


@pytest.mark.parametrize("name,n,k,t", [("secagg", 4, 3, 3), ("secagg_plus", 6, 2, 2)])
def test_a_dropout_in_masked_input_takes_the_recovery_path(tmp_path: Path, name: str, n: int, k: int, t: int) -> None:
    plain = tmp_path / "plain"
    run_scenario(tiny(devices={"count": n}, stop={"rounds": 1}), plain)
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    head, _, _ = _hand(n, k, t)
    kw = {"shamir_threshold": t}
    # device 2 leaves while the ciphertexts of round 2 travel down to it: it shared its keys, never masks
    r01 = _up(74 + ENV) + 2 * KA + (_down(72 * k + 45 + ENV) + 2 * k * KA + 2 * 9 * (k + 1) * (t - 1) * SHAMIR
                                    + 76 * k / GCM + _up(106 * k + ENV))
    sub = tmp_path / "sub"
    run_scenario(tiny(devices={"count": n}, stop={"rounds": 1}, subprotocol=_sa(name, **kw),
                      events=[{"at_s": t0 - SAVED + r01 + 0.01, "leave": {"select": {"ids": [2]}}}]), sub)
    _, r3, _ = _hand(n, k, t, lost=1)
    agg = _lines(sub, "cloud_aggregate")
    assert agg[0]["participants"] == n - 1
    assert agg[0]["t"] == pytest.approx(t0 - SAVED + head + r3, abs=1e-9)
    names = [e["name"] for e in json.loads((sub / "trace.json").read_text()) if "name" in e]
    assert names.count(f"sub:{name}:unmasking:server:ecdh_p256") == 1   # the recovery's key agreements


def test_below_the_threshold_the_round_aborts(tmp_path: Path) -> None:
    plain, sub = tmp_path / "plain", tmp_path / "sub"
    run_scenario(tiny(stop={"rounds": 1}), plain)
    t0 = _lines(plain, "cloud_aggregate")[0]["t"]
    run_scenario(tiny(stop={"rounds": None, "virtual_time_s": t0 + 1.0}, subprotocol=_sa("secagg"),
                      events=[{"at_s": t0 + 0.01, "leave": {"select": {"ids": [1]}}}]), sub)
    empty = _lines(sub, "round_empty")
    assert empty and empty[0]["subprotocol"] == "below_threshold"   # t = min(4, ⌈8/3⌉ + 1) = 4
    assert empty[0]["t"] == pytest.approx(t0 + 0.01, abs=1e-9)


def test_fedbuff_runs_it_over_each_sealed_buffer(tmp_path: Path) -> None:
    fedbuff = {"name": "fedbuff", "K": 2, "concurrency": 4, "unique_per_buffer": True}
    plain, sub = tmp_path / "plain", tmp_path / "sub"
    run_scenario(tiny(protocol=fedbuff, stop={"rounds": None, "virtual_time_s": 2}), plain)
    run_scenario(tiny(protocol=fedbuff, stop={"rounds": None, "virtual_time_s": 2}, subprotocol=_sa("secagg")), sub)
    head, r3, _ = _hand(2, 1, 2)   # two devices per buffer: one neighbour each, t = min(2, ⌈4/3⌉ + 1)
    steps_plain, steps_sub = _lines(plain, "cloud_aggregate"), _lines(sub, "cloud_aggregate")
    assert len(steps_plain) == len(steps_sub) == 2
    for a, b in zip(steps_plain, steps_sub):
        # each buffer's devices all trained from t = 0 (concurrency 4) and uploaded without bytes (SAVED earlier)
        assert b["t"] == pytest.approx(a["t"] - SAVED + head + r3, abs=1e-9) and b["participants"] == 2


@pytest.mark.parametrize("tier,zero,plain", [("edge", 4, 2), ("cloud", 2, 4)])
def test_hierfavg_sends_each_update_once_at_either_tier(tmp_path: Path, tier: str, zero: int, plain: int) -> None:
    """HierFAVG, 2 edge servers of 2 devices, one cloud round of κ1 = 2: SecAgg at the edges makes the 4 device
    uploads move 0 B (their masked inputs carry them) while the 2 edge uploads keep the model's 72 B; SecAgg at
    the cloud over the edge servers does the reverse."""
    hier = tiny(protocol={"name": "hierfavg", "kappa1": 2, "kappa2": 1}, stop={"rounds": 1},
                topology={"edge_servers": 2, "grouping": "round_robin"}, subprotocol={tier: _sa("secagg")["cloud"]})
    run_scenario(hier, tmp_path / "run")
    sizes = [e["args"]["bytes"] for e in json.loads((tmp_path / "run" / "trace.json").read_text())
             if e.get("ph") == "X" and e.get("name") == "upload"]
    assert sorted(sizes) == [0] * zero + [MODEL] * plain
    masked = [e for e in json.loads((tmp_path / "run" / "trace.json").read_text())
              if e.get("name") == "sub:secagg:masked_input:up"]
    assert len(masked) == zero   # one masked input per update the sub-protocol carries


# -- (3) refusals ------------------------------------------------------------------------------------------------

def _refused(key: str, **override: Any) -> None:
    with pytest.raises(ConfigError) as info:
        tiny(**override)
    assert key in str(info.value)


def test_refusals() -> None:
    _refused("subprotocol.cloud.name", protocol={"name": "fedasync"}, subprotocol=_sa("secagg"))
    _refused("aggregation.cloud.name", subprotocol=_sa("secagg"), aggregation={"cloud": {"name": "marmed"}})
    _refused("channels.device_uplink", subprotocol=_sa("secagg"), channels={"device_uplink": {"name": "qsgd"}})
    _refused("channels.uplink", subprotocol=_sa("secagg"), channels={"uplink": "bf16"})
    _refused("subprotocol.cloud.sender_crypto_tier", subprotocol={"cloud": {"name": "secagg", "sender_gflops": 1.0}})
    _refused("subprotocol.cloud.dropout_rate", subprotocol=_sa("secagg_plus", corrupt_rate=0.5, dropout_rate=0.5))
    _refused("subprotocol.cloud.degree", subprotocol=_sa("secagg_plus", degree=3))
    _refused("protocol.unique_per_buffer", protocol={"name": "fedbuff", "K": 2, "concurrency": 4},
             subprotocol=_sa("secagg"))


class ReadsEach(SGDTrainer):
    """A test-only trainer whose aggregator would read each update (a declaration, nothing else)."""

    name: Literal["test_reads_each"] = "test_reads_each"  # type: ignore[assignment]
    reads_each_update: ClassVar[str | None] = "scores each update on its own"


def test_a_method_that_reads_each_update_is_refused() -> None:
    from hierfl.config import late

    TRAINERS.register(ReadsEach)   # forgotten after this test (the suite's plug-in isolation)
    late.refresh()
    _refused("scores each update on its own", training={"trainer": {"name": "test_reads_each"}},
             subprotocol=_sa("secagg_plus"))


def test_secagg_plus_plans_each_round_once_per_view() -> None:
    """plan_sender builds a round's graph and live / lost sets once per view (not once per sender: that made a
    round O(n²)), and a new view (the next round, other survivors) is planned from its own sets."""
    import time

    from hierfl.methods.secagg.config import SecAggPlusConfig
    from hierfl.subprotocol.math import RoundView

    cfg = SecAggPlusConfig(corrupt_rate=0.05, dropout_rate=0.05)
    n = 2000
    ids = tuple(range(n))
    k = cfg.degree_threshold(n)[0]

    def view(rnd: int, alive: tuple[int, ...], lost: tuple[int, ...] = ()) -> RoundView:
        return RoundView(rnd, n, len(alive), n - len(alive), len(lost), 40_000, "cloud", "device", ids, alive, lost,
                         instance=0, seed=5)

    v1 = view(1, ids)
    plan = cfg.plan(v1)
    assert plan is not None
    t0 = time.perf_counter()
    full = [cfg.plan_sender(v1, d, plan) for d in ids]
    assert time.perf_counter() - t0 < 1.0  # O(n·k): a few ms per hundred senders
    assert len({p.up_bytes for p in full}) == 1 and full[0].up_bytes == 106 * k + 64  # all k alive; envelope
    # the next view loses a tenth of the clients: each sender's neighbourhood shrinks by its own lost neighbours
    lost = tuple(range(0, n, 10))
    alive = tuple(d for d in ids if d % 10)
    v2 = view(1, alive)
    graph = cfg._neighbours(v2)
    for d in (1, 2, 503, 1999):
        mine = graph[d]
        assert cfg.plan_sender(v2, d, plan).up_bytes == 106 * sum(1 for u in mine if u not in set(lost)) + 64
