"""FedDC (Gao et al., CVPR 2022): its math on hand-computed vectors, a device's jobs and the server rule
by hand, the rule inside FedAvg and HierFAVG runs, two-model messages, per-device state in the
summary and across a checkpoint, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from hierfl.assemble import build, train_spec
from hierfl.cli import main
from hierfl.methods.feddc.math import (
    DriftRule,
    DriftSpec,
    device_update,
    local_terms,
    mean_steps,
    relative_weights,
)
from hierfl.core.serveropt import OptState
from hierfl.core.work import TrainSpec
from hierfl.driver import resume_run, run_scenario
from hierfl.models import LogRegConfig
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost
from tests.conftest import TINY, tiny
from tests.learn.test_local_training import C, D, _loss_grad, _tiny_data

FEDDC = {"name": "feddc", "alpha": 0.3}
UNIFORM = {"name": "fedavg", "fraction": 1.0, "weighting": "uniform"}

# -- the math on tiny vectors ---------------------------------------------------------------------


def test_local_terms_by_hand():
    """α_i = 0.1/0.5 = 0.2; g_i = c/ω − c_i = [0.3, −0.8]; α_i h_i + g_i = [0.5, −1.2]."""
    alpha_i, corr = local_terms(0.1, 0.5, np.array([0.2, -0.4]), np.array([0.1, 0.0]), np.array([1.0, -2.0]))
    assert alpha_i == pytest.approx(0.2)
    np.testing.assert_allclose(corr, [0.5, -1.2], rtol=1e-6)
    assert corr.dtype == np.float32
    with pytest.raises(ValueError, match="relative weight"):
        local_terms(0.1, 0.0, np.zeros(2), np.zeros(2), np.zeros(2))


def test_device_update_by_hand():
    """Δ = [−0.5, 1]; h⁺ = [0.5, −1]; c⁺ = c_i − c/ω − Δ/(K̄η) = [0.7, −1.2]; δc = ω(c⁺ − c_i) = [0.3, −0.6]."""
    h, c_new, dc = device_update(np.array([1.0, -2.0]), np.array([0.1, 0.0]), np.array([0.2, -0.4]), 0.5,
                                 np.array([1.0, 1.0]), np.array([0.5, 2.0]), 2, 0.25)
    np.testing.assert_allclose(h, [0.5, -1.0], rtol=1e-6)
    np.testing.assert_allclose(c_new, [0.7, -1.2], rtol=1e-6)
    np.testing.assert_allclose(dc, [0.3, -0.6], rtol=1e-6)
    with pytest.raises(ValueError, match="K̄ >= 1 and lr > 0"):
        device_update(h, c_new, c_new, 1.0, h, h, 0, 0.1)


def test_server_rule_keeps_the_drift_of_every_device():
    """Round 1: H = 2·([2, 0] − [1, 1]) = [2, −2], w = [2, 0] + H/4 = [2.5, −0.5]. Round 2 (one device):
    H = [2, −2] + 1·([2.5, 0.5] − [2.5, −0.5]) = [2, −1], w = [2.5, 0.5] + [0.5, −0.25] = [3, 0.25]."""
    rule, state = DriftRule(4), OptState()
    w1 = rule.round_step(np.array([1.0, 1.0]), np.array([2.0, 0.0]), 2, state)
    np.testing.assert_allclose(w1, [2.5, -0.5])
    np.testing.assert_allclose(state.drift, [2.0, -2.0])
    w2 = rule.round_step(w1, np.array([2.5, 0.5]), 1, state)
    np.testing.assert_allclose(w2, [3.0, 0.25])
    with pytest.raises(ValueError, match="started from"):
        rule.round_step(None, w1, 1, state)
    with pytest.raises(ValueError, match="over 0 devices"):
        DriftRule(0)


def test_relative_weights_and_mean_steps():
    np.testing.assert_allclose(relative_weights(np.array([3, 1])), [1.5, 0.5])
    assert mean_steps(np.array([30, 10]), 2, None, 10) == 4        # n̄ = 20: 2 epochs × ⌈20/10⌉
    assert mean_steps(np.array([30, 10]), None, 7, 10) == 7        # fixed steps
    assert mean_steps(np.array([30, 10]), 3, None, None) == 3      # full batch: one step an epoch
    with pytest.raises(ValueError, match="hold no samples"):
        relative_weights(np.array([0, 0]))
    with pytest.raises(ValueError, match="server_rule"):
        DriftSpec(0.1, "other")


# -- a device's jobs and the aggregators, by hand ---------------------------------------------------


def _host():
    x, y, theta = _tiny_data()
    parts = [np.arange(0, 3), np.arange(3, 5)]  # ω_0 = 2·3/5 = 1.2, ω_1 = 0.8
    return DeviceHost(x, y, parts, (LogRegConfig(), (D,), C, 1)), x, y, theta


def _spec(rule: str = "code", clip: float | None = None) -> TrainSpec:
    return TrainSpec(epochs=None, steps=2, batch_size=None, lr=0.5, control_variates=True,
                     method=DriftSpec(0.3, rule), clip_norm=clip)


def test_two_jobs_of_a_device_by_hand():
    """Device 0 (3 samples, ω = 1.2, α_0 = 0.3/1.2 = 0.25, K̄ = 2 steps, η = 0.5), c = 0, h = c_0 = 0:
    θ1 = w − η g(w), θ2 = θ1 − η(g(θ1) + α_0(θ1 − w)); Δ = θ2 − w; h⁺ = Δ; c_0⁺ = −Δ/(K̄η) = −Δ;
    δc = 1.2·(−Δ). Its next job (c = 0.1 everywhere, from w' = θ2) adds α_0 h + c/ω − c_0 to its gradient."""
    host, x, y, w = _host()
    p = w.size
    xs, ys = x[:3], y[:3]
    out, stats = host.train(0, 1, _spec(), w, np.zeros(p, dtype=np.float32))
    assert out.shape == (2 * p,) and stats["steps"] == 2
    t1 = w - 0.5 * _loss_grad(w, xs, ys)[1]
    t2 = t1 - 0.5 * (_loss_grad(t1, xs, ys)[1] + 0.25 * (t1 - w))
    delta = t2 - w
    np.testing.assert_allclose(out[:p], t2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[p:], -1.2 * delta, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(host.export_state()[0]["h"], delta, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(host.export_state()[0]["c"], -delta, rtol=1e-4, atol=1e-6)
    # the second job: one step from w' = θ2 (the proximal term is zero at the first step)
    c = np.full(p, 0.1, dtype=np.float32)
    one = TrainSpec(epochs=None, steps=1, batch_size=None, lr=0.5, control_variates=True, method=DriftSpec(0.3))
    w2 = t2.astype(np.float32)
    out2, _ = host.train(0, 2, one, w2, c)
    corr = 0.25 * delta + 0.1 / 1.2 + delta
    np.testing.assert_allclose(out2[:p], w2 - 0.5 * (_loss_grad(w2, xs, ys)[1] + corr), rtol=1e-4, atol=1e-5)
    assert host.state_bytes() == (1, 2 * 4 * p)
    host.reset_devices([0])
    assert host.state_bytes() == (0, 0)


def test_paper_rule_uploads_model_plus_drift():
    """server_rule paper: the upload is θ⁺ + h_i⁺ = 2θ⁺ − w on the first job."""
    host, _, _, w = _host()
    p = w.size
    code, _ = host.train(1, 5, _spec("code"), w, np.zeros(p, dtype=np.float32))
    host.reset_devices([1])
    paper, _ = host.train(1, 5, _spec("paper"), w, np.zeros(p, dtype=np.float32))
    np.testing.assert_allclose(paper[:p], 2 * code[:p] - w, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(paper[p:], code[p:])


def test_gradient_clipping_bounds_the_step():
    """clip_norm 1e-3, one full-batch step from w with h = c = 0: ‖θ⁺ − w‖ = η·1e-3."""
    host, _, _, w = _host()
    p = w.size
    one = TrainSpec(epochs=None, steps=1, batch_size=None, lr=0.5, control_variates=True,
                    method=DriftSpec(0.3), clip_norm=1e-3)
    out, _ = host.train(0, 1, one, w, np.zeros(p, dtype=np.float32))
    assert np.linalg.norm(out[:p].astype(np.float64) - w) == pytest.approx(0.5e-3, rel=1e-3)


def test_cloud_and_edge_apply_the_server_rule():
    """Two devices, κ = 1/N = 1/2: c = (δc_0 + δc_1)/2; w = (θ_0 + θ_1)/2 + (Δ_0 + Δ_1)/2 (N = 2)."""
    host, x, y, w = _host()
    p = w.size
    zero = np.zeros(p, dtype=np.float32)
    u0, _ = host.train(0, 1, _spec(), w, zero)
    u1, _ = host.train(1, 2, _spec(), w, zero)
    want = (u0[:p].astype(np.float64) + u1[:p]) / 2 + ((u0[:p] - w) + (u1[:p] - w)) / 2
    cloud = Cloud(w, x, y, (LogRegConfig(), (D,), C, 1))
    cloud.add(1.0, u0, control_coef=0.5)
    cloud.add(1.0, u1, control_coef=0.5)
    np.testing.assert_allclose(cloud.commit(DriftRule(2), w), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cloud.get_control(), (u0[p:] + u1[p:]) / 2, rtol=1e-6, atol=1e-7)
    leaders = LeaderHost()
    leaders.add(3, 1.0, u0, control_coef=0.5)
    leaders.add(3, 1.0, u1, control_coef=0.5)
    packed = leaders.commit(3, DriftRule(2), w, pack_control=True)
    np.testing.assert_allclose(packed[:p], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(packed[p:], (u0[p:] + u1[p:]) / 2, rtol=1e-6, atol=1e-7)


def test_an_edge_keeps_its_own_control():
    """control_scope edge: the edge steps c_e ← c_e + Σ κ_i δc_i at every round and relays nothing."""
    host, _, _, w = _host()
    p = w.size
    zero = np.zeros(p, dtype=np.float32)
    u0, _ = host.train(0, 1, _spec(), w, zero)
    u1, _ = host.train(1, 2, _spec(), w, zero)
    leaders = LeaderHost()
    assert leaders.get_control(3) is None  # the devices then train with c_e = 0
    leaders.add(3, 1.0, u0, control_coef=0.5)
    leaders.add(3, 1.0, u1, control_coef=0.5)
    model = leaders.commit(3, DriftRule(2, keeps_control=True), w, pack_control=False)
    np.testing.assert_allclose(leaders.get_control(3), (u0[p:] + u1[p:]) / 2, rtol=1e-6, atol=1e-7)
    leaders.add(3, 1.0, u0, control_coef=0.5)
    leaders.commit(3, DriftRule(2, keeps_control=True), model)
    np.testing.assert_allclose(leaders.get_control(3), u0[p:] + u1[p:] / 2, rtol=1e-6, atol=1e-7)
    # the paper's rule with an edge control: the plain average, and c_e still moves
    leaders.add(4, 1.0, u0, control_coef=1.0)
    out = leaders.commit(4, DriftRule(1, keeps_control=True, adds_drift=False), w)
    np.testing.assert_array_equal(out, u0[:p])
    np.testing.assert_allclose(leaders.get_control(4), u0[p:], rtol=1e-6)


# -- inside runs ----------------------------------------------------------------------------------


def test_spec_fields_and_defaults():
    cfg = tiny(protocol=UNIFORM, training={"trainer": "feddc"}).training.trainer
    assert (cfg.alpha, cfg.server_rule, cfg.clip_norm, cfg.control_scope) == (0.01, "code", 10.0, "edge")
    spec = train_spec(tiny(protocol=UNIFORM, training={"trainer": FEDDC}))
    assert spec.control_variates and spec.method == DriftSpec(0.3, "code") and spec.clip_norm == 10.0


def _w0(scenario) -> np.ndarray:
    return build(scenario).init_params.astype(np.float64)


def test_first_round_code_rule_and_paper_rule_by_hand(tmp_path):
    """α = 0, first round (c = h = 0, every device takes part): the code rule gives
    mean_u θ⁺ + (1/N) Σ Δ_i = 2·mean_u θ⁺ − w0, the paper rule 2·mean_n θ⁺ − w0 (the upload is
    θ⁺ + h⁺ = 2θ⁺ − w0); FedAvg's model is mean θ⁺ (on the tiny IID split every device holds 60
    samples, so both means agree)."""
    one = {"stop": {"rounds": 1}}
    zero = {"name": "feddc", "alpha": 0.0, "clip_norm": None}
    w0 = _w0(tiny(**one))
    fedavg = run_scenario(tiny(**one, protocol=UNIFORM), tmp_path / "a").final_params.astype(np.float64)
    code = run_scenario(tiny(**one, protocol=UNIFORM, training={"trainer": zero}), tmp_path / "b").final_params
    paper = run_scenario(tiny(**one, training={"trainer": {**zero, "server_rule": "paper"}}), tmp_path / "c")
    np.testing.assert_allclose(code, 2 * fedavg - w0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(paper.final_params, 2 * fedavg - w0, rtol=1e-5, atol=1e-6)


def test_messages_are_two_models_each_way_and_state_is_reported(tmp_path):
    """Constant profiles (down 1 Mbps, up 0.5 Mbps, 20 ms, 100 samples/s, logreg 5 → 3 = 18 parameters):
    FedDC sends 144 bytes each way, so a round is 0.021152 + 60·2/100 + 0.022304 = 1.243456 s; each of
    the 4 devices then holds h_i and c_i, 2 × 72 bytes."""
    res = run_scenario(tiny(stop={"rounds": 1}, protocol=UNIFORM, training={"trainer": FEDDC}), tmp_path / "a")
    s = res.summary
    assert s["model_bytes"] == 144 and s["totals"]["bytes_device_tier"] == 8 * 144
    first = next(r for r in map(json.loads, (tmp_path / "a" / "metrics.jsonl").read_text().splitlines())
                 if r["event"] == "cloud_aggregate")
    assert first["t"] == pytest.approx(1.243456, abs=1e-12)
    assert s["device_state"] == {"devices": 4, "bytes": 4 * 144, "bytes_per_device": 144}
    plain = run_scenario(tiny(stop={"rounds": 1}), tmp_path / "b").summary
    assert "device_state" not in plain


def test_hierfavg_edges_run_the_rule(tmp_path):
    """Under HierFAVG each edge runs the rule over its members: with α = 0 and κ2 = 1 an edge's model
    after its first round is 2·mean θ⁺ − w0 and the cloud averages the edges by data, so the first
    cloud model is 2·(plain HierFAVG's) − w0; the edges relay [model; Σ κ δc] (twice the bytes)."""
    hier = {"protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 1, "weighting": "uniform"},
            "topology": {"edge_servers": 2}, "stop": {"rounds": 1}}
    zero = {"name": "feddc", "alpha": 0.0, "clip_norm": None}
    plain = run_scenario(tiny(**hier), tmp_path / "a")
    feddc = run_scenario(tiny(**hier, training={"trainer": zero}), tmp_path / "b")
    assert feddc.summary["totals"]["edge_aggregations"] == plain.summary["totals"]["edge_aggregations"] == 2
    assert feddc.summary["totals"]["bytes_edge_tier"] == 2 * plain.summary["totals"]["bytes_edge_tier"]
    want = 2 * plain.final_params.astype(np.float64) - _w0(tiny(**hier))
    np.testing.assert_allclose(feddc.final_params, want, rtol=1e-5, atol=1e-6)


def test_control_scope_edge_differs_from_cloud_within_a_cloud_round(tmp_path):
    """κ2 = 2: with control_scope edge each edge's c_e moves after its first edge round, so the second
    edge round already corrects; with cloud the cloud's c is still 0 until the cloud round."""
    hier = {"protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2, "weighting": "uniform"},
            "topology": {"edge_servers": 2}, "stop": {"rounds": 1}}
    edge = run_scenario(tiny(**hier, training={"trainer": FEDDC}), tmp_path / "a")
    cloud = run_scenario(tiny(**hier, training={"trainer": {**FEDDC, "control_scope": "cloud"}}), tmp_path / "b")
    assert edge.summary["totals"]["edge_aggregations"] == cloud.summary["totals"]["edge_aggregations"] == 4
    assert not np.allclose(edge.final_params, cloud.final_params)
    one = {**hier, "protocol": {**hier["protocol"], "kappa2": 1}}
    e1 = run_scenario(tiny(**one, training={"trainer": FEDDC}), tmp_path / "c")
    c1 = run_scenario(tiny(**one, training={"trainer": {**FEDDC, "control_scope": "cloud"}}), tmp_path / "d")
    np.testing.assert_array_equal(e1.final_params, c1.final_params)  # one edge round: c = c_e = 0 in both


def _stop_at(round_: int):
    def progress(t: float, rounds: int, acc: float | None) -> None:
        if rounds >= round_:
            raise KeyboardInterrupt
    return progress


def test_resume_keeps_device_state(tmp_path):
    """Ctrl-C after round 2 and resume: the uninterrupted run's final model, bit for bit (each device's
    h_i and c_i, the cloud's c and H are in the checkpoint)."""
    cfg = {"protocol": {**UNIFORM, "fraction": 0.5}, "training": {"trainer": FEDDC}, "stop": {"rounds": 4},
           "runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1}}}
    whole = run_scenario(tiny(**cfg), tmp_path / "whole")
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(tiny(**cfg), out, progress=_stop_at(2))
    resumed = resume_run(out)
    assert resumed.summary["status"] == "completed" and resumed.summary["rounds"] == 4
    assert np.array_equal(whole.final_params, resumed.final_params)
    assert resumed.summary["device_state"] == whole.summary["device_state"]


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "expected"), [
    ({"training": {"trainer": "feddc"}}, ["protocol.weighting", "allowed: uniform"]),
    ({"training": {"trainer": {"name": "feddc", "server_rule": "paper"}}, "protocol": UNIFORM},
     ["protocol.weighting", "allowed: samples"]),
    ({"training": {"trainer": "feddc"}, "protocol": {"name": "fedasync"}}, ["training.trainer", "allowed: "]),
    ({"training": {"trainer": "feddc"}, "protocol": UNIFORM, "server_optimizer": {"cloud": {"name": "fedadam"}}},
     ["server_optimizer.cloud", "no server optimizer"]),
    ({"training": {"trainer": {"name": "feddc", "alpha": -1}}, "protocol": UNIFORM}, ["training.trainer", "alpha"]),
    ({"training": {"trainer": {"name": "feddc", "server_rule": "both"}}, "protocol": UNIFORM},
     ["server_rule", "code", "paper"]),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, override, expected):
    raw = json.loads(json.dumps(TINY))
    raw.update({key: value for key, value in override.items() if key != "training"})  # whole sections
    raw["training"] = {**TINY["training"], **override.get("training", {})}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err


def test_host_state_export_import_round_trip():
    """Named vectors per device survive export/import; a bare vector (older checkpoints) is SCAFFOLD's c."""
    host, _, _, w = _host()
    host.train(0, 1, _spec(), w, np.zeros(w.size, dtype=np.float32))
    state = host.export_state()
    assert set(state[0]) == {"h", "c"}
    other, *_ = _host()
    other.import_state({**state, 1: np.ones(3, dtype=np.float32)})
    np.testing.assert_array_equal(other.export_state()[0]["h"], host.export_state()[0]["h"])
    np.testing.assert_array_equal(other.export_state()[1]["c"], np.ones(3))
    assert other.export_state()[1]["c"].dtype == np.float32
