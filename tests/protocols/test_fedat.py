"""FedAT (Chai et al., SC 2021): cross-tier weights, exact tier timings, the one-tier case, bad input.

Tiny scenario (tests/conftest.py): 4 devices of 60 samples, logistic regression; the devices'
speeds are set to 400, 200, 100 and 50 samples/s, so one epoch takes 0.15, 0.3, 0.6 and 1.2 s and
two equal-size tiers are {0, 1} (fast) and {2, 3} (slow).
"""

import copy
import json

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.methods.fedat.protocol import cross_tier_weights
from tests.badinput import assert_refused
from tests.conftest import TINY, tiny

SPEEDS = [400, 200, 100, 50]


def lines(out, kind):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == kind]


def fedat(rounds, **protocol):
    return tiny(protocol={"name": "fedat", "tiers": 2, "fraction": 1.0, **protocol}, training={"epochs": 1},
                evaluation={"every_s": None}, stop={"rounds": rounds})


def _built(sc):
    built = build(sc)
    built.world.speed_sps[:] = SPEEDS
    return built


def test_cross_tier_weights_mirror_the_update_counts():
    # tier m (0 = fastest) gets the count of tier M-1-m: the slowest tier the fastest tier's count
    assert cross_tier_weights([3, 1, 0]) == [0.0, 0.25, 0.75]
    assert cross_tier_weights([6, 3, 1]) == pytest.approx([0.1, 0.3, 0.6])
    assert cross_tier_weights([5]) == [1.0]
    assert cross_tier_weights([6, 3, 1], "uniform") == pytest.approx([1 / 3] * 3)
    with pytest.raises(ValueError, match="no tier has an update"):
        cross_tier_weights([0, 0])
    with pytest.raises(ValueError, match="weighting"):
        cross_tier_weights([1, 1], "bogus")


