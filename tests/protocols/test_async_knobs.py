"""Asynchronous protocols leftovers, exact on tiny scenarios: FedAsync's per-job H ~ U[H_min, H_max] (§5.3),
FedBuff's ``normalize_staleness`` (§5.4, FLSim), and queue lengths over time (AHFL, FedBuff).

The tiny scenario of tests/protocols/test_async_protocols.py: 4 devices × 60 samples, 100 samples/s,
batch 10, 72-byte models, so a job of H steps computes for H · 10 / 100 = 0.1·H seconds.
"""

import json
import math

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.core.rng import stream, stream_seed
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.learn.local import LocalTrainer
from tests.conftest import TINY, tiny
from tests.protocols.test_async_protocols import CYCLE, DOWN, LINK, UP, ahfl, flat, lines

DU = DOWN + UP


def rounds(n):
    return tiny(stop={"rounds": n}).stop


def trace(out):
    return json.loads((out / "trace.json").read_text())


# -- FedAsync: H drawn per job ------------------------------------------------------------------
def test_fedasync_steps_drawn_per_job_set_compute_times(tmp_path):
    sc = flat("fedasync", local_steps={"min": 1, "max": 6}).model_copy(update={"stop": rounds(8)})
    res = run_scenario(sc, tmp_path)
    # the draws, from stream ("fedasync.steps", device, job) of seed 3, uniform on {1..6}
    draws = {(d, j): int(stream(3, "fedasync.steps", d, j).integers(1, 7)) for d in range(4) for j in range(3)}
    assert [draws[(d, 0)] for d in range(4)] == [2, 1, 3, 4]
    assert [draws[(d, 1)] for d in range(4)] == [2, 5, 4, 5]
    assert draws[(0, 2)] == 4
    # every job's train span lasts 0.1·H (H steps of 10 samples at 100 samples/s)
    spans = [e for e in trace(tmp_path) if e.get("name") == "train"]
    assert spans
    for e in spans:
        assert e["dur"] / 1e6 == pytest.approx(0.1 * draws[(e["tid"], e["args"]["job"])], abs=1e-9)
    # arrivals (download + 0.1·H + upload per job, back to back): device 1 first (H=1), ..., then
    # device 0's second job (2 + 2), device 1's (1 + 5), device 2's (3 + 4), device 0's third (2 + 2 + 4)
    aggs = lines(tmp_path, "cloud_aggregate")
    assert [a["ids"][0] for a in aggs] == [1, 0, 2, 3, 0, 1, 2, 0]
    expect_t = [DU + 0.1, DU + 0.2, DU + 0.3, DU + 0.4, 2 * DU + 0.4, 2 * DU + 0.6, 2 * DU + 0.7, 3 * DU + 0.8]
    assert [a["t"] for a in aggs] == pytest.approx(expect_t, abs=1e-9)
    # start versions: 0 for first jobs; device 0 restarted at v2 and v5, device 1 at v1, device 2 at v3
    assert [a["staleness"][0] for a in aggs] == [0, 1, 2, 3, 2, 4, 3, 2]
    steps_run = [2, 1, 3, 4, 2, 5, 4, 4]  # the 8 collected jobs, in arrival order
    assert res.summary["totals"]["compute_s"] == pytest.approx(0.1 * sum(steps_run), abs=1e-9)


