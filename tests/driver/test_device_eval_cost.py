"""Per-device evaluation costs virtual time only if the scenario says so (personalisation, ``evaluation.device_eval_cost``)."""

from __future__ import annotations

import copy
import json

import pytest

from hierfl.assemble import build
from hierfl.driver import run_scenario
from tests.conftest import TINY, tiny


def _run(tmp_path, cost: str, **over):
    over.setdefault("evaluation", {})["device_eval_cost"] = cost
    sc = tiny(data={"local_test_fraction": 0.2}, **over)
    b = build(sc)
    res = run_scenario(sc, tmp_path / cost, built=b)
    lines = [json.loads(x) for x in (tmp_path / cost / "metrics.jsonl").read_text().splitlines()]
    aggs = [x["t"] for x in lines if x["event"] == "cloud_aggregate"]
    return b, res, aggs


def test_forward_cost_delays_the_first_jobs_by_hand(tmp_path):
    # tiny: 4 devices × 60 rows, 20 % held out → 12 test rows and 48 training rows each; 100 samples/s.
    # One evaluation's forward pass: 12 / (3 · 100) = 0.04 s. The t = 0 evaluation keeps every device busy
    # until 0.04 s; its model download takes 0.020576 s, so the first job waits 0.019424 s.
    b, free, free_aggs = _run(tmp_path, "free")
    _, fwd, fwd_aggs = _run(tmp_path, "forward")
    assert [len(t) for _, _, t in b.eval_sets] == [12] * 4
    dl, ul, train = b.world.download_s(0), b.world.upload_s(0), b.world.compute_s(0, b.spec)
    assert (dl, ul, train) == pytest.approx((0.020576, 0.021152, 0.96))
    assert free_aggs[0] == pytest.approx(dl + train + ul)                 # 1.001728 s: evaluation is free
    assert fwd_aggs[0] == pytest.approx(0.04 + train + ul)                # 1.021152 s: the job waited
    # the later rounds: the t = 1 evaluation queues behind the running job (ends at 1.0 s, busy to 1.04 s);
    # the next download arrives after upload + download = 1.0626 s, so no further wait: same round length
    assert fwd_aggs[1] - fwd_aggs[0] == pytest.approx(free_aggs[1] - free_aggs[0])
    # 5 evaluations (0, 1, 2, 3 s and the end) × 4 devices × 0.04 s; compute_s stays the training time
    assert len(fwd.evals) == 5
    assert fwd.summary["totals"]["device_eval_s"] == pytest.approx(5 * 4 * 0.04)
    assert fwd.summary["totals"]["compute_s"] == pytest.approx(free.summary["totals"]["compute_s"]) == 3 * 4 * 0.96
    assert "device_eval_s" not in free.summary["totals"]  # free: the outputs carry no new total
    # the accuracy is the same (timing only changes when the jobs run)
    assert fwd.evals[-1]["device_accuracy_mean"] == free.evals[-1]["device_accuracy_mean"]


def test_forward_cost_integrates_a_slowdown_window(tmp_path):
    # device 0 runs at half speed during [0, 10) s: its t = 0 evaluation takes 0.08 s, the others' 0.04 s
    b, res, _ = _run(tmp_path, "forward", events=[{"at_s": 0.0, "slowdown": {"select": {"ids": [0]}, "factor": 2.0,
                                                                              "for_s": 10.0}}],
                     stop={"rounds": 1}, evaluation={"every_s": None})
    # evaluations at t = 0 and at the end: 2 × (0.08 + 3 × 0.04)
    assert res.summary["totals"]["device_eval_s"] == pytest.approx(2 * (0.08 + 3 * 0.04))


@pytest.mark.parametrize(("override", "key"), [
    ({"data": {"local_test_fraction": 0.2}, "evaluation": {"device_eval_cost": "gpu"}}, "evaluation.device_eval_cost"),
    ({"evaluation": {"device_eval_cost": "forward"}}, "evaluation.device_eval_cost"),  # nothing to evaluate
])
def test_bad_device_eval_cost_exits_2_with_the_key_path(tmp_path, capsys, override, key):
    from hierfl.scenario.loader import deep_merge
    from tests.badinput import assert_refused

    assert_refused(tmp_path, capsys, deep_merge(copy.deepcopy(TINY), override), key)
