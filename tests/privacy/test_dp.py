"""Differential privacy (``privacy.dp``): the clipping and noise arithmetic with real numbers, the adaptive clip
rule's direction, ε against dp-accounting computed here, the ε budget, resume, and the refused combinations."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import pld, rdp

from hierfl.config.errors import ConfigError
from hierfl.core.aggregate import RuleContext
from hierfl.core.rng import stream
from hierfl.driver import resume_run, run_scenario
from hierfl.driver.checkpoint import load_checkpoint
from hierfl.privacy import math as P
from hierfl.privacy.rules import DpMeanRule
from hierfl.scenario.loader import deep_merge, load_scenario, validate_raw
from tests.conftest import TINY, cli_refuses
from tests.driver.test_recovery import _stop_at, assert_same_run

ROOT = Path(__file__).resolve().parents[2]
CENTRAL = ROOT / "scenarios" / "dp_fedavg_central.yaml"
LOCAL = ROOT / "scenarios" / "dp_fedavg_local.yaml"
FEDBUFF = ROOT / "scenarios" / "dp_fedbuff.yaml"


def _evals(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if json.loads(line).get("event") == "eval"]


def _ctx(expected: int, seed: int = 7, state: dict | None = None) -> RuleContext:
    return RuleContext(stream(seed, "test", 0), {} if state is None else state, expected, 0)


# -- arithmetic ------------------------------------------------------------------------------------------------

def test_clipping_scales_only_updates_above_the_norm():
    base = np.array([1.0, 1.0, 1.0, 1.0])
    V = np.array([base + [3.0, 4.0, 0, 0], base + [0.3, 0.4, 0, 0]])  # update norms 5 and 0.5
    out = P.clip_updates(V, base, 1.0)
    assert np.allclose(out.norms, [5.0, 0.5])
    assert out.clipped.tolist() == [True, False]
    assert np.allclose(out.deltas, [[0.6, 0.8, 0, 0], [0.3, 0.4, 0, 0]])
    # without noise the rule is base + (sum of clipped updates) / C, C the expected cohort, not the realised 2
    rule = DpMeanRule(mode="central", noise_multiplier=0.0, clip=1.0)
    res = rule.apply_in(_ctx(4), V, np.ones(2), base, None)
    assert np.allclose(res.aggregate, base + np.array([0.9, 1.2, 0, 0]) / 4)
    assert res.clipped == 1


def test_noise_std_is_multiplier_times_clip_over_the_denominator():
    """Central mode (local mode's noise is the devices': tests/privacy/test_dp_device_order.py)."""
    d, C, m, z, S = 40000, 10, 4, 2.0, 0.5
    base = np.zeros(d)
    V = np.zeros((m, d))  # zero updates: the aggregate is the noise alone
    res = DpMeanRule(mode="central", noise_multiplier=z, clip=S).apply_in(_ctx(C), V, np.ones(m), base, None)
    want = z * S / C
    assert res.extra["dp_noise_std"] == pytest.approx(want)
    assert np.std(res.aggregate) == pytest.approx(want, rel=0.02)   # 40 000 draws: ~0.4 % standard error
    assert abs(np.mean(res.aggregate)) < 4 * want / np.sqrt(d)


def test_noise_comes_from_the_context_stream():
    V, base = np.ones((3, 50)), np.zeros(50)
    rule = DpMeanRule(noise_multiplier=1.0, clip=1.0)
    a = rule.apply_in(_ctx(3, seed=1), V, np.ones(3), base, None).aggregate
    b = rule.apply_in(_ctx(3, seed=1), V, np.ones(3), base, None).aggregate
    c = rule.apply_in(_ctx(3, seed=2), V, np.ones(3), base, None).aggregate
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()


def test_adaptive_clip_moves_towards_the_target_quantile():
    rng = np.random.default_rng(0)
    # every update fits: b̄ = 1 > γ = 0.5, the clip shrinks by exp(-0.2·0.5); none fits: it grows by exp(0.2·0.5)
    small, frac = P.adaptive_step(1.0, np.full(10, 0.1), 10, 0.0, 0.5, 0.2, rng)
    assert frac == 1.0 and small == pytest.approx(np.exp(-0.1))
    big, frac = P.adaptive_step(1.0, np.full(10, 5.0), 10, 0.0, 0.5, 0.2, rng)
    assert frac == 0.0 and big == pytest.approx(np.exp(0.1))
    # the noise split of TFF: z_Δ = (z⁻² − (2σ_b)⁻²)^(−½)
    assert P.update_noise_multiplier(1.0, 1.0) == pytest.approx(1.0 / np.sqrt(0.75))
    with pytest.raises(ValueError):
        P.update_noise_multiplier(2.0, 1.0)
    # the rule keeps the next clip in the point's state and starts from adaptive.init
    state: dict = {}
    rule = DpMeanRule(noise_multiplier=0.5, adaptive=True, init=0.1, count_stddev=1.0)
    V = np.full((4, 3), 10.0)
    res = rule.apply_in(_ctx(4, state=state), V, np.ones(4), np.zeros(3), None)
    assert res.extra["dp_clip"] == 0.1 and state["clip"] == res.extra["dp_next_clip"]


# -- the accountant wrapper -------------------------------------------------------------------------------------

def test_the_wrapper_reproduces_dp_accounting_reference_values():
    """Reference ε values of dp-accounting 0.6.0 (RDP), to 3 decimals: Poisson q = 1.31e-4 (100 of 763 430),
    z = 1, T = 3000, δ = N^-1.1; DP-SGD style q = 0.01, z = 1.1, T = 10 000, δ = 1e-5; a fixed-size sample of
    100 out of 1000 without replacement, z = 1, T = 100, δ = 1e-5 (replace-one)."""
    from hierfl.privacy.config import epsilon_of

    n = 763_430
    poisson = dpa.PoissonSampledDpEvent(100 / n, dpa.GaussianDpEvent(1.0))
    assert round(epsilon_of("rdp", False, poisson, 3000, n ** -1.1), 3) == 0.694
    sgd = dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1))
    assert round(epsilon_of("rdp", False, sgd, 10_000, 1e-5), 3) == 5.632
    wor = dpa.SampledWithoutReplacementDpEvent(1000, 100, dpa.GaussianDpEvent(1.0))
    assert round(epsilon_of("rdp", True, wor, 100, 1e-5), 2) == 14.05


def test_epsilon_grows_with_the_cohort_and_the_noise_on_the_mean_shrinks():
    """DP-FedAvg's trade-off (McMahan et al. 2018): at a fixed z, a larger cohort C spends more ε (a larger
    sampling fraction) while the noise on the average, z·S/C, falls as 1/C."""
    from hierfl.privacy.config import DpConfig
    from hierfl.privacy.driver import PrivacyLedger

    dp = DpConfig(noise_multiplier=1.0, adaptive={"enabled": False}, delta=1e-5)
    eps = [PrivacyLedger(dp, 1000, c, None).epsilon(steps=50) for c in (10, 50, 200)]
    assert eps[0] < eps[1] < eps[2]
    V, base = np.zeros((1, 20000)), np.zeros(20000)
    stds = [np.std(DpMeanRule(noise_multiplier=1.0, clip=1.0).apply_in(_ctx(c), V, np.ones(1), base, None)
                   .aggregate) for c in (10, 50, 200)]
    assert stds == pytest.approx([0.1, 0.02, 0.005], rel=0.03)


# -- accounting, budget, resume --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped central scenario, run until its ε budget ends it."""
    out = tmp_path_factory.mktemp("dp") / "central"
    run_scenario(load_scenario(str(CENTRAL), overrides=["stop.epsilon=3.0"]), out)  # a few rounds
    return out


