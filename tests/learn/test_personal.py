"""Personalisation: layer splits, device-held state, MAML / Meta-SGD math, per-device evaluation."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.core.device_eval import device_accuracy_fields, support_split, weighted_quantiles, weighted_tail_mean
from hierfl.driver import run_scenario
from hierfl.learn.local import param_layout
from hierfl.methods.personal.math import LayerSplitError, PersonalJob, layer_names, local_mask, resolve_layers
from hierfl.methods.personal.trainer import meta_grads
from hierfl.models import MLPConfig
from hierfl.runtime.executor import LocalExecutor, RunData
from tests.conftest import TINY, tiny

MLP = {"name": "mlp", "hidden": [6]}  # layers "layers.0" (5→6) and "layers.2" (6→3): 36 + 21 parameters
SHARDS = {"dataset": {"num_samples": 400}, "partition": {"name": "shards", "shards_per_client": 2}}


# -- layer splits ----------------------------------------------------------------------------------------

def test_layer_splits_by_count_and_name():
    layout = param_layout(MLPConfig(hidden=[6]).build((5,), 3))
    assert layer_names(layout) == ["layers.0", "layers.2"]
    assert resolve_layers(layout, 1, from_end=True) == ["layers.2"]           # FedPer: the head
    assert resolve_layers(layout, 1, from_end=False) == ["layers.0"]          # LG-FedAvg: all but the global top
    assert resolve_layers(layout, ("!", "layers.2"), from_end=False) == ["layers.0"]  # LG by names of global layers
    assert resolve_layers(layout, ("layers.2",), from_end=True) == ["layers.2"]
    mask = local_mask(layout, ["layers.2"])
    assert mask.sum() == 21 and mask[-21:].all() and not mask[:36].any()
    for bad in ((2, True), (0, False), (2, False), (("layers.0", "layers.2"), True), (("nope",), True)):
        with pytest.raises(LayerSplitError):
            resolve_layers(layout, *bad)


def test_support_split_is_seeded_and_covers_the_device():
    s, q = support_split(10, 0.2, 5, 3)
    assert len(s) == 2 and len(q) == 8 and sorted(np.concatenate([s, q])) == list(range(10))
    assert np.array_equal(support_split(10, 0.2, 5, 3)[0], s) and not np.array_equal(support_split(10, 0.2, 5, 4)[0], s)


# -- per-device accuracy distribution --------------------------------------------------------------------

def test_device_accuracy_fields_are_sample_weighted():
    # device accuracies 0.5 (4 samples), 1.0 (2), 0.0 (4): weighted mean 4/10; weighted p10 = 0, p50 = 0.5, p90 = 1
    rows = np.array([[2, 4, 4.0], [2, 2, 1.0], [0, 4, 8.0]])
    f = device_accuracy_fields(rows)
    assert f["device_accuracy_mean"] == pytest.approx(0.4) and f["device_loss_mean"] == pytest.approx(1.3)
    assert (f["device_accuracy_p10"], f["device_accuracy_p50"], f["device_accuracy_p90"]) == (0.0, 0.5, 1.0)
    assert f["device_eval_devices"] == 3
    # worst decile: the lowest 1 of 10 samples' worth, all at accuracy 0; spread: weighted std around 0.4,
    # √((4·0.1² + 2·0.6² + 4·0.4²)/10) = √0.14
    assert f["device_accuracy_worst10"] == 0.0
    assert f["device_accuracy_std"] == pytest.approx(np.sqrt(0.14))
    # a tail that cuts a device: 30 % of weight 10 = 1 at 0.2 and 2 of the 3 at 0.6 → (0.2 + 1.2)/3
    assert weighted_tail_mean(np.array([1.0, 0.6, 0.2]), np.array([6.0, 3.0, 1.0]), 0.3) == pytest.approx(1.4 / 3)
    assert weighted_tail_mean(np.array([0.7]), np.array([5.0]), 0.1) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="share"):
        weighted_tail_mean(np.array([0.7]), np.array([5.0]), 0.0)
    assert weighted_quantiles(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 8.0]), [0.05, 0.5, 0.95]) == [1.0, 2.0, 3.0]


# -- MAML and Meta-SGD meta-gradients on a quadratic toy --------------------------------------------------

def _quadratic():
    import torch

    g = np.random.default_rng(0)
    a = g.standard_normal((3, 3))
    c = g.standard_normal((3, 3))
    A, C = a @ a.T + np.eye(3), c @ c.T + np.eye(3)   # L_s = ½θᵀAθ − bᵀθ, L_q = ½θᵀCθ − dᵀθ
    b, d, theta = g.standard_normal(3), g.standard_normal(3), g.standard_normal(3)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    At, Ct, bt, dt = t(A), t(C), t(b), t(d)
    ls = lambda p: 0.5 * p[0] @ At @ p[0] - bt @ p[0]  # noqa: E731
    lq = lambda p: 0.5 * p[0] @ Ct @ p[0] - dt @ p[0]  # noqa: E731
    return A, C, b, d, theta, ls, lq, t


def test_maml_meta_gradient_matches_closed_form():
    A, C, b, d, theta, ls, lq, t = _quadratic()
    alpha = 0.1
    adapted = theta - alpha * (A @ theta - b)
    second = (np.eye(3) - alpha * A).T @ (C @ adapted - d)   # ∇θ L_q(θ − α∇L_s(θ))
    first = C @ adapted - d                                  # first order: the Jacobian taken as I
    (g2,), _ = meta_grads([t(theta).requires_grad_()], [alpha], ls, lq, first_order=False)
    (g1,), _ = meta_grads([t(theta).requires_grad_()], [alpha], ls, lq, first_order=True)
    np.testing.assert_allclose(g2.numpy(), second, rtol=1e-10)
    np.testing.assert_allclose(g1.numpy(), first, rtol=1e-10)
    assert not np.allclose(second, first)  # the two really differ on this toy


def test_meta_sgd_gradient_of_alpha_matches_closed_form():
    A, C, b, d, theta, ls, lq, t = _quadratic()
    alpha = np.array([0.1, 0.05, 0.2])
    gs = A @ theta - b
    adapted = theta - alpha * gs
    g_theta = (np.eye(3) - np.diag(alpha) @ A).T @ (C @ adapted - d)
    g_alpha = -gs * (C @ adapted - d)                         # ∂L_q/∂α_j = −(∇L_s)_j (∇L_q(θ'))_j
    (gt,), (ga,) = meta_grads([t(theta).requires_grad_()], [t(alpha).requires_grad_()], ls, lq, learn_alpha=True)
    np.testing.assert_allclose(gt.numpy(), g_theta, rtol=1e-10)
    np.testing.assert_allclose(ga.numpy(), g_alpha, rtol=1e-10)


# -- device-held state: personal layers never leave the device ---------------------------------------------

def _executor(sc):
    b = build(sc)
    data = RunData(b.dataset.x_train, b.dataset.y_train, b.parts, b.dataset.x_test, b.dataset.y_test, b.init_params,
                   (sc.model, tuple(b.dataset.input_shape), b.dataset.num_classes, 1), b.world.num_edges, b.spec,
                   eval_sets=tuple(b.eval_sets))
    return b, LocalExecutor(data)


def test_fedper_head_stays_on_the_device_as_its_state():
    sc = tiny(training={"trainer": "fedper"}, model=MLP)
    b, ex = _executor(sc)
    assert isinstance(b.spec.method, PersonalJob) and b.spec.keeps_device_state
    head = np.zeros(57, dtype=bool)
    head[36:] = True
    assert b.world.model_bytes == 4 * 36  # a message carries the base only
    up, _, _ = ex.train(0, 7, b.spec, b.init_params)
    assert not up[head].any() and up[~head].any()  # the upload's head is zeros
    saved = copy.deepcopy(ex.state.export_roles())  # what a checkpoint keeps of the device states
    state = saved["hosts"][0]["local"]
    assert state.shape == (21,) and not np.array_equal(state, b.init_params[head])
    assert ex.state.device_state_bytes() == (1, 21 * 4) and 1 not in saved["hosts"]
    # the next job starts from the device's own head: putting the same state back gives the same job
    up2, _, _ = ex.train(0, 8, b.spec, up)
    after = np.array(ex.state.export_roles()["hosts"][0]["local"])
    assert not np.array_equal(after, state)
    ex.state.import_roles(copy.deepcopy(saved))
    up3, _, _ = ex.train(0, 8, b.spec, up)
    assert np.array_equal(up2, up3) and np.array_equal(ex.state.export_roles()["hosts"][0]["local"], after)
    zeroed = copy.deepcopy(saved)
    zeroed["hosts"][0]["local"] = np.zeros(21, dtype=np.float32)
    ex.state.import_roles(zeroed)
    assert not np.array_equal(ex.train(0, 8, b.spec, up)[0], up2)
    # a reset device (it moved under migration.device_state: reset) starts again from the initial model's head,
    # as a device that never trained does
    ex.state.reset_devices([0])
    assert ex.state.device_state_bytes() == (0, 0)
    fresh, _, _ = ex.train(0, 7, b.spec, b.init_params)
    assert np.array_equal(fresh, up) and np.array_equal(ex.state.export_roles()["hosts"][0]["local"], state)


def test_devices_without_state_start_from_the_state_base():
    """After a warm-up the model devices start from is the warm-up's global model, not the initial one: a device
    that never trained takes its local layers from it (and keeps the initial model's before)."""
    sc = tiny(training={"trainer": "fedper"}, model=MLP)
    b, ex = _executor(sc)
    trained, _, _ = ex.train(0, 7, b.spec, b.init_params)
    before, _, _ = ex.train(1, 7, b.spec, trained)
    ex.state.reset_devices([1])
    warm = b.init_params + 0.5
    ex.set_state_base(warm)
    after, _, _ = ex.train(1, 7, b.spec, trained)
    assert not np.array_equal(before, after)
    ex.state.reset_devices([1])
    ex.set_state_base(b.init_params)
    assert np.array_equal(ex.train(1, 7, b.spec, trained)[0], before)
    assert ex.state.driver_state()["base"] is not None


def test_fedper_run_cloud_model_lacks_the_head_and_bytes_are_the_base(tmp_path):
    res = run_scenario(tiny(training={"trainer": "fedper"}, model=MLP, data={"local_test_fraction": 0.25}), tmp_path)
    s = res.summary
    assert s["model_bytes"] == 4 * 36 and not res.final_params[36:].any() and res.final_params[:36].any()
    trace = json.loads((tmp_path / "trace.json").read_text())
    sizes = {e["args"]["bytes"] for e in trace if e.get("args", {}).get("bytes") is not None}
    assert sizes == {4 * 36}
    # 3 rounds × 4 devices, down and up
    assert s["totals"]["bytes_cloud"] == 3 * 4 * 2 * 4 * 36
    assert 0 < s["final_device_accuracy"] <= 1


def test_meta_sgd_learns_alpha_and_personal_eval_beats_global_on_two_label_devices(tmp_path):
    over = {"model": MLP, "data": {**SHARDS, "local_test_fraction": 0.25}, "stop": {"rounds": 4}}
    meta = run_scenario(tiny(training={"trainer": {"name": "fedmeta", "learner": "meta_sgd", "inner_lr": 0.05},
                                       "epochs": 1}, **over), tmp_path / "m")
    alpha = meta.final_params[57:]
    assert alpha.shape == (57,) and np.isfinite(alpha).all() and not np.allclose(alpha, 0.05)
    assert meta.summary["model_bytes"] == 4 * 114  # [θ; α] travels
    fedper = run_scenario(tiny(training={"trainer": "fedper"}, **over), tmp_path / "p")
    last = fedper.evals[-1]
    # each device sees 2 of 3 classes: its own head beats the (headless) global model by far
    assert last["device_accuracy_mean"] > 0.8 and last["accuracy"] < 0.5


def test_held_out_devices_are_evaluated_not_trained(tmp_path):
    sc = tiny(training={"trainer": {"name": "fedmeta", "first_order": True}}, data={"test_devices": 3})
    b = build(sc)
    assert b.world.num_devices == 4 and [d for d, _, t in b.eval_sets] == [4, 5, 6]
    assert all(t is None for _, _, t in b.eval_sets)
    res = run_scenario(sc, tmp_path)
    assert res.evals[-1]["device_eval_devices"] == 3
    assert res.evals[-1]["device_accuracy_mean"] > res.evals[0]["device_accuracy_mean"]


def test_no_device_eval_fields_without_held_out_data(tmp_path):
    res = run_scenario(tiny(), tmp_path)
    assert "device_accuracy_mean" not in res.evals[-1] and "final_device_accuracy" not in res.summary


# -- bad input: exit 2 with the key path -----------------------------------------------------------------

@pytest.mark.parametrize(("override", "key"), [
    ({"model": MLP, "training": {"trainer": {"name": "fedper", "head_layers": 2}}}, "training.trainer.head_layers"),
    ({"model": MLP, "training": {"trainer": {"name": "lg_fedavg", "global_layers": 3}}},
     "training.trainer.global_layers"),
    ({"training": {"trainer": {"name": "fedmeta", "support_fraction": 1.0}}}, "training.trainer.support_fraction"),
    ({"training": {"trainer": {"name": "fedmeta", "support_fraction": 0}}}, "training.trainer.support_fraction"),
    ({"data": {"local_test_fraction": 1.0}}, "data.local_test_fraction"),
])
def test_bad_personal_input_exits_2_with_the_key_path(tmp_path, capsys, override, key):
    from hierfl.scenario.loader import deep_merge
    from tests.badinput import assert_refused

    assert_refused(tmp_path, capsys, deep_merge(copy.deepcopy(TINY), override), key)


def test_lg_fedavg_warmup_is_fedavg_then_devices_start_from_its_model(tmp_path):
    lg = {"name": "lg_fedavg", "global_layers": 1, "warmup_rounds": 2}
    over = {"model": MLP, "data": {"local_test_fraction": 0.25}}
    warm = run_scenario(tiny(training={"trainer": lg}, stop={"rounds": 2}, **over), tmp_path / "w")
    fedavg = run_scenario(tiny(stop={"rounds": 2}, **over), tmp_path / "f")
    assert np.array_equal(warm.final_params, fedavg.final_params)  # the warm-up is FedAvg, bit for bit
    after = run_scenario(tiny(training={"trainer": lg}, stop={"rounds": 3}, **over), tmp_path / "a")
    assert not after.final_params[:36].any() and after.final_params[36:].any()  # then the base stays local
    cold = run_scenario(tiny(training={"trainer": {**lg, "warmup_rounds": 0}}, stop={"rounds": 3}, **over),
                        tmp_path / "c")
    assert not np.array_equal(cold.final_params, after.final_params)


def test_worst_decile_and_spread_in_the_python_api_frames(tmp_path):
    """Per-device evaluation reaches the eval frame of ``hierfl.api.run``: the worst decile's mean is at
    most p10 (it averages values at or below it), and the spread is 0 only if every device scores alike."""
    from hierfl.api import run

    res = run(dict(TINY, data={**TINY["data"], "local_test_fraction": 0.25}), out=tmp_path / "run")
    evals = res.evals
    for col in ("device_accuracy_mean", "device_accuracy_p10", "device_accuracy_worst10", "device_accuracy_std"):
        assert col in evals.columns and evals[col].notna().all()
    assert (evals["device_accuracy_worst10"] <= evals["device_accuracy_p10"] + 1e-12).all()
    assert (evals["device_accuracy_std"] >= 0).all()


def test_a_held_out_device_is_adapted_on_its_support_rows_and_tested_on_its_query_rows():
    """Per-device evaluation through the job method: a held-out device's rows are cut by the trainer's own
    seeded split (not the default one), it adapts on the support part and is tested on the query part."""
    from hierfl.core.method import JobMethod
    from hierfl.methods.personal.job import personaliser

    sc = tiny(training={"trainer": {"name": "fedavgmeta", "support_fraction": 0.5, "inner_steps": 2}},
              data={"test_devices": 1}, model=MLP)
    b, ex = _executor(sc)
    job, host = b.spec.method, ex.host
    device, rows, test = host.eval_sets[0]
    assert isinstance(job, PersonalJob) and test is None and job.split_seed != 0
    support, query = support_split(rows.size, 0.5, job.split_seed, device)
    assert not np.array_equal(query, JobMethod.eval_split(job, device, rows.size)[1])  # not the default split
    got = host.evaluate_devices([0], b.init_params, method=job)[0]
    pz = personaliser(job, host.method_context(0, b.spec))  # (the host's runner of the job: any device's context)
    theta = pz.adapted(b.init_params, b.init_params, host.x[rows[support]], host.y[rows[support]])
    assert not np.array_equal(theta, b.init_params)  # the fine-tuning steps moved it
    acc, loss = host.trainer.evaluate(theta, host.x[rows[query]], host.y[rows[query]])
    np.testing.assert_allclose(got, [round(acc * query.size), query.size, loss * query.size], rtol=1e-12)
    plain = host.evaluate_devices([0], b.init_params)[0]
    assert plain[1] != got[1] or plain[2] != got[2]
