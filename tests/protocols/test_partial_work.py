"""Partial work under a deadline (``straggler: {name: deadline, partial: true}``): a device stops where
its jittered, slowed or interrupted compute has got to, and its update carries the work it did."""

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hierfl.assemble import build
from hierfl.core.rng import stream
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.policies.straggler import Deadline
from hierfl.methods.hierfavg.protocol import HierFAVGConfig
from hierfl.protocols.straggler import steps_before
from tests.conftest import tiny
from tests.fakeenv import FakeEnv, FakeWorld

SPEEDS = [400, 200, 100, 50]   # samples/s: one local step of 10 samples takes 0.025, 0.05, 0.1, 0.2 s
STEP = [10 / s for s in SPEEDS]
DEADLINE = 0.5


def _scenario(seed=3, sigma=0.0, events=(), deadline=DEADLINE, evaluation=None, data=None, **kw):
    # 4 devices × 60 samples, 1 epoch of batch 10 = 6 steps; FedAvg over all 4, one round
    return tiny(seed=seed, devices={"count": 4, "speed_sps": {"dist": "choice", "values": [400]}, "jitter_sigma": sigma},
                straggler={"name": "deadline", "seconds": deadline, "partial": True}, training={"epochs": 1, **kw},
                stop={"rounds": 1}, evaluation=evaluation or {"every_s": None}, events=list(events), data=data or {})


def _run(tmp_path, sc):
    built = build(sc)
    built.world.speed_sps[:] = SPEEDS
    run_scenario(sc, tmp_path, built=built)
    trace = json.loads((tmp_path / "trace.json").read_text())
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    close = next(r for r in lines if r["event"] == "round_close")
    steps = {e["tid"]: e["args"]["steps"] for e in trace if e.get("name") == "partial_work"}
    ends = {e["tid"]: (e["ts"] + e["dur"]) / 1e6 for e in trace if e.get("name") == "train" and e["cat"] == "device"}
    return built.world, close, steps, ends, trace


def test_steps_before_is_the_largest_that_fits():
    assert steps_before(lambda k: k * 0.3 <= 1.0, 10) == 3
    assert steps_before(lambda k: k == 0, 10) == 0
    assert steps_before(lambda k: True, 6) == 6


def test_partial_work_counts_its_own_jitter(tmp_path):
    # seed 2, σ = 0.5: job 0's jitter factors J = exp(σz − σ²/2) are 0.287, 1.836, 3.003, 0.517
    sigma = 0.5
    jit = [math.exp(sigma * float(stream(2, "jitter", d, 0).standard_normal()) - sigma ** 2 / 2) for d in range(4)]
    assert [round(j, 3) for j in jit] == [0.287, 1.836, 3.003, 0.517]
    w, close, steps, ends, _ = _run(tmp_path, _scenario(seed=2, sigma=sigma))
    left = [DEADLINE - w.download_s(d) - w.upload_s(d) for d in range(4)]
    by_jitter = [min(6, math.floor(left[d] / (STEP[d] * jit[d]))) for d in range(4)]
    by_nominal = [min(6, math.floor(left[d] / STEP[d])) for d in range(4)]
    assert by_jitter == [6, 4, 1, 4]
    assert by_nominal == [6, 6, 4, 2]   # planning from the nominal speed: devices 1 and 2 would miss it
    assert steps == {1: 4, 2: 1, 3: 4}  # device 0 runs its whole job (no partial_work mark)
    for d in range(4):
        assert ends[d] == pytest.approx(w.download_s(d) + by_jitter[d] * STEP[d] * jit[d], abs=1e-9)
        assert ends[d] <= DEADLINE - w.upload_s(d)
    assert close["arrived"] == 4 and close["dropped"] == 0
    assert close["t"] == pytest.approx(max(ends[d] + w.upload_s(d) for d in range(4)), abs=1e-9)


def test_partial_work_stops_inside_a_slowdown_window(tmp_path):
    # devices 2 and 3 become 2× slower at 0.2 s: from the download (0.020576 s) to the last moment
    # that leaves an upload (0.478848 s) they get 0.179424 s of work before the window and
    # 0.278848 / 2 s in it, 0.318848 s of nominal work: 3 steps of 0.1 s, 1 step of 0.2 s
    slow = [{"at_s": 0.2, "slowdown": {"select": {"ids": [2, 3]}, "factor": 2.0, "for_s": 10.0}}]
    w, close, steps, ends, _ = _run(tmp_path, _scenario(events=slow))
    down, up = w.download_s(2), w.upload_s(2)
    assert (down, up) == (pytest.approx(0.020576), pytest.approx(0.021152))
    work = (0.2 - down) + (DEADLINE - up - 0.2) / 2
    assert [math.floor(work / STEP[d]) for d in (2, 3)] == [3, 1]
    assert [math.floor((DEADLINE - up - down) / STEP[d]) for d in (2, 3)] == [4, 2]  # the nominal plan
    assert steps == {2: 3, 3: 1}
    assert ends[2] == pytest.approx(0.2 + (0.3 - (0.2 - down)) * 2, abs=1e-12)   # 0.441152
    assert ends[3] == pytest.approx(0.2 + (0.2 - (0.2 - down)) * 2, abs=1e-12)   # 0.241152
    assert close["arrived"] == 4 and close["t"] == pytest.approx(ends[2] + up, abs=1e-12)


