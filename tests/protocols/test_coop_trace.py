"""Co-op against the fake environment: exact event traces and hand-computed merges.

Two clients, jobs of 1 s and 1.5 s that return ``start + d + 1``; a device ↔ cloud message takes
0.25 s each way (the age query and its answer too); σ(τ) = 1/(τ + 1) for numbers that stay exact.
"""

from __future__ import annotations

import pytest

from hierfl.env.events import DeviceLost
from hierfl.policies.staleness import PolynomialStaleness
from hierfl.methods.coop.protocol import CoopConfig
from tests.fakeenv import FakeEnv, FakeWorld

EXPECTED = [
    (0.0, "tier", "cloud", 0, "track_staleness"),
    (1.0, "train_done", "device=0 seq=1 age=-1"),       # w_0 = 0 + 1
    (1.25, "age_query", "device=0 seq=1 age=-1"),
    (1.5, "train_done", "device=1 seq=1 age=-1"),       # w_1 = 0 + 2
    (1.5, "age_reply", "device=0 seq=1 age=1"),         # A starts at b_l = 1; d = 1 − 0 in [1, 2]: upload
    (1.75, "age_query", "device=1 seq=1 age=-1"),       # answered before the merge below: A = 1
    # τ = 1 − 0, α = 1/2: w = 0 + (1 − 0)/2; A = 2
    (1.75, "upload_done", "device=0 seq=1 age=0"),
    (1.75, "tier", "cloud", 0, "step", [0], [(0.5, 1.0, 0.0)], [1], 2, 0.5),
    (2.0, "age_reply", "device=1 seq=1 age=1"),         # d = 1: upload
    (2.0, "model_arrival", "device=0 seq=1 age=2"),     # w_0 = 0.5, a_0 = 2
    # τ = 2 − 0, α = 1/3: w = 0.5 + (2 − 0.5)/3 = 1; A = 3
    (2.25, "upload_done", "device=1 seq=1 age=0"),
    (2.25, "tier", "cloud", 0, "step", [1], [(PolynomialStaleness(a=1.0)(2), 2.0, 0.5)], [2], 3, 1.0),
    (2.5, "model_arrival", "device=1 seq=1 age=3"),
    (3.0, "train_done", "device=0 seq=2 age=-1"),       # 0.5 + 1
    (3.25, "age_query", "device=0 seq=2 age=-1"),
    (3.5, "age_reply", "device=0 seq=2 age=3"),         # d = 3 − 2
    (3.75, "upload_done", "device=0 seq=2 age=2"),      # τ = 1: w = 1 + (1.5 − 1)/2
    (3.75, "tier", "cloud", 0, "step", [0], [(0.5, 1.5, 1.0)], [1], 4, 1.25),
    (4.0, "train_done", "device=1 seq=2 age=-1"),       # 1 + 2
    (4.0, "model_arrival", "device=0 seq=2 age=4"),
    (4.25, "age_query", "device=1 seq=2 age=-1"),
    (4.5, "age_reply", "device=1 seq=2 age=4"),         # d = 4 − 3
    (4.75, "upload_done", "device=1 seq=2 age=3"),      # τ = 1: w = 1.25 + (3 − 1.25)/2
    (4.75, "tier", "cloud", 0, "step", [1], [(0.5, 3.0, 1.25)], [1], 5, 2.125),
]


def _run(away=None, lost=None, **knobs):
    env = FakeEnv(FakeWorld([10, 10], unit_s=[1.0, 1.5]), away=away)
    if lost is not None:
        env.at(lost[0], "device_lost", DeviceLost(lost[1], "age_query", "offline"))
    proto = CoopConfig(**{"staleness": PolynomialStaleness(a=1.0), "b_l": 1, "b_u": 2, **knobs}).create(env)
    return env, proto, env.run(proto, until=4.8)


def test_coop_trace_by_hand() -> None:
    env, proto, log = _run()
    assert log == EXPECTED
    assert env.global_model == 2.125 and proto.age == 5
    assert proto.counts == {"coop_uploads": 4, "coop_too_old": 0, "coop_too_soon": 0, "coop_polls": 0}


def test_too_soon_continue_trains_again_without_uploading() -> None:
    _, proto, log = _run(b_l=2, b_u=3)
    # A starts at 2; at 3.5 client 0 is d = 4 − 3 = 1 < 2 behind: it trains again (3.5 → 4.5) from w_0
    assert (3.5, "age_reply", "device=0 seq=2 age=4") in log
    assert (4.5, "train_done", "device=0 seq=3 age=-1") in log
    assert proto.model[0] == pytest.approx(1 / 3 + 1 + 1)  # the server model (1/3) it got at 2.0, two jobs on
    assert proto.counts["coop_too_soon"] == 2 and proto.counts["coop_uploads"] == 2


def test_too_soon_wait_polls_every_poll_s() -> None:
    _, _, log = _run(b_l=2, b_u=3, too_soon="wait", poll_s=1.0)
    # client 0 idles from its answer at 3.5 and asks again at 4.5 (no training meanwhile)
    assert (4.5, "poll", "device=0 seq=2 age=-1") in log and (4.75, "age_query", "device=0 seq=2 age=-1") in log
    assert not any(t > 3.0 and kind == "train_done" and "device=0" in p for t, kind, p, *_ in log)