def test_epsilon_is_dp_accounting_s_for_the_sampling_done(central):
    summary = json.loads((central / "summary.json").read_text())
    block = summary["privacy"]
    n, m, z = 100, 10, 1.5                       # the scenario's devices, fraction 0.1 cohort, noise multiplier
    delta = n ** -1.1
    assert block["delta"] == pytest.approx(delta) and block["cohort"] == m and block["accountant"] == "rdp"

    def eps(steps: int) -> float:
        # a uniform cohort of m out of n without replacement; replace-one: the sum's sensitivity is 2S, so the
        # noise z·S is a Gaussian mechanism of multiplier z/2
        acc = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
        acc.compose(dpa.SelfComposedDpEvent(
            dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z / 2)), steps))
        return acc.get_epsilon(delta)

    rounds = summary["rounds"]
    assert rounds >= 3
    assert block["releases"] == rounds and block["epsilon"] == pytest.approx(eps(rounds), rel=1e-9)
    # adaptive clipping: the noise std on the average is z_Δ·S/C for the round's clip S
    z_update = (z ** -2 - (2 * 1.0) ** -2) ** -0.5          # count_stddev 1.0 in the scenario
    assert block["last_noise_std"] == pytest.approx(z_update * block["last_clip"] / m)
    lines = _evals(central)
    assert lines[0]["epsilon"] == 0.0 and lines[-1]["epsilon"] == block["epsilon"]
    assert all(a["epsilon"] <= b["epsilon"] for a, b in zip(lines, lines[1:]))
    # the budget: the run stopped before the round that would pass it
    assert summary["stop_reason"] == "epsilon"
    assert block["epsilon"] <= 3.0 < eps(rounds + 1)


