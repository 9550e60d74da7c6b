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


# -- the shared draw (hierfl.protocols.cohort) and the protocols that call it ---------------------------


class _RngEnv:
    """The one thing coin_cohort asks of an environment: named seeded streams."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        from hierfl.core.rng import stream

        return stream(self.seed, name, *ids)


def test_coin_cohort_sizes_over_seeds_skip_and_redraw():
    """n = 5, q = 0.2: P(empty) = 0.8^5 = 0.328. Over 600 seeds ``skip`` gives that many empty draws and a mean
    size of n·q = 1; ``redraw`` never an empty one, with the mean of a binomial conditioned on ≥ 1, n·q/(1 − 0.328)
    = 1.488; both repeat bit for bit."""
    from hierfl.protocols.cohort import coin_cohort

    n, q, seeds = 5, 0.2, 600
    skip = [coin_cohort(_RngEnv(s), ("fedavg.select", 0), n, q) for s in range(seeds)]
    redraw = [coin_cohort(_RngEnv(s), ("fedavg.select", 0), n, q, "redraw") for s in range(seeds)]
    p0 = (1 - q) ** n
    empty = sum(not c for c in skip) / seeds
    assert abs(empty - p0) < 4 * np.sqrt(p0 * (1 - p0) / seeds)
    assert abs(np.mean([len(c) for c in skip]) - n * q) < 4 * np.sqrt(n * q * (1 - q) / seeds)
    assert all(redraw)
    assert abs(np.mean([len(c) for c in redraw]) - n * q / (1 - p0)) < 0.12
    # a redraw changes only the draws that were empty; every cohort is sorted, distinct and in range
    assert all(r == s for r, s in zip(redraw, skip) if s)
    assert all(c == sorted(set(c)) and all(0 <= i < n for i in c) for c in redraw)
    assert redraw == [coin_cohort(_RngEnv(s), ("fedavg.select", 0), n, q, "redraw") for s in range(seeds)]
    ids = np.array([7, 9, 30])
    assert coin_cohort(_RngEnv(1), ("hierfavg.select", 2, 0), ids, 1.0) == [7, 9, 30]


def test_fedavg_redraw_never_empties_a_round(tmp_path):
    """tiny (4 devices), C = 0.3: P(empty) = 0.7^4 = 0.24 a round; with redraw the 6 rounds are 6 round_close
    lines of 1..4 devices and no round_empty (the skip run of the test above has some)."""
    sc = tiny(protocol={"fraction": 0.3, "sampling": "bernoulli", "empty_cohort": "redraw"}, stop={"rounds": 6})
    run_scenario(sc, tmp_path / "a")
    rounds = _rounds(tmp_path / "a")
    assert [r["event"] for r in rounds] == ["round_close"] * 6
    assert all(1 <= r["selected"] <= 4 for r in rounds)


HIER = {"protocol": {"name": "hierfavg", "kappa1": 2, "kappa2": 2, "fraction": 0.3, "sampling": "bernoulli"},
        "topology": {"edge_servers": 2}, "devices": {"count": 8}, "stop": {"rounds": 3}}


def test_hierfavg_bernoulli_edge_rounds_vary_pass_when_empty_and_repeat(tmp_path):
    """8 devices, 2 edges of 4, C = 0.3: each edge round draws Binomial(4, 0.3) members (P(0) = 0.24); an empty
    one writes round_empty with its edge and still counts towards κ2 = 2, so 3 cloud rounds are 12 edge rounds."""
    a = run_scenario(tiny(**HIER), tmp_path / "a")
    b = run_scenario(tiny(**HIER), tmp_path / "b")
    assert a.final_params.tobytes() == b.final_params.tobytes()
    assert _rounds(tmp_path / "a") == _rounds(tmp_path / "b")
    lines = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    edge = [r for r in lines if r["event"] == "round_close" and r["server"] == "edge"]
    empty = [r for r in lines if r["event"] == "round_empty"]
    sizes = [r["selected"] for r in edge]
    assert a.summary["rounds"] == 3
    assert len(edge) + len(empty) == 12, (len(edge), len(empty))
    assert all(1 <= s <= 4 for s in sizes) and len(set(sizes)) > 1  # fixed would be ⌊0.3·4⌋ = 1 every round
    assert empty and all(r["sampling"] == "bernoulli" and r["edge"] in (0, 1) for r in empty)


def test_fedftg_takes_bernoulli_with_redraw_by_default():
    from hierfl.scenario.loader import validate_raw as _v

    sc = _v(deep_merge(dict(TINY), {"protocol": {"name": "fedftg", "sampling": "bernoulli"}}))
    assert sc.protocol.sampling == "bernoulli" and sc.protocol.empty_cohort == "redraw"
    assert tiny(protocol={"name": "fedftg"}).protocol.sampling == "fixed"


def test_sampling_keys_refused_where_meaningless():
    # empty_cohort without coins would be ignored
    msg = _problem({"protocol": {"empty_cohort": "redraw"}})
    assert "protocol.empty_cohort" in msg and "sampling: bernoulli" in msg
    # hierfavg's coins decide an edge round alone: no over-selection
    msg = _problem({**HIER, "straggler": {"name": "over_select"}})
    assert "straggler.name" in msg and "bernoulli" in msg
    # under privacy.dp: coins only where the cloud cohort is declared Poisson, and never redrawn
    dp = {"privacy": {"dp": {"mode": "central", "noise_multiplier": 1.0}}}
    msg = _problem({**HIER, **dp})
    assert "protocol.sampling" in msg and "allowed with privacy.dp: fixed" in msg
    msg = _problem({"protocol": {"sampling": "bernoulli", "empty_cohort": "redraw", "weighting": "uniform"}, **dp})
    assert "protocol.empty_cohort" in msg and "allowed with privacy.dp: skip" in msg
    # protocols whose selection is not a fraction drawn at random do not have the key
    for proto in ({"name": "bgfl", "chain_scope": "global"}, {"name": "fedasync"}, {"name": "fedmd"}):
        msg = _problem({"protocol": {**proto, "sampling": "bernoulli"}})
        assert "protocol.sampling" in msg and "unknown key" in msg


def test_fedat_wscc_fedch_bernoulli_rounds_vary_pass_when_empty_and_repeat(tmp_path):
    """FedAT (2 tiers of 4, C = 0.25: P(nobody in a tier round) = 0.75^4 = 0.32), WSCC (8 devices after the
    warm-up, C = 0.2: P(nobody at all) = 0.8^8 = 0.17) and FedCH (2 clusters, C = 0.3) draw each round by coin:
    round sizes vary, an empty round writes round_empty and the run still reaches its rounds, and a second run
    repeats it bit for bit."""
    cases = {
        "fedat": {"protocol": {"name": "fedat", "tiers": 2, "fraction": 0.25, "sampling": "bernoulli"},
                  "devices": {"count": 8}, "stop": {"rounds": 6}},
        "wscc": {"protocol": {"name": "wscc", "fraction": 0.2, "sampling": "bernoulli"},
                 "devices": {"count": 8}, "stop": {"rounds": 6}},
        "fedch": {"protocol": {"name": "fedch", "K": 2, "fraction": 0.3, "sampling": "bernoulli"},
                  "devices": {"count": 8}, "stop": {"rounds": 6}},
    }
    for name, override in cases.items():
        a = run_scenario(tiny(**override), tmp_path / f"{name}a")
        b = run_scenario(tiny(**override), tmp_path / f"{name}b")
        assert a.final_params.tobytes() == b.final_params.tobytes(), name
        assert a.summary["rounds"] == 6, name
        lines = [_lines(tmp_path / f"{name}{x}") for x in "ab"]
        assert lines[0] == lines[1], name
        # FedAT, FedCH: a tier's or cluster's round size (fixed: 1 every round); WSCC: a round's devices after the
        # warm-up
        sizes = ([r["selected"] for r in lines[0] if r["event"] == "round_close"] if name != "wscc" else
                 [r["participants"] for r in lines[0] if r["event"] == "cloud_aggregate"][1:])
        assert all(1 <= s <= 8 for s in sizes) and len(set(sizes)) > 1, (name, sizes)
        empty = [r for r in lines[0] if r["event"] == "round_empty"]
        assert empty and all(r["sampling"] == "bernoulli" for r in empty), name


def _lines(out) -> list[dict]:
    keep = ("round_close", "round_empty", "cloud_aggregate")
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if r["event"] in keep]
