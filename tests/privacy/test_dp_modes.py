"""Differential privacy beyond a fixed cloud cohort (``privacy.dp``): Poisson sampling (``protocol.sampling:
bernoulli``) with noise-only empty rounds, DP at the edge tier of a hierarchy (``tier: edge``), and local DP of
FedAsync's uploads. ε is checked against dp-accounting called here on the events the docs name; the noise is
checked in real numbers; the refused combinations name their key. Bits local == Ray: the golden test of each
scenario (tests/determinism/test_golden.py -k dp_)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import pld, rdp

from hierfl.config.errors import ConfigError
from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.privacy.rules import DpMeanRule
from hierfl.privacy.server import dp_local
from hierfl.runtime.aggregation_role import Aggregation
from hierfl.scenario.loader import deep_merge, load_scenario, validate_raw
from tests.conftest import TINY, cli_refuses

ROOT = Path(__file__).resolve().parents[2]
BERNOULLI = ROOT / "scenarios" / "dp_fedavg_bernoulli.yaml"
EDGE = ROOT / "scenarios" / "dp_hierfavg_edge.yaml"
ASYNC = ROOT / "scenarios" / "dp_fedasync_local.yaml"
QUIET = ["evaluation.every_s=1000"]  # the first and last evaluation only: the tests read the summary


def _lines(run: Path, event: str) -> list[dict]:
    out = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [x for x in out if x.get("event") == event]


def _rdp_eps(event: dpa.DpEvent, count: int, delta: float) -> float:
    acc = rdp.RdpAccountant()  # add/remove (dp-accounting's default relation)
    acc.compose(dpa.SelfComposedDpEvent(event, count))
    return acc.get_epsilon(delta)


# -- Poisson sampling ------------------------------------------------------------------------------------------

def test_an_empty_poisson_round_releases_the_noise_alone():
    """No update: the rule still releases base + N(0, (zS/qN)²); without ``releases_empty`` it is an error."""
    d, z, S, qN = 40000, 1.5, 0.4, 2.5
    base = np.full(d, 0.25, dtype=np.float32)
    rule = DpMeanRule(mode="central", noise_multiplier=z, clip=S, denominator=qN, releases_empty=True)
    agg = Aggregation(rule, seed=9, expected=3)
    moved = agg.finish(None, base, tier="cloud", entity=0).astype(np.float64) - base
    assert np.std(moved) == pytest.approx(z * S / qN, rel=0.02)        # the fixed denominator qN, not 0 or 3
    assert abs(np.mean(moved)) < 4 * z * S / qN / np.sqrt(d)
    report = agg.take_reports()[0]
    assert report["m"] == 0 and report["dp_noise_std"] == pytest.approx(z * S / qN)
    # per edge server: its own fixed denominator (RuleContext.entity)
    per = DpMeanRule(mode="central", noise_multiplier=z, clip=S, denominators={0: 4.0, 3: 9.0})
    for entity, want in ((0, 4.0), (3, 9.0)):
        at = Aggregation(per, seed=9, expected=6)
        at.add(np.zeros(d, dtype=np.float32), 1.0)
        edge_avg = at.finish(None, np.zeros(d, dtype=np.float32), tier="edge", entity=entity)
        assert np.std(edge_avg) == pytest.approx(z * S / want, rel=0.02)
    with pytest.raises(ValueError, match="no update"):
        Aggregation(DpMeanRule(noise_multiplier=z, clip=S), seed=9, expected=3).finish(None, base)
    # with updates, the sum of the clipped updates is divided by qN too (z = 0: no noise)
    plain = DpMeanRule(mode="central", noise_multiplier=0.0, clip=1.0, denominator=qN, releases_empty=True)
    one = Aggregation(plain, seed=9, expected=3)
    one.add(np.array([3.0, 4.0], dtype=np.float32), 1.0)
    assert np.allclose(one.finish(None, np.zeros(2, dtype=np.float32)), [0.6 / qN, 0.8 / qN])


@pytest.fixture(scope="module")
def bernoulli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dp") / "bernoulli"
    run_scenario(load_scenario(str(BERNOULLI), overrides=["stop.rounds=30", "stop.virtual_time_s=null", *QUIET]), out)
    return out


def test_poisson_epsilon_is_dp_accounting_s_over_every_round(bernoulli):
    summary = json.loads((bernoulli / "summary.json").read_text())
    block = summary["privacy"]
    n, q, z, S = 20, 0.1, 1.0, 0.5
    delta = n ** -1.1
    empty = _lines(bernoulli, "round_empty")
    # every round is a release, the empty ones (noise alone) included: T rounds of the Poisson-sampled Gaussian
    assert summary["rounds"] == block["releases"] == block["compositions"] == 30 and len(empty) >= 1
    assert block["epsilon"] == pytest.approx(_rdp_eps(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), 30, delta),
                                             rel=1e-9)
    assert block["last_noise_std"] == pytest.approx(z * S / (q * n))
    # the devices took part in fewer rounds than there were (amplification by sampling is what ε is charged for)
    assert block["max_participations"] < 30
    assert _lines(bernoulli, "eval")[-1]["epsilon"] == block["epsilon"]


def test_poisson_pld_accountant_and_budget():
    from hierfl.privacy.config import DpConfig
    from hierfl.privacy.driver import PrivacyLedger

    dp = DpConfig(noise_multiplier=5.0, adaptive={"enabled": False}, accountant="pld", delta=1e-5)
    ledger = PrivacyLedger(dp, 100, 20, budget=None, sampling="poisson", rate=0.2)
    acc = pld.PLDAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(5.0)), 4)
    assert ledger.accountant == "pld" and ledger.epsilon(steps=4) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    # the budget (RDP): the release that would pass it is not made (an empty round counts like any other)
    dp = DpConfig(noise_multiplier=1.0, adaptive={"enabled": False}, delta=1e-5)
    budget = _rdp_eps(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 3, 1e-5) * 1.0001
    ledger = PrivacyLedger(dp, 1000, 10, budget=budget, sampling="poisson", rate=0.01)
    assert [ledger.released([]), ledger.released([4])] == [None, None] and ledger.released([]) == "epsilon"
    assert ledger.epsilon() <= budget < ledger.epsilon(steps=4)


# -- the edge tier ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["central", "local"])
def test_edge_tier_composes_each_device_s_edge_releases(tmp_path, mode):
    out = tmp_path / "edge"
    run_scenario(load_scenario(str(EDGE), overrides=["stop.rounds=2", "stop.virtual_time_s=null",
                                                     f"privacy.dp.mode={mode}", *QUIET]), out)
    summary = json.loads((out / "summary.json").read_text())
    block = summary["privacy"]
    n, z, S = 24, 2.0, 0.5
    sizes = np.bincount([int(r.split(",")[7]) for r in (out / "devices.csv").read_text().splitlines()[1:]])
    assert sizes.sum() == n and len(set(sizes)) > 1      # nearest grouping: edges of different sizes
    # 2 cloud rounds of κ2 = 2 edge rounds at each of the 4 edges: 16 noised edge aggregates; every device is in
    # its own edge's 4 (fraction 1, no churn) and in no other edge's
    assert summary["totals"]["edge_aggregations"] == block["releases"] == 16
    assert block["max_participations"] == block["compositions"] == 4 and block["mean_participations"] == 4.0
    assert block["epsilon"] == pytest.approx(_rdp_eps(dpa.GaussianDpEvent(z / 2), 4, n ** -1.1), rel=1e-9)
    # the noise on an edge's average, over that edge's own fixed denominator (its k devices, fraction 1): the
    # edge's one draw z·S/k, or its k devices' own draws summed, z·S·√k/k
    k = [int(c) for c in sizes if block["last_noise_std"] == pytest.approx(
        z * S / c * (1.0 if mode == "central" else np.sqrt(c)))]
    assert len(k) >= 1, (block["last_noise_std"], sizes)
    assert "edge rounds" in block["sampling"]


# -- asynchronous: FedAsync with local DP -------------------------------------------------------------------------

def test_dp_local_task_clips_and_noises_against_the_start_model():
    ref = np.full(30000, 1.0, dtype=np.float32)
    x = ref.copy()
    x[:2] += np.array([3.0, 4.0], dtype=np.float32)                     # an update of norm 5
    quiet = dp_local(None, [x, ref], {"clip": 0.5, "noise_multiplier": 0.0}, stream(1, "t"))
    assert np.allclose(quiet.outputs[0][:2], [1.3, 1.4]) and np.all(quiet.outputs[0][2:] == 1.0)
    assert quiet.stats == {"clipped": 1.0, "norm": pytest.approx(5.0)}
    noisy = dp_local(None, [x, ref], {"clip": 0.5, "noise_multiplier": 4.0}, stream(1, "t")).outputs[0]
    assert np.std(noisy[2:] - 1.0) == pytest.approx(4.0 * 0.5, rel=0.02)


def test_fedasync_local_epsilon_composes_a_device_s_uploads(tmp_path):
    out = tmp_path / "async"
    run_scenario(load_scenario(str(ASYNC), overrides=["stop.rounds=25", "stop.virtual_time_s=null", *QUIET]), out)
    summary = json.loads((out / "summary.json").read_text())
    block = summary["privacy"]
    k = block["max_participations"]
    # every upload is counted as it leaves its device (applied or not): at least the 25 the server applied
    assert block["releases"] >= summary["rounds"] == 25 and 2 <= k < 25 and block["compositions"] == k
    assert block["epsilon"] == pytest.approx(_rdp_eps(dpa.GaussianDpEvent(4.0 / 2), k, 20 ** -1.1), rel=1e-9)
    assert block["last_noise_std"] == 4.0 * 0.5 and block["clipped_fraction"] is not None
    assert _lines(out, "eval")[-1]["epsilon"] == block["epsilon"]


# -- refused combinations --------------------------------------------------------------------------------------

HIER = {"topology": {"edge_servers": 2}, "protocol": {"name": "hierfavg", "kappa1": 2, "weighting": "uniform"},
        "privacy": {"dp": {"mode": "central", "tier": "edge", "adaptive": {"enabled": False}}}}
FLAT = {"privacy": {"dp": {"mode": "central", "adaptive": {"enabled": False}}},
        "protocol": {"name": "fedavg", "fraction": 0.5, "weighting": "uniform", "sampling": "bernoulli"}}


@pytest.mark.parametrize(("base", "override", "path"), [
    (FLAT, {"protocol": {"name": "fedasync"}}, "privacy.dp.mode"),            # central noise on one update
    (FLAT, {"privacy": {"dp": {"tier": "edge"}}}, "privacy.dp.tier"),         # FedAvg has no edge rounds
    (FLAT, {"privacy": {"dp": {"async_policy": "nominal"}}}, "privacy.dp.async_policy"),
    (HIER, {"privacy": {"dp": {"tier": "cloud"}}}, "privacy.dp"),             # the cloud averages edges, not users
    (HIER, {"protocol": {"weighting": "samples"}}, "protocol.weighting"),
    (HIER, {"aggregation": {"edge": "median"}}, "aggregation.edge"),
    (HIER, {"stop": {"epsilon": 0.01}}, "stop.epsilon"),
    (HIER, {"privacy": {"dp": {"adaptive": {"enabled": True}}}}, "privacy.dp.adaptive.count_stddev"),
])
def test_refused_combinations_name_their_key(base, override, path):
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(base)), override)
    if raw["protocol"]["name"] == "fedasync":
        raw["protocol"] = {"name": "fedasync"}
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert any(p.path == path for p in info.value.problems), info.value.report()


def test_the_allowed_modes_validate_and_the_cli_refuses_with_exit_status_2(tmp_path, capsys):
    for raw in (deep_merge(copy.deepcopy(TINY), copy.deepcopy(HIER)),
                deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(HIER)), {"privacy": {"dp": {"mode": "local"}}}),
                deep_merge(copy.deepcopy(TINY), copy.deepcopy(FLAT)),
                deep_merge(copy.deepcopy(TINY), {"protocol": {"name": "fedasync"},
                                                 "privacy": {"dp": {"mode": "local"}}})):
        assert validate_raw(raw).privacy.dp is not None
    raw = deep_merge(deep_merge(copy.deepcopy(TINY), copy.deepcopy(FLAT)), {"privacy": {"dp": {"tier": "edge"}}})
    cli_refuses(tmp_path, capsys, raw, "privacy.dp.tier")


def test_fedasync_local_dp_resumes_bit_for_bit(tmp_path):
    """The per-upload noise streams and the accountant's counts travel with the checkpoint."""
    from tests.driver.test_recovery import assert_resumes_as_uninterrupted

    raw = deep_merge(copy.deepcopy(TINY), {
        "protocol": {"name": "fedasync", "concurrency": 2}, "stop": {"rounds": 6},
        "privacy": {"dp": {"mode": "local", "noise_multiplier": 2.0, "clip": 0.5}},
        "runtime": {"checkpoint": {"every_cloud_aggregations": 2, "every_s": None}}})
    assert_resumes_as_uninterrupted(tmp_path, raw, stop_round=3)
    block = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert block["releases"] >= 6 and block["epsilon"] > 0


