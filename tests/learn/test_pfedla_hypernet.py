"""pFedLA's hypernetworks and server jobs against hand calculations on tiny tensors (hierfl.methods.pfedla.trainer)."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.methods.pfedla.trainer import (
    HyperShape,
    hn_alpha,
    hypernet_step,
    init_hypernet,
    layer_groups,
    layer_weights,
    pack_hypernet,
    personalise,
    update_flops,
)


def _tiny_hn(shape: HyperShape) -> np.ndarray:
    # v = 1, every MLP weight 1 and bias 0 (the ReLUs pass 1 through); heads w = [1, 3], b = [1, 0]
    one = np.ones((1, 1))
    return pack_hypernet(shape, embedding=np.ones(1), w1=one, b1=np.zeros(1), w2=one, b2=np.zeros(1), w3=one,
                         b3=np.zeros(1), head_w=np.array([[[1.0], [3.0]]]), head_b=np.array([[1.0, 0.0]]))


def test_alpha_of_a_tiny_hypernetwork():
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=1, clients=2)
    import torch

    alpha = hn_alpha(torch.tensor(_tiny_hn(shape)), shape)
    assert alpha.tolist() == [[2.0, 3.0]]  # relu(1·1 + 1), relu(3·1 + 0)


@pytest.mark.parametrize("sign, factor", [("old_minus_new", 1.0), ("new_minus_old", -1.0)])
def test_one_hypernetwork_step_by_hand(sign, factor):
    """N = 2 clients, one layer of 2 parameters, d_e = h = 1, client 0, lr = 0.5.

    α = [2, 3] → â = [0.4, 0.6]; θ_0 = [1, 2], θ_1 = [3, 4] → θ̄ = [2.2, 3.2]; trained [2, 3]
    → g = θ̄ − θ_new = [0.2, 0.2]; s_j = θ_jᵀg = [0.6, 1.4]; gᵀθ̄ = 0.4·0.6 + 0.6·1.4 = 1.08;
    ∂/∂α_k = (s_k − 1.08)/5 = [−0.096, 0.064] = the heads' weight and bias gradients (x = 1);
    ∂/∂x = −0.096·1 + 0.064·3 = 0.096, which flows unchanged through the three unit layers to every
    MLP weight and bias and to v. The step subtracts 0.5 × these.
    """
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=1, clients=2)
    groups = layer_groups([("l.weight", (1,)), ("l.bias", (1,))])
    models = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    hn = _tiny_hn(shape)
    sent = personalise(models, groups, layer_weights(np.array([[2.0, 3.0]]), 0))
    assert sent.tolist() == pytest.approx([2.2, 3.2], abs=1e-6)
    new = hypernet_step(hn, shape, models, groups, 0, sent, np.array([2.0, 3.0], dtype=np.float32), lr=0.5,
                        vjp_sign=sign)
    d = 0.5 * 0.096 * factor
    expected = [1 - d, 1 - d, -d, 1 - d, -d, 1 - d, -d,      # v, w1, b1, w2, b2, w3, b3
                1 + 0.048 * factor, 3 - 0.032 * factor,      # head weights
                1 + 0.048 * factor, 0 - 0.032 * factor]      # head biases
    assert new.tolist() == pytest.approx(expected, abs=1e-6)


def test_kept_layers_carry_no_gradient():
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=1, clients=2)
    groups = layer_groups([("l.weight", (1,)), ("l.bias", (1,))])
    models = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    hn = _tiny_hn(shape)
    new = hypernet_step(hn, shape, models, groups, 0, models[0], np.zeros(2, np.float32), lr=0.5, k_keep=1)
    assert new.tolist() == hn.tolist()


def test_the_shortcut_equals_autograd_through_the_whole_model():
    """The step equals back-propagation of gᵀθ̄ through the full personalised model (random case)."""
    import torch

    rng = np.random.default_rng(0)
    layout = [("a.weight", (3, 2)), ("a.bias", (3,)), ("b.weight", (2, 3)), ("b.bias", (2,))]
    groups = layer_groups(layout)
    shape = HyperShape(embed_dim=4, hidden_dim=5, layers=len(groups), clients=3)
    hn = init_hypernet(shape, rng)
    models = rng.standard_normal((3, 17)).astype(np.float32)
    trained = rng.standard_normal(17).astype(np.float32)
    params = torch.tensor(hn, requires_grad=True)
    alpha = hn_alpha(params, shape)
    a_hat = alpha / alpha.sum(dim=1, keepdim=True)
    m = torch.tensor(models, dtype=torch.float64)
    theta = torch.zeros(17, dtype=torch.float64)
    for l, idx in enumerate(groups):
        theta = theta.index_add(0, torch.tensor(idx), (a_hat[l].double()[:, None] * m[:, idx]).sum(0))
    sent = theta.detach().numpy().astype(np.float32)
    g = torch.tensor(sent.astype(np.float64) - trained.astype(np.float64))
    (grad,) = torch.autograd.grad((theta * g).sum(), params)
    expected = hn - 0.1 * grad.numpy()
    new = hypernet_step(hn, shape, models, groups, 1, sent, trained, lr=0.1)
    np.testing.assert_allclose(new, expected, rtol=1e-4, atol=1e-6)


def test_init_hypernet_draws_the_documented_distributions():
    shape = HyperShape(embed_dim=3, hidden_dim=4, layers=2, clients=5)
    a = init_hypernet(shape, np.random.default_rng(7))
    b = init_hypernet(shape, np.random.default_rng(7))
    assert a.dtype == np.float32 and a.size == shape.size == 3 + 12 + 4 + 16 + 4 + 16 + 4 + 40 + 10
    assert a.tobytes() == b.tobytes()
    heads_w = a[-50:-10]
    assert (heads_w >= 0).all() and (heads_w <= 1).all()
    assert (a[-10:] == 0).all()  # head biases


def test_update_flops_by_hand():
    # F_hn = 2·(1·1 + 2·1·1 + 1·1·2) = 10; 6·N·P = 6·2·2 = 24 → 24 + 4·10 = 64
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=1, clients=2)
    assert shape.forward_flops == 10
    assert update_flops(shape, 2) == 64.0


def _params(**kw):
    return {"client": 0, "clients": 2, "seeds": [1, 2], "hn_lr": 0.5, "embed_dim": 1, "hidden_dim": 1,
            "k_keep": 0, "vjp_sign": "old_minus_new", "granularity": "layer", **kw}


def test_client_update_creates_the_store_steps_and_personalises():
    from hierfl.methods.pfedla.trainer import client_update

    layout = [("l.weight", (1,)), ("l.bias", (1,))]
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=1, clients=2)
    state: dict = {}
    sent = np.array([1.0, 2.0], dtype=np.float32)     # the common initial model
    trained = np.array([2.0, 3.0], dtype=np.float32)
    out, flops, stats = client_update(state, trained, sent, layout, _params())
    # the store: both clients start from the initial model, hypernetworks from their seeds
    assert state["models"].tolist() == [[2.0, 3.0], [1.0, 2.0]]   # θ_0 ← trained
    hn1 = init_hypernet(shape, np.random.default_rng(2))
    assert state["hypernets"][1].tobytes() == hn1.tobytes()       # client 1's untouched
    # client 0's hypernetwork: stepped at the store before θ_0 was replaced (both rows = sent: s_0 = s_1,
    # so â's gradient is zero whatever α is: an unchanged hypernetwork)
    hn0 = init_hypernet(shape, np.random.default_rng(1))
    assert state["hypernets"][0].tobytes() == hn0.tobytes()
    import torch

    alpha = hn_alpha(torch.tensor(hn0), shape).numpy()
    w = layer_weights(alpha, 0)
    expected = w[0, 0] * np.array([2.0, 3.0]) + w[0, 1] * np.array([1.0, 2.0])
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert flops == update_flops(shape, 2) == 64.0
    assert stats["kept_params"] == 0.0 and stats["self_weight"] == pytest.approx(w[0, 0])


def test_client_update_with_k_keep_returns_the_own_layer_and_its_size():
    from hierfl.methods.pfedla.trainer import client_update

    layout = [("a.weight", (2,)), ("b.weight", (1,))]
    state = {"models": np.array([[1.0, 2.0, 3.0], [5.0, 6.0, 7.0]], dtype=np.float32)}
    shape = HyperShape(embed_dim=1, hidden_dim=1, layers=2, clients=2)
    state["hypernets"] = np.stack([init_hypernet(shape, np.random.default_rng(s)) for s in (1, 2)])
    trained = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    out, _, stats = client_update(state, trained, state["models"][1].copy(), layout,
                                  _params(client=1, k_keep=2, seeds=[1, 2]))
    # every layer kept: client 1's personalised model is its own trained model [1.5, 2.5, 3.5]... of the
    # store, where θ_1 was just replaced by it
    assert out.tolist() == [1.5, 2.5, 3.5]
    assert stats["kept_params"] == 3.0 and stats["self_weight"] == 1.0


def test_store_mean_by_hand():
    from hierfl.methods.pfedla.trainer import store_mean

    mean, flops = store_mean({"models": np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32)})
    assert mean.tolist() == [2.0, 4.0] and flops == 4.0
    with pytest.raises(ValueError, match="empty"):
        store_mean({})

