"""Server optimizers (docs/explanation/algorithms.md §5.7) and SCAFFOLD's option-II control step (§5.6): hand-computed steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierfl.methods.scaffold.math import control_weights, correction, option2_control
from hierfl.core.serveropt import OptState
from hierfl.learn.serveropt import SERVER_OPTIMIZERS
from hierfl.scenario.serveropt import ServerOptimizerSection
from hierfl.methods.fedopt.config import (
    FedAdagradOpt,
    FedAdamOpt,
    FedAvgMOpt,
    FedAvgOpt,
    FedYogiOpt,
)

X0 = np.array([0.0, 0.0], dtype=np.float32)
D1 = np.array([0.5, -1.0])


def test_registry_has_the_five_optimizers():
    assert all(SERVER_OPTIMIZERS.get(n).model_fields["name"].default == n for n in SERVER_OPTIMIZERS.names())


def test_fedavg_step_and_plain_average_flag():
    x = np.array([1.0, 2.0], dtype=np.float32)
    out = FedAvgOpt(lr=0.5).step(x, D1, OptState())
    assert out.dtype == np.float32 and out.tolist() == [1.25, 1.5]
    assert FedAvgOpt().plain_average and not FedAvgOpt(lr=0.5).plain_average
    assert not FedAvgMOpt(beta=0.0).plain_average


def test_fedavgm_two_steps_by_hand():
    opt, state = FedAvgMOpt(lr=1.0, beta=0.9), OptState()
    x1 = opt.step(np.array([1.0, 2.0], dtype=np.float32), D1, state)
    assert x1.tolist() == [1.5, 1.0] and state.m.tolist() == [0.5, -1.0]   # m_0 = Δ_0
    x2 = opt.step(x1, np.array([1.0, 1.0]), state)
    np.testing.assert_allclose(state.m, [0.9 * 0.5 + 1.0, 0.9 * -1.0 + 1.0])  # [1.45, 0.1]
    np.testing.assert_allclose(x2, [2.95, 1.1], rtol=1e-7)


def test_fedavgm_beta_zero_is_server_sgd_closed_form():
    """β = 0: x_T = x_0 + η Σ Δ_t (no memory)."""
    rng = np.random.default_rng(0)
    deltas = rng.standard_normal((4, 5))
    opt, state = FedAvgMOpt(lr=0.3, beta=0.0), OptState()
    x = np.zeros(5, dtype=np.float32)
    for d in deltas:
        x = opt.step(x, d, state)
    np.testing.assert_allclose(x, 0.3 * deltas.sum(axis=0), rtol=1e-6, atol=1e-7)


def test_fedadam_first_step_by_hand():
    opt, state = FedAdamOpt(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3), OptState()
    x = opt.step(X0, D1, state)
    # m = 0.1·Δ; v = 0.99·τ² + 0.01·Δ² (v_{-1} = τ²); x = η m / (√v + τ), no bias correction
    np.testing.assert_allclose(state.m, [0.05, -0.1])
    np.testing.assert_allclose(state.v, [0.00250099, 0.01000099], rtol=1e-12)
    np.testing.assert_allclose(x, [0.09802019012094852, -0.09900504888254247], rtol=1e-6)


def test_fedadam_beta1_zero_closed_form():
    """β1 = 0: x_T = x_0 + η Σ_t Δ_t / (√v_t + τ), v_t = β2^{t+1} τ² + (1 − β2) Σ_{k≤t} β2^{t−k} Δ_k²."""
    rng = np.random.default_rng(1)
    deltas = rng.standard_normal((3, 4)) * 0.1
    lr, b2, tau = 0.05, 0.9, 1e-2
    opt, state = FedAdamOpt(lr=lr, beta1=0.0, beta2=b2, tau=tau), OptState()
    x = np.zeros(4, dtype=np.float32)
    expected = np.zeros(4)
    for t, d in enumerate(deltas):
        x = opt.step(x, d, state)
        v_t = b2 ** (t + 1) * tau ** 2 + (1 - b2) * sum(b2 ** (t - k) * deltas[k] ** 2 for k in range(t + 1))
        expected = expected + lr * d / (np.sqrt(v_t) + tau)
    np.testing.assert_allclose(x, expected, rtol=1e-6, atol=1e-8)


def test_fedyogi_first_and_shrinking_step_by_hand():
    opt, state = FedYogiOpt(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3), OptState()
    x = opt.step(X0, D1, state)
    # v_{-1} = τ² < Δ²: sign = −1, so v = τ² + 0.01·Δ²
    np.testing.assert_allclose(state.v, [0.002501, 0.010001], rtol=1e-12)
    np.testing.assert_allclose(x, [0.09801999800039991, -0.09900499987500627], rtol=1e-6)
    v1 = state.v.copy()
    opt.step(x, np.array([0.01, 0.01]), state)
    # now v > Δ² = 1e-4: sign = +1, v shrinks by 0.01·1e-4
    np.testing.assert_allclose(state.v, v1 - 1e-6, rtol=1e-12)


def test_fedadagrad_first_step_by_hand():
    opt, state = FedAdagradOpt(lr=0.1, tau=1e-3), OptState()
    assert opt.beta1 == 0.0  # Adagrad's default: no first-moment averaging
    x = opt.step(X0, D1, state)
    np.testing.assert_allclose(state.v, [0.250001, 1.000001], rtol=1e-12)
    np.testing.assert_allclose(x, [0.09980019999980001, -0.09990004999998751], rtol=1e-6)
    opt.step(x, D1, state)
    np.testing.assert_allclose(state.v, [0.500001, 2.000001], rtol=1e-12)  # v accumulates Δ²


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=6), st.floats(0.0, 0.99), st.floats(1e-4, 1.0))
def test_adaptive_moments_nonnegative_and_step_bounded(delta, beta2, tau):
    """v stays >= 0, and with β1 = 0 a first step moves each coordinate by at most η/√(1 − β2)
    (Adam, Yogi: √v >= √(1 − β2)·|Δ|) or η (Adagrad: √v >= |Δ|)."""
    d = np.asarray(delta)
    for cls in (FedAdamOpt, FedYogiOpt, FedAdagradOpt):
        kw = {"beta2": beta2} if cls is not FedAdagradOpt else {}
        bound = 0.1 if cls is FedAdagradOpt else 0.1 / math.sqrt(1 - beta2)
        opt, state = cls(lr=0.1, beta1=0.0, tau=tau, **kw), OptState()
        x = opt.step(np.zeros(d.size, dtype=np.float32), d, state)
        assert np.all(state.v >= 0)
        assert np.all(np.abs(x) <= bound * (1 + 1e-6))


def test_server_rate_schedule_by_hand():
    """``lr_schedule`` keyed by the aggregator's round s (its completed steps): η·factor(s), transcribed by hand."""
    # fedavg, η = 0.8, step schedule (every 2, factor 0.5): rates 0.8, 0.8, 0.4, 0.4, 0.2
    opt, state = FedAvgOpt(lr=0.8, lr_schedule={"name": "step", "every": 2, "factor": 0.5}), OptState()
    assert not opt.plain_average
    x = np.zeros(1, dtype=np.float32)
    for _ in range(5):
        x = opt.step(x, np.array([1.0]), state)
    np.testing.assert_allclose(x, [0.8 + 0.8 + 0.4 + 0.4 + 0.2], rtol=1e-6)
    # fedavgm, η = 1, β = 0.5, exponential γ = 0.9: m = 1, 1.5, 1.75; x = 1 + 0.9·1.5 + 0.81·1.75 = 3.7675
    opt, state = FedAvgMOpt(lr=1.0, beta=0.5, lr_schedule={"name": "exponential", "gamma": 0.9}), OptState()
    x = np.zeros(1, dtype=np.float32)
    for _ in range(3):
        x = opt.step(x, np.array([1.0]), state)
    np.testing.assert_allclose(x, [3.7675], rtol=1e-6)
    # fedadam, β1 = 0, β2 = 0, τ = 0 would divide by 0: τ = 1e-3, Δ = 1; m = 1, v = 1 (β2 = 0), so each step is
    # η_s/(1 + τ); cosine over 2 rounds to floor 0.5: factors 1, 0.75, 0.5, 0.5
    opt = FedAdamOpt(lr=0.1, beta1=0.0, beta2=0.0, tau=1e-3,
                     lr_schedule={"name": "cosine", "rounds": 2, "floor": 0.5})
    state, x = OptState(), np.zeros(1, dtype=np.float32)
    for _ in range(4):
        x = opt.step(x, np.array([1.0]), state)
    np.testing.assert_allclose(x, [0.1 * (1 + 0.75 + 0.5 + 0.5) / 1.001], rtol=1e-6)
    assert state.steps == 4