def test_local_epsilon_composes_a_device_s_own_releases(tmp_path):
    out = tmp_path / "local"
    run_scenario(load_scenario(str(LOCAL), overrides=["stop.rounds=3", "privacy.dp.accountant=pld"]), out)
    block = json.loads((out / "summary.json").read_text())["privacy"]
    k = block["max_participations"]
    assert 1 <= k <= 3 and block["compositions"] == k and block["accountant"] == "pld"
    acc = pld.PLDAccountant()
    acc.compose(dpa.GaussianDpEvent(4.0 / 2), k)
    assert block["epsilon"] == pytest.approx(acc.get_epsilon(100 ** -1.1), rel=1e-9)


def test_buffered_epsilon_is_reported_conservatively_and_nominally(tmp_path):
    out = tmp_path / "fedbuff"
    run_scenario(load_scenario(str(FEDBUFF), overrides=["stop.rounds=4", "stop.virtual_time_s=null"]), out)
    block = json.loads((out / "summary.json").read_text())["privacy"]
    n, K, z, delta = 50, 5, 1.0, 50 ** -1.1
    k, steps = block["max_participations"], block["releases"]
    assert steps == 4 and 1 <= k <= 4 and block["async_policy"] == "conservative"
    conservative = rdp.RdpAccountant()            # a device's own releases, add/remove, no amplification
    conservative.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), k))
    nominal = rdp.RdpAccountant()                 # Poisson sampling with q = K/N per server step
    nominal.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(K / n, dpa.GaussianDpEvent(z)), steps))
    assert block["epsilon"] == block["epsilon_conservative"]
    assert block["epsilon_conservative"] == pytest.approx(conservative.get_epsilon(delta), rel=1e-9)
    assert block["epsilon_nominal"] == pytest.approx(nominal.get_epsilon(delta), rel=1e-9)
    assert block["last_noise_std"] == pytest.approx(z * 0.5 / K)   # noise z·S on the sum, over K


def test_a_resumed_run_reports_the_same_epsilon(tmp_path):
    overrides = ["stop.rounds=3", "stop.epsilon=null",
                 "runtime.checkpoint={every_cloud_aggregations: 1, every_s: null}"]
    run_scenario(load_scenario(str(CENTRAL), overrides=overrides), tmp_path / "ref")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(str(CENTRAL), overrides=overrides), out, progress=_stop_at(2))
    kept = load_checkpoint(out).roles["cloud"]["agg"]
    assert kept.commits >= 1 and "clip" in kept.rule_state  # the adaptive clip travels with the checkpoint
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(tmp_path / "ref", out)
    ref = json.loads((tmp_path / "ref" / "summary.json").read_text())["privacy"]
    assert ref["epsilon"] > 0 and ref["releases"] == 3