def test_too_old_discards_and_downloads() -> None:
    _, proto, log = _run(b_l=0, b_u=0)
    # A starts at 0. At 3.5 client 0 (a_0 = 1) hears A = 2: d = 1 > b_u, its work is dropped and it
    # downloads (w, A) = (1.5, 2): 1.0 + (2 − 1.0)/2 was the merge of client 1 at 2.25
    assert (3.5, "tier", "cloud", 0, "drop", 0, 1) in log
    assert (3.75, "model_arrival", "device=0 seq=2 age=2") in log
    assert proto.age_of[0] == 2 and proto.counts["coop_too_old"] == 1
    # client 1 (a_1 = 2) is d = 0 behind at 4.5: admitted, τ = 0, α = 1: w = its model 1.5 + 2
    assert log[-1] == (4.75, "tier", "cloud", 0, "step", [1], [(1.0, 3.5, 1.5)], [0], 3, 3.5)


def test_intermittent_client_resumes_from_its_model() -> None:
    # client 1 goes offline at 1.6 with its age query in flight, and is back at 3.0
    env, proto, log = _run(away={1: [(1.6, 3.0)]}, lost=(1.6, 1))
    assert not any(kind == "age_query" and "device=1 seq=1" in p for t, kind, p, *_ in log)
    assert (3.0, "back_online", "device=1 seq=2 age=-1") in log
    assert (4.5, "train_done", "device=1 seq=3 age=-1") in log  # from the w_1 = 2 it kept: 4
    assert proto.model[1] == 4.0 and proto.age_of[1] == 0
    # client 0 alone: merged at 1.75 (A = 2), then d = 2 − 2 < 1 at 3.5: too soon, trains on
    assert env.global_model == 0.5 and proto.age == 2 and proto.counts["coop_too_soon"] == 1


def test_window_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="b_l"):
        CoopConfig(b_l=3, b_u=2)


@pytest.mark.parametrize("protocol,key", [
    ({"name": "coop", "b_l": 5, "b_u": 2}, "protocol"),
    ({"name": "coop", "too_soon": "sleep"}, "protocol.too_soon"),
    ({"name": "coop", "poll_s": 0}, "protocol.poll_s"),
    ({"name": "coop", "staleness": "bogus"}, "protocol.staleness"),
])
def test_bad_coop_input_exits_2(tmp_path, capsys, protocol, key) -> None:
    import copy

    from hierfl.scenario.loader import deep_merge
    from tests.badinput import assert_refused
    from tests.conftest import TINY

    assert_refused(tmp_path, capsys, deep_merge(copy.deepcopy(TINY), {"protocol": protocol}), key)


def test_coop_runs_with_churn_through_the_driver(tmp_path) -> None:
    from hierfl.driver import run_scenario
    from tests.conftest import tiny

    sc = tiny(protocol={"name": "coop", "b_l": 1, "b_u": 3}, stop={"rounds": 12},
              devices={"availability": {"name": "markov", "mean_up_s": 4, "mean_down_s": 2}})
    res = run_scenario(sc, tmp_path)
    assert res.summary["status"] == "completed" and res.summary["rounds"] == 12
    evals = [e for e in map(__import__("json").loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
             if e["event"] == "eval"]
    last = evals[-1]
    assert last["coop_age"] == 1 + last["cloud_aggregations"]  # A starts at b_l and counts merges


def test_stream_reveals_samples_linearly() -> None:
    from hierfl.methods.coop.protocol import StreamConfig

    s = StreamConfig(initial_fraction=0.1, full_at_s=600)
    # ceil(100 · (0.1 + 0.9 · t/600)): 10 at 0, 55 at 300, all from 600 on; never below 1
    assert [s.revealed(100, t) for t in (0.0, 300.0, 600.0, 1000.0)] == [10, 55, 100, 100]
    assert s.revealed(3, 0.0) == 1


def test_visible_samples_set_the_work() -> None:
    from hierfl.core.work import TrainSpec, samples_processed, visible

    spec = TrainSpec(epochs=2, batch_size=10, revealed=30)
    assert visible(60, spec) == 30 and visible(20, spec) == 20
    assert samples_processed(60, spec) == 60 and samples_processed(60, TrainSpec(epochs=2)) == 120
    with pytest.raises(ValueError, match="revealed"):
        TrainSpec(revealed=0)


def test_streaming_jobs_train_on_the_revealed_samples(tmp_path) -> None:
    import json

    from hierfl.driver import run_scenario
    from tests.conftest import tiny

    def run(stream, out):
        res = run_scenario(tiny(protocol={"name": "coop", **({"stream": stream} if stream else {})},
                                stop={"rounds": 4}), tmp_path / out)
        trace = json.loads((tmp_path / out / "trace.json").read_text())
        events = trace if isinstance(trace, list) else trace["traceEvents"]
        return res, [e["dur"] / 1e6 for e in events if e.get("name") == "train"]

    # 60 samples per device at 100 samples/s, 2 epochs: 1.2 s a job; half of them revealed at t = 0: 0.6 s
    full, full_durs = run(None, "full")
    half, half_durs = run({"initial_fraction": 0.5, "full_at_s": 1000}, "half")
    assert full_durs[:4] == [1.2] * 4 and half_durs[:4] == pytest.approx([0.6] * 4)
    same, _ = run({"initial_fraction": 1.0, "full_at_s": 1000}, "same")  # everything revealed: no change
    assert (same.final_params == full.final_params).all()
    assert not (half.final_params == full.final_params).all()