def test_tiers_run_their_rounds_without_waiting_for_each_other(tmp_path):
    sc = fedat(6)
    built = _built(sc)
    res = run_scenario(sc, tmp_path, built=built)
    w = built.world
    cycle = [w.download_s(d) + 60 / s + w.upload_s(d) for d, s in enumerate(SPEEDS)]
    fast, slow = max(cycle[0], cycle[1]), max(cycle[2], cycle[3])
    assert int(slow // fast) == 3  # the fast tier closes 3 rounds before the slow tier's first
    tiers = json.loads((tmp_path / "clusters.jsonl").read_text().splitlines()[0])
    assert tiers["grouping"] == "fedat_tiers" and tiers["members"] == [[0, 1], [2, 3]]
    assert tiers["response_s"] == [pytest.approx(cycle[:2]), pytest.approx(cycle[2:])]
    aggs = lines(tmp_path, "edge_aggregate")
    assert [a["tier"] for a in aggs] == [0, 0, 0, 1, 0, 0]
    assert [a["ids"] for a in aggs] == [[0, 1]] * 3 + [[2, 3]] + [[0, 1]] * 2
    # each tier round begins when its previous one closes: the fast tier at k·fast, the slow at slow
    assert [a["t"] for a in aggs] == pytest.approx([fast, 2 * fast, 3 * fast, slow, 4 * fast, 5 * fast])
    assert [a["tier_updates"] for a in aggs] == [[1, 0], [2, 0], [3, 0], [3, 1], [4, 1], [5, 1]]
    # w_fast = T_slow / T, w_slow = T_fast / T: the slow tier's single update outweighs the fast ones
    assert [a["tier_weights"] for a in aggs] == [[0.0, 1.0]] * 3 + [[0.25, 0.75], [0.2, 0.8],
                                                                    [pytest.approx(1 / 6), pytest.approx(5 / 6)]]
    cloud = lines(tmp_path, "cloud_aggregate")
    assert [c["ids"] for c in cloud] == [[0], [0], [0], [1], [0], [0]]
    # staleness: the slow tier started from version 0 and three global updates happened meanwhile;
    # the fast tier's 4th round started at version 3 and saw the slow tier's update land
    assert [c["staleness"] for c in cloud] == [[0], [0], [0], [3], [1], [0]]
    assert [c["weights"] for c in cloud] == [[0.0]] * 3 + [[0.75], [0.2], [pytest.approx(1 / 6)]]
    assert res.summary["rounds"] == 6 and res.summary["totals"]["device_updates"] == 12


def test_until_the_slow_tier_reports_the_global_model_is_the_initial_one(tmp_path):
    sc = fedat(3)  # three fast-tier updates, each weighted T_slow / T = 0
    built = _built(sc)
    res = run_scenario(sc, tmp_path, built=built)
    np.testing.assert_array_equal(res.final_params, built.init_params)


def test_one_tier_is_fedavg_over_every_device(tmp_path):
    one = run_scenario(fedat(1, tiers=1), tmp_path / "fedat")
    avg = run_scenario(tiny(protocol={"name": "fedavg", "fraction": 1.0}, training={"epochs": 1},
                            evaluation={"every_s": None}, stop={"rounds": 1}), tmp_path / "fedavg")
    assert lines(tmp_path / "fedat", "cloud_aggregate")[0]["t"] == pytest.approx(
        lines(tmp_path / "fedavg", "cloud_aggregate")[0]["t"])
    np.testing.assert_allclose(one.final_params, avg.final_params, rtol=1e-6, atol=1e-7)


def test_uniform_weighting_moves_the_global_model_at_once(tmp_path):
    sc = fedat(1, weighting="uniform")
    res = run_scenario(sc, tmp_path, built=_built(sc))
    assert lines(tmp_path, "edge_aggregate")[0]["tier_weights"] == [0.5, 0.5]
    assert not np.array_equal(res.final_params, _built(sc).init_params)


def test_too_many_tiers_and_edge_servers_are_refused(tmp_path, capsys):
    with pytest.raises(ConfigError) as exc:
        tiny(protocol={"name": "fedat", "tiers": 5})
    assert "protocol.tiers" in exc.value.report() and "1..4" in exc.value.report()
    raw = copy.deepcopy(TINY)
    raw["protocol"] = {"name": "fedat"}
    raw["topology"] = {"edge_servers": 2}
    assert_refused(tmp_path, capsys, raw, "topology.edge_servers")


def test_a_deadline_cuts_only_the_slow_tier_round(tmp_path):
    sc = tiny(protocol={"name": "fedat", "tiers": 2, "fraction": 1.0}, training={"epochs": 1},
              evaluation={"every_s": None}, stop={"rounds": 5}, straggler={"name": "deadline", "seconds": 1.0})
    built = _built(sc)
    run_scenario(sc, tmp_path, built=built)
    w = built.world
    fast = max(w.download_s(d) + 60 / SPEEDS[d] + w.upload_s(d) for d in (0, 1))
    closes = lines(tmp_path, "round_close")
    slow = [c for c in closes if c["tier"] == 1]
    # device 3 needs 1.24 s: the slow tier's round closes at its 1 s deadline with device 2 alone
    assert len(slow) == 1 and slow[0]["t"] == pytest.approx(1.0) and slow[0]["dropped_ids"] == [3]
    assert all(c["dropped"] == 0 for c in closes if c["tier"] == 0)  # the fast tier's deadlines never fire
    aggs = lines(tmp_path, "edge_aggregate")
    assert [(a["tier"], a["ids"]) for a in aggs] == [(0, [0, 1]), (0, [0, 1]), (1, [2]), (0, [0, 1]), (0, [0, 1])]
    assert [a["t"] for a in aggs] == pytest.approx([fast, 2 * fast, 1.0, 3 * fast, 4 * fast])


def test_churn_runs_every_tier_and_counts_losses(tmp_path):
    sc = tiny(devices={"count": 8, "availability": {"name": "markov", "mean_up_s": 3.0, "mean_down_s": 2.0},
                       "dropout": 0.2},
              data={"dataset": {"num_samples": 480}}, protocol={"name": "fedat", "tiers": 2, "fraction": 0.5},
              training={"epochs": 1}, stop={"virtual_time_s": 30, "rounds": 200}, evaluation={"every_s": 5})
    res = run_scenario(sc, tmp_path)
    t = res.summary["totals"]
    assert res.summary["status"] == "completed" and t["devices_lost"] > 0
    assert {a["tier"] for a in lines(tmp_path, "edge_aggregate")} == {0, 1}