# -- refused combinations --------------------------------------------------------------------------------------

DP = {"privacy": {"dp": {"mode": "central", "adaptive": {"enabled": False}}},
      "protocol": {"name": "fedavg", "fraction": 0.5, "weighting": "uniform"}}


@pytest.mark.parametrize(("override", "path"), [
    ({"protocol": {"name": "fedasync"}}, "privacy.dp.mode"),
    ({"protocol": {"weighting": "samples"}}, "protocol.weighting"),
    ({"privacy": {"dp": {"accountant": "pld"}}}, "privacy.dp.accountant"),
    ({"privacy": {"dp": {"async_policy": "nominal"}}}, "privacy.dp.async_policy"),
    ({"privacy": {"dp": {"mode": "local", "adaptive": {"enabled": True}}}}, "privacy.dp.adaptive.enabled"),
    ({"privacy": {"dp": {"adaptive": {"enabled": True}, "clip": 2.0}}}, "privacy.dp.clip"),
    ({"privacy": {"dp": {"adaptive": {"enabled": True}, "noise_multiplier": 5.0}}}, "privacy.dp.noise_multiplier"),
    ({"aggregation": {"cloud": "marmed"}}, "aggregation.cloud"),
    ({"training": {"trainer": "scaffold"}}, "training.trainer"),
    ({"stop": {"epsilon": 0.01}}, "stop.epsilon"),
    ({"privacy": {"dp": None}, "stop": {"epsilon": 3.0}}, "stop.epsilon"),
])
def test_refused_combinations_name_their_key(override, path):
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DP)), override)
    if override.get("protocol", {}).get("name") == "fedasync":
        raw["protocol"] = {"name": "fedasync"}
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert any(p.path == path for p in info.value.problems), info.value.report()


def test_the_cli_refuses_with_exit_status_2(tmp_path, capsys):
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DP)), {"privacy": {"dp": {"accountant": "pld"}}})
    cli_refuses(tmp_path, capsys, raw, "privacy.dp.accountant")


# -- what DP costs in emulated time and bytes ------------------------------------------------------------------

def test_a_device_pays_for_clipping_and_local_noise_before_its_upload(tmp_path):
    params, flops = 5 * 3 + 3, 100.0 * 3 * (2 * 5 * 3)   # TINY's logreg; a device's FLOP/s: speed × 3 × F_fwd
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(DP)),
                     {"privacy": {"dp": {"mode": "local"}}, "stop": {"rounds": 2}})
    out = tmp_path / "local"
    run_scenario(validate_raw(raw), out)
    spans = [e for e in json.loads((out / "trace.json").read_text()) if e.get("ph") == "X" and e["name"] == "encode"]
    want = (3.0 + 20.0 + 1.0) * params / (flops * 0.25)  # clip (norm + scale), draw and add the noise; efficiency
    assert len(spans) == 4 and all(s["dur"] / 1e6 == pytest.approx(want) for s in spans)
    block = json.loads((out / "summary.json").read_text())["privacy"]
    assert block["device_work_s"] == pytest.approx(4 * want) and block["extra_bytes"] == 0
    # adaptive clipping (central): the clipped bit travels as 4 more bytes per upload; clipping alone is charged
    raw = deep_merge(raw, {"privacy": {"dp": {"mode": "central", "noise_multiplier": 0.1,
                                              "adaptive": {"enabled": True, "count_stddev": 1.0}}}})
    raw["privacy"]["dp"].pop("clip", None)
    run_scenario(validate_raw(raw), tmp_path / "central")
    block = json.loads((tmp_path / "central" / "summary.json").read_text())["privacy"]
    assert block["extra_bytes"] == 4 * 4 and block["device_work_s"] == pytest.approx(4 * 3.0 * params / (flops * 0.25))