def test_constant_server_schedule_is_the_unscheduled_optimizer_bit_for_bit():
    rng = np.random.default_rng(3)
    deltas = rng.standard_normal((3, 6))
    outs = []
    for kw in ({}, {"lr_schedule": "constant"}):
        opt, state, x = FedYogiOpt(lr=0.03, **kw), OptState(), np.zeros(6, dtype=np.float32)
        for d in deltas:
            x = opt.step(x, d, state)
        outs.append(x)
    assert outs[0].tobytes() == outs[1].tobytes()
    assert FedAvgOpt(lr_schedule="constant").plain_average
    assert not FedAvgOpt(lr_schedule={"name": "exponential", "gamma": 0.99}).plain_average


def test_section_shorthand_and_defaults():
    sec = ServerOptimizerSection.model_validate("fedadam")
    assert sec.cloud.name == "fedadam" and sec.edge.name == "fedavg" and sec.at("edge") is None
    sec = ServerOptimizerSection.model_validate({"name": "fedavgm", "beta": 0.5})
    assert sec.cloud.beta == 0.5
    sec = ServerOptimizerSection.model_validate({"edge": {"name": "fedyogi", "lr": 0.02}})
    assert sec.at("cloud") is None and sec.at("edge").lr == 0.02
    assert ServerOptimizerSection().at("cloud") is None  # plain averaging by default