def test_a_run_s_empty_first_round_moves_the_model_by_noise_alone(tmp_path):
    """4 devices on coins of q = 0.1: nobody's came up in round 0 (seed 3), and stop.rounds = 1 ends the run there,
    so the final model is the initial one plus N(0, (zS/qN)²) and nothing else."""
    from hierfl.core.rng import stream_seed
    from hierfl.learn.local import init_params

    z, S, qN = 2.0, 0.5, 0.4
    raw = deep_merge(copy.deepcopy(TINY), {
        "model": {"name": "mlp", "hidden": [64]}, "stop": {"rounds": 1},
        "protocol": {"fraction": 0.1, "sampling": "bernoulli", "weighting": "uniform"},
        "privacy": {"dp": {"mode": "central", "noise_multiplier": z, "clip": S, "adaptive": {"enabled": False}}}})
    scenario = validate_raw(raw)
    run_scenario(scenario, tmp_path / "run")
    assert [e["round"] for e in _lines(tmp_path / "run", "round_empty")] == [0]
    start = init_params(scenario.model, (5,), 3, stream_seed(3, "model.init"))
    moved = np.load(tmp_path / "run" / "final_model.npy").astype(np.float64) - start
    assert moved.size == 5 * 64 + 64 + 64 * 3 + 3 and np.all(moved != 0.0)
    assert np.std(moved) == pytest.approx(z * S / qN, rel=0.15)            # 579 draws: ~3 % standard error
    block = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert block["releases"] == 1 and block["max_participations"] == 0
    assert block["epsilon"] == pytest.approx(_rdp_eps(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(z)), 1,
                                                      4 ** -1.1), rel=1e-9)
