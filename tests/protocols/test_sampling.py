"""Cohort sampling of a synchronous round (``protocol.sampling``): fixed size, or each device's own coin."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hierfl.core.sampling import bernoulli_cohort
from hierfl.driver import run_scenario
from hierfl.config.errors import ConfigError
from hierfl.scenario.loader import deep_merge, validate_raw
from tests.conftest import TINY, tiny


def test_a_bernoulli_cohort_has_binomial_size_and_each_member_joins_with_probability_q():
    rng = np.random.default_rng(11)
    n, q, draws = 40, 0.15, 4000
    sizes = np.empty(draws)
    joined = np.zeros(n)
    for i in range(draws):
        c = bernoulli_cohort(rng, n, q)
        assert len(set(c.tolist())) == len(c) and (c >= 0).all() and (c < n).all()
        sizes[i] = len(c)
        joined[c] += 1
    # mean n·q = 6, variance n·q·(1-q) = 5.1: the mean of 4000 sizes within 5 standard errors
    assert abs(sizes.mean() - n * q) < 5 * np.sqrt(n * q * (1 - q) / draws)
    assert abs(sizes.var() - n * q * (1 - q)) < 0.6
    assert (sizes == 0).mean() == pytest.approx((1 - q) ** n, abs=0.01)  # empty rounds happen, as often as they should
    # every device alike: each one's rate within 5 standard errors of q
    assert np.abs(joined / draws - q).max() < 5 * np.sqrt(q * (1 - q) / draws)


def test_a_bernoulli_cohort_of_an_id_array_draws_from_those_ids():
    ids = np.array([3, 8, 21, 40])
    c = bernoulli_cohort(np.random.default_rng(2), ids, 1.0)
    assert sorted(c.tolist()) == [3, 8, 21, 40]  # q = 1: everyone
    with pytest.raises(ValueError, match="q must be"):
        bernoulli_cohort(np.random.default_rng(2), ids, 0.0)


def _rounds(out) -> list[dict]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in lines if r["event"] in ("round_close", "round_empty")]


def test_bernoulli_rounds_vary_in_size_include_empty_ones_and_repeat_bit_for_bit(tmp_path):
    sc = tiny(protocol={"fraction": 0.3, "sampling": "bernoulli"}, stop={"rounds": 6})
    a = run_scenario(sc, tmp_path / "a")
    b = run_scenario(sc, tmp_path / "b")
    assert np.array_equal(a.final_params, b.final_params)
    rounds = _rounds(tmp_path / "a")
    assert rounds == _rounds(tmp_path / "b")
    sizes = [r["selected"] for r in rounds if r["event"] == "round_close"]
    empty = [r for r in rounds if r["event"] == "round_empty"]
    assert len(sizes) == a.summary["rounds"] == 6
    assert all(1 <= s <= 4 for s in sizes) and len(set(sizes)) > 1  # not a fixed ⌈0.3·4⌉ = 2 a round
    assert empty and all(r["sampling"] == "bernoulli" for r in empty)  # P(empty) = 0.7^4 = 0.24 a round
    # fixed (the default) keeps ⌈C·N⌉ every round
    fixed = run_scenario(tiny(protocol={"fraction": 0.3}, stop={"rounds": 3}), tmp_path / "f")
    assert [r["selected"] for r in _rounds(tmp_path / "f")] == [2, 2, 2] and fixed.summary["rounds"] == 3


def _problem(raw: dict) -> str:
    with pytest.raises(ConfigError) as err:
        validate_raw(deep_merge(dict(TINY), raw))
    return str(err.value)


def test_bernoulli_refuses_over_selection_and_other_protocols():
    msg = _problem({"protocol": {"sampling": "bernoulli"}, "straggler": {"name": "over_select"}})
    assert "straggler.name" in msg and "bernoulli" in msg
    # differential privacy is accounted for Poisson sampling (tests/privacy/test_dp_modes.py)
    ok = validate_raw(deep_merge(dict(TINY), {"protocol": {"sampling": "bernoulli", "weighting": "uniform"},
                                              "privacy": {"dp": {"mode": "central", "adaptive": {"enabled": False}}}}))
    assert ok.privacy.dp is not None and ok.protocol.sampling_rate() == 1.0
    msg = _problem({"protocol": {"sampling": "poisson"}})
    assert "protocol.sampling" in msg and "bernoulli" in msg