def test_partial_work_of_a_device_that_leaves_is_lost(tmp_path):
    # device 2 plans 4 steps (to 0.420576 s) but leaves at 0.3 s; the round closes on device 3's
    # 2 steps (0.020576 + 0.4 + 0.021152 s) before the deadline, having waited for 3
    leave = [{"at_s": 0.3, "leave": {"select": {"ids": [2]}}}]
    w, close, steps, ends, _ = _run(tmp_path, _scenario(events=leave))
    assert steps == {2: 4, 3: 2}
    assert close["arrived"] == 3 and close["lost"] == 1 and close["dropped"] == 0
    assert close["t"] == pytest.approx(w.download_s(3) + 2 * STEP[3] + w.upload_s(3), abs=1e-12)
    assert ends[2] == pytest.approx(0.3, abs=1e-12)   # its train span is cut where it left


def test_partial_work_waits_behind_the_devices_own_evaluation(tmp_path):
    # half of each device's 60 rows are its local test set: 30 training rows = 3 steps. The evaluation at
    # t = 0 keeps device d busy for 30 / (3 · speed): 0.025, 0.05, 0.1, 0.2 s, and a job waits for it.
    # Device 3 starts computing at 0.2 and has until 0.5 − 0.021152 (upload) for steps of 0.2 s: 1 step
    # (planning from its download at 0.020576, as if it could start at once, it would take 2 and end at 0.6)
    sc = _scenario(data={"local_test_fraction": 0.5}, evaluation={"every_s": 1.0, "device_eval_cost": "forward"})
    w, close, steps, ends, _ = _run(tmp_path, sc)
    assert list(w.samples) == [30] * 4
    assert math.floor((DEADLINE - w.upload_s(3) - w.download_s(3)) / STEP[3]) == 2
    assert steps == {3: 1}
    assert [ends[d] for d in range(4)] == pytest.approx([0.025 + 0.075, 0.05 + 0.15, 0.1 + 0.3, 0.2 + 0.2], abs=1e-12)
    assert close["arrived"] == 4 and close["t"] == pytest.approx(0.4 + w.upload_s(3), abs=1e-12)


def test_partial_work_weighs_by_work_done_when_asked():
    # HierFAVG, one edge {0, 1}, κ1 = 2 steps of 1 s and 1.5 s, 0.25 s each way; deadline 3 s:
    # device 0 fits both steps (arrives 2.5 s); device 1 has 3 − 0.5 = 2.5 s for 1 step of 1.5 s (arrives 2 s)
    # and did half its job: 48 · 1/2 = 24 with partial_weight: work
    def run(weight):
        env = FakeEnv(FakeWorld([16, 48], [0, 0]), spec=TrainSpec(epochs=None, steps=2),
                      straggler=Deadline(seconds=3.0, partial=True, partial_weight=weight),
                      rounds=1)
        env.run(HierFAVGConfig(kappa1=2, kappa2=1).create(env))
        return [x for x in env.log if x[1] == "tier" and x[2] == "edge"]
    log = run("work")
    assert log[:2] == [(2.0, "tier", "edge", 0, "add", 2.0, 24.0), (2.5, "tier", "edge", 0, "add", 1.0, 16.0)]
    assert log[2] == (2.5, "tier", "edge", 0, "commit", [0, 1], (16 * 1.0 + 24 * 2.0) / 40)
    assert run("samples")[0][-1] == 48.0   # FedProx's default: a partial job weighs as a whole one


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), sigma=st.floats(0.0, 1.0), deadline=st.floats(0.1, 1.5),
       factor=st.floats(0.5, 8.0), at=st.floats(0.0, 0.6), away=st.floats(0.0, 0.6), evaluate=st.booleans())
# found by Hypothesis: no device has time for a step in the first 17 rounds (jitter σ = 1), which end empty
@example(seed=86, sigma=1.0, deadline=0.109375, factor=2.0, at=0.0, away=0.0, evaluate=False)
def test_partial_work_never_overruns_its_deadline(tmp_path_factory, seed, sigma, deadline, factor, at, away, evaluate):
    """Whatever the jitter, a slowdown window, a device leaving for a while and evaluations the devices pay
    for: every job ends by deadline − upload, and every device that computed and stayed is in before the
    deadline (uploads do not contend here)."""
    events = [{"at_s": at, "slowdown": {"select": {"ids": [1, 3]}, "factor": factor, "for_s": 0.4}},
              {"at_s": away, "leave": {"select": {"ids": [2]}, "for_s": 0.2}}]
    cost = {"data": {"local_test_fraction": 0.5}, "evaluation": {"every_s": 0.1, "device_eval_cost": "forward"}}
    sc = _scenario(seed=seed, sigma=sigma, events=events, deadline=deadline, trainer={"name": "sgd"},
                   **(cost if evaluate else {}))
    out = tmp_path_factory.mktemp("p")
    w, _, _, _, trace = _run(out, sc)
    # a round where no device has time for one step ends empty and the next starts at once (an empty
    # round is no aggregation, so the run goes on): each job's deadline counts from its own round's start
    closes = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == "round_close"]
    starts = [0.0] + [r["t"] for r in closes]
    jobs = [e for e in trace if e.get("name") == "train" and e["cat"] == "device"]
    assert jobs and closes
    for e in jobs:
        begin, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
        start = max(s for s in starts if s <= begin + 1e-9)
        assert end <= start + deadline - w.upload_s(e["tid"]) + 1e-9, (e, start)
    assert all(r["dropped"] == 0 and r["round_s"] <= deadline + 1e-12 for r in closes), closes