@pytest.mark.parametrize("bad", [{"name": "fedavgm", "beta": 1.0}, {"name": "fedavgm", "beta": -0.1},
                                 {"name": "fedadam", "beta1": 1.0}, {"name": "fedyogi", "beta2": 1.5},
                                 {"name": "fedadam", "tau": 0.0}, {"name": "fedadagrad", "tau": -1},
                                 {"name": "fedavg", "lr": 0}, {"name": "fedsgd"},
                                 {"name": "fedadam", "lr_schedule": {"name": "exponential", "gamma": 1.5}}])
def test_bad_hyper_parameters_rejected(bad):
    with pytest.raises(ValueError):
        ServerOptimizerSection.model_validate(bad)


# -- SCAFFOLD, option II -----------------------------------------------------------------------


def test_option2_control_by_hand():
    c_i = np.array([0.1, -0.2], dtype=np.float32)
    c = np.array([0.05, 0.05], dtype=np.float32)
    x = np.array([1.0, 1.0], dtype=np.float32)
    y = np.array([0.8, 1.3], dtype=np.float32)
    new, delta = option2_control(c_i, c, x, y, steps=4, lr=0.1)
    # (x − y)/(K η) = [0.2, −0.3]/0.4 = [0.5, −0.75]; c_i⁺ = c_i − c + that
    np.testing.assert_allclose(new, [0.55, -1.0], rtol=1e-6)
    np.testing.assert_allclose(delta, [0.45, -0.8], rtol=1e-6)
    np.testing.assert_allclose(correction(c, c_i), [-0.05, 0.25], rtol=1e-6)
    with pytest.raises(ValueError):
        option2_control(c_i, c, x, y, steps=0, lr=0.1)


def test_control_weights():
    assert control_weights(np.array([10, 30]), "uniform").tolist() == [0.5, 0.5]
    assert control_weights(np.array([10, 30]), "samples").tolist() == [0.25, 0.75]
    with pytest.raises(ValueError):
        control_weights(np.array([1]), "median")
    assert math.isclose(sum(control_weights(np.arange(1, 8), "samples")), 1.0)