def test_fedasync_steps_are_the_steps_trained(tmp_path):
    # one device at a time, alpha 0.9, rho 0: x1 = 0.1·x0 + 0.9·y, y = H steps of SGD from x0
    sc = flat("fedasync", alpha=0.9, rho=0.0, concurrency=1, local_steps={"min": 3, "max": 9}).model_copy(
        update={"stop": rounds(1)})
    res = run_scenario(sc, tmp_path)
    device = lines(tmp_path, "cloud_aggregate")[0]["ids"][0]
    h = int(stream(sc.seed, "fedasync.steps", device, 0).integers(3, 10))
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    idx = b.parts[device]
    y, _ = trainer.train(b.init_params, b.dataset.x_train[idx], b.dataset.y_train[idx],
                         TrainSpec(epochs=None, steps=h, batch_size=10, lr=0.1), stream_seed(sc.seed, "train", device, 0))
    expect = (0.1 * b.init_params.astype(np.float64) + 0.9 * y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(res.final_params, expect)
    assert lines(tmp_path, "cloud_aggregate")[0]["t"] == pytest.approx(DU + 0.1 * h, abs=1e-9)


def test_fedasync_without_local_steps_uses_training(tmp_path):
    assert flat("fedasync").protocol.local_steps is None
    run_scenario(flat("fedasync").model_copy(update={"stop": rounds(1)}), tmp_path)
    spans = [e for e in trace(tmp_path) if e.get("name") == "train"]
    assert all(e["dur"] / 1e6 == pytest.approx(0.6, abs=1e-9) for e in spans)  # 1 epoch of 60 samples


@pytest.mark.parametrize("steps,path,text", [
    ({"min": 5, "max": 3}, "protocol.local_steps", "min (5) must not exceed max (3)"),
    ({"min": 0, "max": 3}, "protocol.local_steps.min", "greater than 0"),
    ({"min": 2, "max": -1}, "protocol.local_steps.max", "greater than 0"),
    ({"min": 2}, "protocol.local_steps.max", "required"),
    ({"min": 2, "max": 4, "mean": 3}, "protocol.local_steps.mean", "unknown key"),
])
def test_fedasync_local_steps_bad_input(tmp_path, capsys, steps, path, text):
    import yaml

    raw = {**TINY, "protocol": {"name": "fedasync", "local_steps": steps}}
    bad = tmp_path / "s.yaml"
    bad.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and text in err and "Traceback" not in err


# -- FedBuff: normalize_staleness ---------------------------------------------------------------
def fedbuff(**kw):
    return flat("fedbuff", K=2, concurrency=4, server_lr=1.0, **kw).model_copy(update={"stop": rounds(4)})


def test_fedbuff_normalized_staleness_trace(tmp_path):
    res = run_scenario(fedbuff(normalize_staleness=True), tmp_path)
    aggs = lines(tmp_path, "cloud_aggregate")
    # the same trace as without normalisation (tests/protocols/test_async_protocols.py::test_fedbuff_k2_trace) ...
    assert [a["ids"] for a in aggs] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert [a["staleness"] for a in aggs] == [[0, 0], [1, 1], [2, 1], [2, 1]]
    # ... but each weight is (1/K)·s(τ)/s(1), s(τ) = 1/√(1+τ): fresh updates count √2, τ = 1 exactly 1
    assert aggs[0]["weights"] == pytest.approx([0.5 * math.sqrt(2)] * 2)
    assert aggs[1]["weights"] == pytest.approx([0.5, 0.5])
    assert aggs[2]["weights"] == pytest.approx([0.5 * math.sqrt(2 / 3), 0.5])
    assert aggs[3]["weights"] == pytest.approx([0.5 * math.sqrt(2 / 3), 0.5])
    # avg_staleness 0 divides by s(0) = 1: the plain FedBuff model, bit for bit
    plain = run_scenario(fedbuff(), tmp_path / "plain")
    zero = run_scenario(fedbuff(normalize_staleness=True, avg_staleness=0), tmp_path / "zero")
    np.testing.assert_array_equal(plain.final_params, zero.final_params)
    assert not np.array_equal(res.final_params, plain.final_params)


def test_fedbuff_normalized_first_step_is_hand_computed(tmp_path):
    # K = 2 from x0: x1 = x0 + server_lr·Σ (1/K)·(s(0)/s(2))·(y_i − x0), s = polynomial(a=1): s(0)/s(2) = 3
    sc = flat("fedbuff", K=2, concurrency=2, server_lr=0.1, staleness={"name": "polynomial", "a": 1.0},
              normalize_staleness=True, avg_staleness=2).model_copy(update={"stop": rounds(1)})
    res = run_scenario(sc, tmp_path)
    agg = lines(tmp_path, "cloud_aggregate")[0]
    assert agg["weights"] == pytest.approx([0.15, 0.15])
    b = build(sc)
    trainer = LocalTrainer(sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes)
    x0 = b.init_params.astype(np.float64)
    step = np.zeros_like(x0)
    for d in agg["ids"]:
        idx = b.parts[d]
        y, _ = trainer.train(b.init_params, b.dataset.x_train[idx], b.dataset.y_train[idx],
                             TrainSpec(epochs=1, batch_size=10, lr=0.1), stream_seed(sc.seed, "train", d, 0))
        step += 0.15 * (y.astype(np.float64) - x0)
    np.testing.assert_allclose(res.final_params, (x0 + step).astype(np.float32), rtol=0, atol=1e-7)


def test_fedbuff_normalize_with_vanishing_weight_is_rejected():
    with pytest.raises(ConfigError) as err:
        flat("fedbuff", K=2, normalize_staleness=True, avg_staleness=100, staleness={"name": "exponential", "lam": 1})
    assert any(p.path == "protocol.avg_staleness" and "too small" in p.message and "1e-06" in p.message
               for p in err.value.problems)


# -- queue lengths over time --------------------------------------------------------------------
def counters(out, name):
    return [(e["ts"] / 1e6, e["args"]["updates"]) for e in trace(out) if e.get("ph") == "C" and e["name"] == name]


def test_ahfl_queue_lengths_time_weighted(tmp_path):
    res = run_scenario(ahfl(), tmp_path)
    c = CYCLE
    # leader 0 (devices 0, 2; leader 1 alike): two updates arrive at every multiple of CYCLE; ticks at
    # 1, 2, 3 empty the queue; the run ends at the cloud tick t = 4 (before the leaders' tick at 4):
    # 2 on [c, 1), 2 on [2c, 3c), 4 on [3c, 2), 2 on [4c, 3), 2 on [5c, 6c), 4 on [6c, 4]
    area = 2 * (1 - c) + 2 * c + 4 * (2 - 3 * c) + 2 * (3 - 4 * c) + 2 * c + 4 * (4 - 6 * c)
    q = res.summary["queues"]
    assert res.summary["virtual_time_s"] == 4.0
    for e in ("0", "1"):
        assert q["edge"]["by_entity"][e]["mean"] == pytest.approx(area / 4, abs=1e-12)
        assert q["edge"]["by_entity"][e]["max"] == 4
    assert q["edge"]["mean"] == pytest.approx(2 * area / 4, abs=1e-12) and q["edge"]["max"] == 8
    # cloud: both leaders' pushes land at tick + LINK; the cloud empties its queue at t = 2
    # 2 on [1+L, 2), 2 on [2+L, 3+L), 4 on [3+L, 4]
    cloud_area = 2 * (1 - LINK) + 2 * 1 + 4 * (1 - LINK)
    assert q["cloud"]["mean"] == pytest.approx(cloud_area / 4, abs=1e-12) and q["cloud"]["max"] == 4
    # one trace counter sample per change, starting at 0 at t = 0
    edge0 = counters(tmp_path, "queue_len edge 0")
    assert [v for _, v in edge0] == [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 4]
    assert [t for t, _ in edge0][:4] == pytest.approx([0, c, c, 1.0])
    cloud = counters(tmp_path, "queue_len cloud")
    assert [v for _, v in cloud] == [0, 1, 2, 0, 1, 2, 3, 4, 0]  # the last tick empties it at t = 4
    assert [t for t, _ in cloud] == pytest.approx([0, 1 + LINK, 1 + LINK, 2, 2 + LINK, 2 + LINK, 3 + LINK, 3 + LINK, 4])
    # the evaluation lines still carry the lengths at that instant (sum over leaders): at t = 3 after
    # the leaders' ticks, with the tick-2 pushes in the cloud queue and the tick-3 ones still on the way
    ev = {e["t"]: e for e in lines(tmp_path, "eval")}
    assert ev[3.0]["queue_len_edge"] == 0 and ev[3.0]["queue_len_cloud"] == 2


def test_fedbuff_buffer_length_time_weighted(tmp_path):
    # K = 3, all 4 devices arrive together at every multiple of CYCLE: the buffer goes 1, 2, 3 → 0, 1
    # at c; 2, 3 → 0, 1, 2 at 2c; 3 → 0, 1, 2, 3 → 0 at 3c, where the 4th step ends the run.
    res = run_scenario(flat("fedbuff", K=3, concurrency=4).model_copy(update={"stop": rounds(4)}), tmp_path)
    q = res.summary["queues"]["cloud"]
    assert res.summary["virtual_time_s"] == pytest.approx(3 * CYCLE, abs=1e-12)
    assert q["mean"] == pytest.approx((1 * CYCLE + 2 * CYCLE) / (3 * CYCLE), abs=1e-12)  # 0, then 1, then 2
    assert q["max"] == 3
    samples = counters(tmp_path, "queue_len cloud")
    assert [v for _, v in samples] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert [round(t / CYCLE, 9) for t, _ in samples] == [0] + [1] * 5 + [2] * 5 + [3] * 6


def test_fedasync_has_no_queue(tmp_path):
    res = run_scenario(flat("fedasync").model_copy(update={"stop": rounds(2)}), tmp_path)
    assert "queues" not in res.summary and not counters(tmp_path, "queue_len cloud")


# -- determinism with the new knobs -------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.parametrize("name,extra", [
    ("fedasync", {"local_steps": {"min": 1, "max": 8}}),
    ("fedbuff", {"K": 3, "normalize_staleness": True, "avg_staleness": 2}),
], ids=["fedasync-local-steps", "fedbuff-normalized"])
def test_local_vs_ray_one_and_two_hosts(tmp_path, ray_session, name, extra):
    from tests.determinism.test_determinism import fedasync_tiny, metrics_without_wall

    def make(**kw):
        sc = fedasync_tiny(**kw)
        return sc.model_copy(update={"protocol": tiny(protocol={"name": name, "concurrency": 4, **extra}).protocol})

    local = run_scenario(make(), tmp_path / "local")
    ref = metrics_without_wall(tmp_path / "local")
    for workers in (1, 2):
        res = run_scenario(make(runtime={"executor": "ray", "workers": workers}), tmp_path / f"ray{workers}")
        assert metrics_without_wall(tmp_path / f"ray{workers}") == ref
        assert np.array_equal(res.final_params, local.final_params)
        assert res.summary.get("queues") == local.summary.get("queues")
