"""Local trainers (sgd, fedprox, scaffold) and server optimizers inside the protocols: hand-computed steps,
SCAFFOLD = FedAvg with zero controls, doubled SCAFFOLD messages, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.assemble import build, train_spec
from hierfl.cli import main
from hierfl.methods.scaffold.math import ControlJob
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.dynamics.availability import steady_names
from hierfl.learn import LocalTrainer
from hierfl.learn.serveropt import SERVER_OPTIMIZERS
from hierfl.learn.trainers import TRAINERS
from hierfl.models import LogRegConfig
from hierfl.policies.straggler import neutral_names
from hierfl.protocols import PROTOCOLS
from hierfl.runtime.roles import Cloud, DeviceHost, LeaderHost
from tests.conftest import TINY, tiny
from tests.learn.test_local_training import C, D, _loss_grad, _tiny_data


def test_registry_and_spec_fields():
    assert all(TRAINERS.get(n).model_fields["name"].default == n for n in TRAINERS.names())
    assert train_spec(tiny()).mu == 0.0 and not train_spec(tiny()).control_variates
    spec = train_spec(tiny(training={"trainer": {"name": "fedprox", "mu": 0.25}}))
    assert spec.mu == 0.25 and spec.proximal == 0.25
    assert train_spec(tiny(training={"trainer": "scaffold"})).control_variates
    assert tiny(training={"trainer": "fedprox"}).training.trainer.mu == 0.01  # the [D] default


# -- FedProx ------------------------------------------------------------------------------------


def test_fedprox_two_full_batch_steps_by_hand():
    """Step 1 is plain SGD (w = w_t); step 2 adds μ(w − w_t) to the gradient (Li et al. 2020, §5.5)."""
    x, y, theta = _tiny_data()
    lr, mu = 0.3, 0.7
    trainer = LocalTrainer(LogRegConfig(), (D,), C)
    out, _ = trainer.train(theta, x, y, TrainSpec(epochs=None, steps=2, batch_size=None, lr=lr, mu=mu), seed=0)
    t1 = theta - lr * _loss_grad(theta, x, y)[1]
    t2 = t1 - lr * (_loss_grad(t1, x, y)[1] + mu * (t1 - theta))
    np.testing.assert_allclose(out, t2, rtol=1e-5, atol=1e-6)
    plain, _ = trainer.train(theta, x, y, TrainSpec(epochs=None, steps=2, batch_size=None, lr=lr), seed=0)
    assert not np.allclose(plain, out)  # μ really acts


def test_fedprox_mu_adds_to_protocol_rho():
    """FedAsync's ρ and FedProx's μ are the same term: a job with prox=0.2, mu=0.3 equals one with prox=0.5."""
    x, y, theta = _tiny_data()
    trainer = LocalTrainer(LogRegConfig(), (D,), C)
    a, _ = trainer.train(theta, x, y, TrainSpec(epochs=2, batch_size=2, lr=0.1, prox=0.2, mu=0.3), seed=4)
    b, _ = trainer.train(theta, x, y, TrainSpec(epochs=2, batch_size=2, lr=0.1, prox=0.5), seed=4)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# -- SCAFFOLD in the roles ---------------------------------------------------------------------


def _host(parts):
    x, y, theta = _tiny_data()
    return DeviceHost(x, y, parts, (LogRegConfig(), (D,), C, 1)), x, y, theta


def test_scaffold_job_by_hand_and_control_persists_in_host():
    """One full-batch step: y = x − η(g(x) + c − c_i); option II then gives c_i⁺ = g(x) exactly (K = 1)."""
    host, x, y, theta = _host([np.arange(5)])
    spec = TrainSpec(epochs=None, steps=1, batch_size=None, lr=0.5, control_variates=True, method=ControlJob())
    p = theta.size
    c = np.full(p, 0.1, dtype=np.float32)
    out, stats = host.train(0, 7, spec, theta, c)
    assert out.shape == (2 * p,) and stats["steps"] == 1
    g0 = _loss_grad(theta, x, y)[1]
    y1 = theta - 0.5 * (g0 + 0.1)               # c_i = 0 on the first job
    np.testing.assert_allclose(out[:p], y1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[p:], g0, rtol=1e-4, atol=1e-5)   # Δc = c_i⁺ − 0 = g(x)
    np.testing.assert_allclose(host.export_state()[0]["c"], g0, rtol=1e-4, atol=1e-5)
    # the second job of the same device uses its stored c_i = g0
    out2, _ = host.train(0, 8, spec, y1.astype(np.float32), c)
    g1 = _loss_grad(y1, x, y)[1]
    np.testing.assert_allclose(out2[:p], y1 - 0.5 * (g1 + 0.1 - g0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out2[p:], g1 - g0, rtol=1e-3, atol=1e-5)
    with pytest.raises(ValueError, match="server control"):
        host.train(0, 9, spec, theta, None)
    # a job without control variates leaves the state alone
    host.train(0, 9, TrainSpec(epochs=1, batch_size=2), theta)
    np.testing.assert_allclose(host.export_state()[0]["c"], g1, rtol=1e-3, atol=1e-5)


def test_scaffold_server_control_step_and_edge_relay():
    """Cloud: c ← c + Σ κ_i Δc_i; a leader relays [model; Σ κ_i Δc_i] and the cloud adds it with κ = 1."""
    host, x, y, theta = _host([np.arange(0, 3), np.arange(3, 5)])
    spec = TrainSpec(epochs=None, steps=1, batch_size=None, lr=0.5, control_variates=True, method=ControlJob())
    p = theta.size
    zero = np.zeros(p, dtype=np.float32)
    u0, _ = host.train(0, 1, spec, theta, zero)
    u1, _ = host.train(1, 2, spec, theta, zero)
    cloud = Cloud(theta, x, y, (LogRegConfig(), (D,), C, 1))
    cloud.add(3.0, u0, control_coef=0.5)
    cloud.add(2.0, u1, control_coef=0.5)
    model = cloud.commit()
    np.testing.assert_allclose(model, (3 * u0[:p] + 2 * u1[:p]) / 5, rtol=1e-6)
    np.testing.assert_allclose(cloud.get_control(), 0.5 * u0[p:] + 0.5 * u1[p:], rtol=1e-6, atol=1e-7)
    leaders = LeaderHost()
    leaders.add(0, 3.0, u0, control_coef=0.25)
    mid = leaders.commit(0)                      # an edge round without upload keeps the control sum
    assert mid.shape == (p,)
    leaders.add(0, 2.0, u1, control_coef=0.25)
    packed = leaders.commit(0, pack_control=True)
    np.testing.assert_allclose(packed[p:], 0.25 * u0[p:] + 0.25 * u1[p:], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(leaders._at(0).take_control(p), 0.0)  # reset after the relay
    cloud2 = Cloud(theta, x, y, (LogRegConfig(), (D,), C, 1))
    cloud2.add(1.0, packed, control_coef=1.0)
    np.testing.assert_allclose(cloud2.commit(), u1[:p], rtol=1e-6)
    np.testing.assert_allclose(cloud2.get_control(), packed[p:], rtol=1e-6)


def test_scaffold_with_zero_controls_equals_fedavg_in_the_first_round(tmp_path):
    sgd, scaf = {"momentum": 0.5}, {"momentum": 0.5, "trainer": "scaffold"}
    half = {"fraction": 0.5}
    fedavg = run_scenario(tiny(protocol=half, training=sgd, stop={"rounds": 1}), tmp_path / "a")
    scaffold = run_scenario(tiny(protocol=half, training=scaf, stop={"rounds": 1}), tmp_path / "b")
    assert np.array_equal(fedavg.final_params, scaffold.final_params)  # bit for bit
    f2 = run_scenario(tiny(protocol=half, training=sgd, stop={"rounds": 2}), tmp_path / "c")
    s2 = run_scenario(tiny(protocol=half, training=scaf, stop={"rounds": 2}), tmp_path / "d")
    assert not np.allclose(f2.final_params, s2.final_params, atol=1e-6)  # the controls act from round 2


def _first(metrics_path: Path, event: str) -> dict:
    return next(r for r in map(json.loads, metrics_path.read_text().splitlines()) if r["event"] == event)


def test_scaffold_messages_are_twice_the_model_in_bytes_and_time(tmp_path):
    """Constant profiles: down 1 Mbps, up 0.5 Mbps, 20 ms, 100 samples/s; logreg 5 → 3 = 18 parameters.

    FedAvg round = (0.02 + 72·8/1e6) + 60·2/100 + (0.02 + 72·8/0.5e6) = 1.241728 s;
    SCAFFOLD sends 144 bytes each way: 0.021152 + 1.2 + 0.022304 = 1.243456 s.
    """
    a = run_scenario(tiny(stop={"rounds": 1}), tmp_path / "a").summary
    b = run_scenario(tiny(stop={"rounds": 1}, training={"trainer": "scaffold"}), tmp_path / "b").summary
    assert a["model_bytes"] == 72 and b["model_bytes"] == 144
    assert b["totals"]["bytes_device_tier"] == 2 * a["totals"]["bytes_device_tier"] == 2 * 8 * 72
    assert _first(tmp_path / "a" / "metrics.jsonl", "cloud_aggregate")["t"] == pytest.approx(1.241728, abs=1e-12)
    assert _first(tmp_path / "b" / "metrics.jsonl", "cloud_aggregate")["t"] == pytest.approx(1.243456, abs=1e-12)
    hier = {"protocol": {"name": "hierfavg", "kappa1": 2}, "topology": {"edge_servers": 2}, "stop": {"rounds": 1}}
    ha = run_scenario(tiny(**hier), tmp_path / "ha").summary["totals"]
    hb = run_scenario(tiny(**hier, training={"trainer": "scaffold"}), tmp_path / "hb").summary["totals"]
    assert hb["bytes_edge_tier"] == 2 * ha["bytes_edge_tier"] > 0  # edges relay [model; Σ κ Δc]


def test_hierfavg_scaffold_runs_and_first_cloud_round_equals_hierfavg(tmp_path):
    hier = {"protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2}, "topology": {"edge_servers": 2},
            "stop": {"rounds": 1}}
    a = run_scenario(tiny(**hier), tmp_path / "a")
    b = run_scenario(tiny(**hier, training={"trainer": "scaffold"}), tmp_path / "b")
    # c = 0 for the whole first cloud round, but each device's c_i moves after its first edge round
    assert not np.array_equal(a.final_params, b.final_params)
    c = run_scenario(tiny(**{**hier, "protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 1}},
                          training={"trainer": "scaffold"}), tmp_path / "c")
    d = run_scenario(tiny(**{**hier, "protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 1}}), tmp_path / "d")
    assert np.array_equal(c.final_params, d.final_params)


# -- server optimizers inside the protocols ---------------------------------------------------


def test_fedavg_cloud_optimizer_steps_from_the_round_model(tmp_path):
    """One round: x1 = x0 + η(avg − x0) (fedavg, η = 0.5) and x0 + η Δ/(√v + τ) (fedadam, β1 = 0)."""
    one = {"stop": {"rounds": 1}}
    x0 = build(tiny(**one)).init_params.astype(np.float64)
    avg = run_scenario(tiny(**one), tmp_path / "a").final_params.astype(np.float64)
    half = run_scenario(tiny(**one, server_optimizer={"cloud": {"name": "fedavg", "lr": 0.5}}), tmp_path / "b")
    np.testing.assert_allclose(half.final_params, x0 + 0.5 * (avg - x0), rtol=1e-6, atol=1e-7)
    adam = run_scenario(tiny(**one, server_optimizer={"name": "fedadam", "lr": 0.05, "beta1": 0.0,
                                                      "beta2": 0.9, "tau": 0.01}), tmp_path / "c")
    d = avg - x0
    expect = x0 + 0.05 * d / (np.sqrt(0.9 * 1e-4 + 0.1 * d * d) + 0.01)
    np.testing.assert_allclose(adam.final_params, expect, rtol=1e-5, atol=1e-7)


def test_server_schedule_is_keyed_by_the_clouds_aggregations(tmp_path):
    """η·γ^s with η = 0.5, γ = 0.5: the first cloud step (s = 0) is the unscheduled one, bit for bit; both runs
    then train round 2 from the same x1 to the same average, which the scheduled run steps by 0.25 and the
    unscheduled one by 0.5: x2 − x1 = (x2' − x1)/2."""
    sched = {"name": "fedavg", "lr": 0.5, "lr_schedule": {"name": "exponential", "gamma": 0.5}}
    one = run_scenario(tiny(stop={"rounds": 1}, server_optimizer={"cloud": sched}), tmp_path / "a").final_params
    plain = run_scenario(tiny(stop={"rounds": 1}, server_optimizer={"cloud": {"name": "fedavg", "lr": 0.5}}),
                         tmp_path / "b").final_params
    assert one.tobytes() == plain.tobytes()
    two = run_scenario(tiny(stop={"rounds": 2}, server_optimizer={"cloud": sched}), tmp_path / "c").final_params
    unscheduled = run_scenario(tiny(stop={"rounds": 2}, server_optimizer={"cloud": {"name": "fedavg", "lr": 0.5}}),
                               tmp_path / "d").final_params
    assert not np.allclose(two, unscheduled, atol=1e-6)
    x1 = one.astype(np.float64)
    np.testing.assert_allclose(two - x1, (unscheduled.astype(np.float64) - x1) / 2, rtol=1e-5, atol=1e-7)


def test_fedavgm_beta_zero_lr_one_matches_fedavg_over_rounds(tmp_path):
    a = run_scenario(tiny(stop={"rounds": 3}), tmp_path / "a").final_params
    b = run_scenario(tiny(stop={"rounds": 3}, server_optimizer={"name": "fedavgm", "beta": 0.0}), tmp_path / "b")
    np.testing.assert_allclose(b.final_params, a, rtol=1e-5, atol=1e-6)


def test_hierfavg_edge_optimizer_steps_each_leader(tmp_path):
    """κ2 = 1, one cloud round: every leader steps x0 + η(avg_ℓ − x0), so the cloud's average is x0 + η(A − x0)."""
    hier = {"protocol": {"name": "hierfavg", "kappa1": 3}, "topology": {"edge_servers": 2}, "stop": {"rounds": 1}}
    x0 = build(tiny(**hier)).init_params.astype(np.float64)
    plain = run_scenario(tiny(**hier), tmp_path / "a").final_params.astype(np.float64)
    edge = run_scenario(tiny(**hier, server_optimizer={"edge": {"name": "fedavg", "lr": 0.4}}), tmp_path / "b")
    np.testing.assert_allclose(edge.final_params, x0 + 0.4 * (plain - x0), rtol=1e-5, atol=1e-7)


def test_fedbuff_server_step_goes_through_the_optimizer(tmp_path):
    fb = {"protocol": {"name": "fedbuff", "K": 2, "concurrency": 3}, "stop": {"rounds": 4}}
    plain = run_scenario(tiny(**fb), tmp_path / "a").final_params
    same = run_scenario(tiny(**fb, server_optimizer={"name": "fedavgm", "beta": 0.0}), tmp_path / "b").final_params
    np.testing.assert_allclose(same, plain, rtol=1e-5, atol=1e-6)
    adam = run_scenario(tiny(**fb, server_optimizer="fedadam"), tmp_path / "c").final_params
    assert not np.allclose(adam, plain, atol=1e-4)


# -- bad input: exit status 2, key path, no traceback ------------------------------------------


def _cli_validate(tmp_path: Path, capsys, **override) -> tuple[int, str]:
    from hierfl.scenario.loader import deep_merge

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(deep_merge(TINY, override)))
    code = main(["validate", str(path), "--build"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(("override", "needles"), [
    ({"training": {"trainer": "fedmagic"}}, ["training.trainer", *TRAINERS.names()]),
    ({"training": {"trainer": {"name": "fedprox", "mu": -0.1}}}, ["training.trainer.mu", "greater than or equal to 0"]),
    ({"server_optimizer": {"cloud": "adamw"}}, ["server_optimizer.cloud", *SERVER_OPTIMIZERS.names()]),
    ({"server_optimizer": {"name": "fedavgm", "beta": 1.0}}, ["server_optimizer", "beta", "less than 1"]),
    ({"server_optimizer": {"edge": {"name": "fedadam", "beta2": -0.5}}}, ["server_optimizer.edge.beta2"]),
    ({"server_optimizer": {"name": "fedyogi", "tau": 0}}, ["tau", "greater than 0"]),
    ({"server_optimizer": {"edge": "fedadam"}}, ["server_optimizer.edge", "fedavg", "tiers it supports: cloud"]),
    ({"server_optimizer": {"name": "fedadam", "lr_schedule": {"name": "step", "gamma": 0.9}}},
     ["server_optimizer.cloud.lr_schedule.gamma", "read only with name: exponential"]),
    # a schedule makes fedavg's η = 1 a real step: at a tier the protocol does not step it is refused
    ({"server_optimizer": {"edge": {"name": "fedavg", "lr_schedule": "cosine"}}},
     ["server_optimizer.edge", "tiers it supports: cloud"]),
    ({"training": {"trainer": "scaffold"}, "protocol": {"name": "fedasync"}},
     ["training.trainer", "scaffold",
      "allowed: " + ", ".join(n for n in PROTOCOLS.names() if PROTOCOLS.get(n).control_variates)]),
    # an update trained but never delivered would break c = mean(c_i): refused with the key path
    ({"training": {"trainer": "scaffold"}, "straggler": {"name": "deadline", "seconds": 1.0}},
     ["straggler.name", "allowed with scaffold: " + ", ".join(neutral_names())]),
    ({"training": {"trainer": "scaffold"}, "devices": {"availability": {"name": "markov", "mean_up_s": 10,
                                                                        "mean_down_s": 5}}},
     ["devices.availability", "allowed with scaffold: " + ", ".join(steady_names())]),
])
def test_bad_learning_input_exits_2(tmp_path, capsys, override, needles):
    code, err = _cli_validate(tmp_path, capsys, **override)
    assert code == 2, err
    for n in needles:
        assert n in err, (n, err)


def test_scaffold_control_weighting_matters_only_with_unequal_data(tmp_path):
    """κ_i = n_i/n and 1/N coincide when every device holds the same number of samples (iid: 60 each)."""
    def run(weighting, name, **kw):
        return run_scenario(tiny(training={"trainer": {"name": "scaffold", "control_weighting": weighting}},
                                 protocol={"fraction": 0.5}, stop={"rounds": 3}, **kw), tmp_path / name).final_params
    assert np.array_equal(run("samples", "a"), run("uniform", "b"))
    skew = {"data": {"partition": {"name": "dirichlet", "alpha": 0.3, "min_require_size": 5}}}
    assert not np.array_equal(run("samples", "c", **skew), run("uniform", "d", **skew))


@pytest.mark.parametrize("proto", [
    {"protocol": {"name": "fedasync", "concurrency": 3}, "stop": {"rounds": 6}},
    {"protocol": {"name": "ahfl", "leader_period": 0.4, "cloud_period": 1.1}, "topology": {"edge_servers": 2},
     "stop": {"rounds": 3}},
])
def test_async_steps_through_the_optimizer_hook(tmp_path, proto):
    """Server SGD without momentum and η = 1 reproduces each protocol's own mix (x + Δ, up to rounding);
    AHFL takes it at both tiers."""
    plain = run_scenario(tiny(**proto), tmp_path / "a").final_params
    tiers = {"cloud": {"name": "fedavgm", "beta": 0.0}}
    if proto["protocol"]["name"] == "ahfl":
        tiers["edge"] = {"name": "fedavgm", "beta": 0.0}
    same = run_scenario(tiny(**proto, server_optimizer=tiers), tmp_path / "b").final_params
    np.testing.assert_allclose(same, plain, rtol=1e-5, atol=1e-6)
    yogi = run_scenario(tiny(**proto, server_optimizer={"cloud": {"name": "fedyogi", "lr": 0.05}}), tmp_path / "c")
    assert not np.allclose(yogi.final_params, plain, atol=1e-4)


def test_fedavg_uniform_weighting_is_the_plain_mean(tmp_path):
    """Unequal shards: `uniform` averages the devices' models with equal weights; with equal shards it is samples."""
    skew = {"data": {"partition": {"name": "dirichlet", "alpha": 0.3, "min_require_size": 5}}, "stop": {"rounds": 1}}
    a = run_scenario(tiny(**skew), tmp_path / "a").final_params
    b = run_scenario(tiny(**skew, protocol={"weighting": "uniform"}), tmp_path / "b").final_params
    assert not np.allclose(a, b, atol=1e-6)
    c = run_scenario(tiny(stop={"rounds": 2}), tmp_path / "c").final_params
    d = run_scenario(tiny(stop={"rounds": 2}, protocol={"weighting": "uniform"}), tmp_path / "d").final_params
    np.testing.assert_allclose(c, d, rtol=1e-6, atol=1e-7)  # iid: 60 samples each


def test_plugin_section_without_name_lists_the_allowed_names(tmp_path, capsys):
    code, err = _cli_validate(tmp_path, capsys, training={"trainer": {"mu": 0.1}})
    assert code == 2 and "training.trainer: this section needs a `name`" in err
    assert "allowed: " + ", ".join(TRAINERS.names()) in err
