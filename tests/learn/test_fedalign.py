"""FedAlign (Mendieta et al., CVPR 2022): the transfer matrix and the power-iteration estimate against
hand calculations, the loss of a tiny network by hand (both forms), where its gradient goes, the slim
pass's cost in virtual time, the trainer under FedAvg/FedAsync/HierFAVG, and bad input."""

from __future__ import annotations

from functools import partial

import json
import math

import numpy as np
import pytest
import torch
import yaml

from hierfl.assemble import build
from hierfl.cli import main
from hierfl.methods.fedalign.math import AlignSpec, align_work_factor
from hierfl.core.work import TrainSpec
from hierfl.driver import run_scenario
from hierfl.methods.fedalign.trainer import fedalign_loss, top_singular, transfer_matrix
from hierfl.learn.local import LocalTrainer, init_params
from hierfl.models import CNNConfig, MLPConfig
from tests.conftest import TINY, tiny

ALIGN = {"name": "fedalign"}
MLP44 = {"name": "mlp", "hidden": [4, 4]}


def test_transfer_matrix_by_hand():
    """Vectors: G = a oᵀ = [[3, 4, 5], [6, 8, 10]]. Maps: a 2x2 input is average-pooled to the 1x1 output,
    mean([1, 2, 3, 4]) = 2.5, so G = 2.5 · 5 / 1 = 12.5; two 1x2 maps: G = A Oᵀ / 2."""
    g = transfer_matrix(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0, 5.0]]))
    torch.testing.assert_close(g, torch.tensor([[[3.0, 4.0, 5.0], [6.0, 8.0, 10.0]]]))
    g = transfer_matrix(torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]), torch.tensor([[[[5.0]]]]))
    torch.testing.assert_close(g, torch.tensor([[[12.5]]]))
    a = torch.tensor([[[[1.0, 2.0]], [[0.0, 1.0]]]])  # (1, 2, 1, 2)
    o = torch.tensor([[[[3.0, -1.0]]]])  # (1, 1, 1, 2)
    torch.testing.assert_close(transfer_matrix(a, o), torch.tensor([[[0.5], [-0.5]]]))


def test_power_iteration_against_the_exact_spectral_norm():
    """G = [[2, 1], [1, 3]]: G Gᵀ = [[5, 5], [5, 10]], λ_max = (15 + √125)/2, so σ = √λ_max = (5 + √5)/2 =
    3.6180…, G's exact spectral norm. Ten iterations reach it (λ₂/λ₁ ≈ 0.146); one iteration from the
    all-ones vector is the code's first iterate, √‖K·1‖ = √‖[10, 15]‖ = 325^(1/4)."""
    g = torch.tensor([[[2.0, 1.0], [1.0, 3.0]]])
    exact = (5 + math.sqrt(5)) / 2
    assert float(torch.linalg.matrix_norm(g[0], ord=2)) == pytest.approx(exact, rel=1e-6)
    assert float(top_singular(g, 10)[0]) == pytest.approx(exact, rel=1e-6)
    assert float(top_singular(g, 1)[0]) == pytest.approx(325 ** 0.25, rel=1e-6)
    # per sample; an all-zero G gives σ ≈ 0 with a finite gradient (the code would divide 0 by 0)
    z = torch.zeros(1, 2, 2, requires_grad=True)
    sigma = top_singular(torch.cat([g, z]), 10)
    assert float(sigma[1].detach()) < 1e-5
    sigma.sum().backward()
    assert torch.isfinite(z.grad).all()


def _net() -> torch.nn.Module:
    """2 → 2 → 2 → 2: the stem is the identity (f_in = ReLU(x)), the final block W = diag(1, 2), b = 0, the
    head all zeros (logits 0, so CE = ln 2)."""
    m = MLPConfig(hidden=[2, 2]).build((2,), 2)
    with torch.no_grad():
        m.layers[0].weight.copy_(torch.eye(2))
        m.layers[2].weight.copy_(torch.diag(torch.tensor([1.0, 2.0])))
        for layer in (m.layers[0], m.layers[2], m.layers[4]):
            layer.bias.zero_()
        m.layers[4].weight.zero_()
    return m


def test_loss_of_a_tiny_network_by_hand():
    """x = [3, 4]: f_in = [3, 4], f_out = [3, 8]. Vector features make G = a oᵀ of rank one, so
    σ_F = ‖a‖·‖o‖ = 5√73; at width 0.5 the slim block keeps a = [3] and W[:1, :1] = 1: σ_S = 3·3 = 9.
    ℓ_Lip = (9 − 5√73)²; CE = ln 2. Code form: ln 2 + μ·(ln 2/ℓ_Lip)·ℓ_Lip = 1.45 ln 2;
    paper form: ln 2 + 0.45·ℓ_Lip."""
    x, y = torch.tensor([[3.0, 4.0]]), torch.tensor([0])
    lip = (9 - 5 * math.sqrt(73)) ** 2
    code = fedalign_loss(_net(), x, y, AlignSpec(mu=0.45, width=0.5))
    assert float(code.detach()) == pytest.approx(1.45 * math.log(2), rel=1e-6)
    paper = fedalign_loss(_net(), x, y, AlignSpec(mu=0.45, width=0.5, normalize=False))
    assert float(paper.detach()) == pytest.approx(math.log(2) + 0.45 * lip, rel=1e-6)


def test_only_the_final_block_feels_the_lipschitz_term():
    """The stem and the head get exactly cross-entropy's gradients (f_in is detached, σ_F has no
    gradient); the final block's differ."""
    x = torch.tensor([[3.0, 4.0], [1.0, 0.5]])
    y = torch.tensor([0, 1])
    plain, align = _net(), _net()
    torch.nn.functional.cross_entropy(plain(x), y).backward()
    fedalign_loss(align, x, y, AlignSpec(mu=0.45, width=0.5)).backward()
    for k in (0, 4):
        assert torch.equal(plain.layers[k].weight.grad, align.layers[k].weight.grad)
    assert not torch.equal(plain.layers[2].weight.grad, align.layers[2].weight.grad)


def test_a_cnn_job_slims_its_second_convolution_block():
    """On a cnn the transfer matrices are C_in × C_out over 4x4 → 2x2 maps (the input pooled); a job runs,
    is reproducible, and its loss and model differ from plain SGD's."""
    cfg = CNNConfig(channels=(4, 8), hidden=8)
    trainer = LocalTrainer(cfg, (1, 8, 8), 3)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((12, 64)).astype(np.float32), rng.integers(0, 3, 12)
    w0 = init_params(cfg, (1, 8, 8), 3, seed=1)
    spec = TrainSpec(epochs=1, batch_size=4, lr=0.05, clip_norm=10.0)
    loss = partial(fedalign_loss, spec=AlignSpec(mu=0.45, width=0.5))
    a1, s1 = trainer.train(w0, x, y, spec, seed=2, loss=loss)
    a2, _ = trainer.train(w0, x, y, spec, seed=2, loss=loss)
    plain, s0 = trainer.train(w0, x, y, TrainSpec(epochs=1, batch_size=4, lr=0.05, clip_norm=10.0), seed=2)
    assert np.array_equal(a1, a2) and np.isfinite(a1).all()
    assert not np.array_equal(a1, plain) and s1["loss"] != s0["loss"]
    f_in, f_out, _ = trainer.module.taps(torch.from_numpy(x[:2]))
    assert transfer_matrix(f_in, f_out).shape == (2, 4, 8)


def test_work_factor_by_hand():
    """1 + ω²·F(block)/F(model): mlp 5 → 4 → 4 → 3 has F = 96, block 32: 1 + 0.0625/3."""
    assert align_work_factor(0.25, 32, 96) == pytest.approx(1 + 0.0625 / 3, rel=1e-15)
    assert build(tiny(model=MLP44, training={"trainer": ALIGN})).spec.work_factor == align_work_factor(0.25, 32, 96)
    assert build(tiny(model=MLP44)).spec.work_factor == 1.0
    with pytest.raises(ValueError, match="block FLOPs"):
        align_work_factor(0.5, 10, 5)


def test_the_slim_pass_shows_in_virtual_time(tmp_path):
    """Constant profiles (100 samples/s, down 1 Mbps, up 0.5 Mbps, 20 ms), mlp 5 → 4 → 4 → 3 (59 parameters,
    236 bytes): a device's job is 2 epochs × 60 samples = 120 samples, 1.2 s plain and
    1.2·(1 + 0.0625/3) = 1.225 s with FedAlign; the first round ends at 0.021888 + 1.225 + 0.023776."""
    plain = run_scenario(tiny(model=MLP44, stop={"rounds": 1}), tmp_path / "a")
    align = run_scenario(tiny(model=MLP44, stop={"rounds": 1}, training={"trainer": ALIGN}), tmp_path / "b")

    def first_round(out):
        return next(r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                    if r["event"] == "cloud_aggregate")["t"]

    assert first_round(tmp_path / "a") == pytest.approx(0.021888 + 1.2 + 0.023776, abs=1e-12)
    assert first_round(tmp_path / "b") == pytest.approx(0.021888 + 1.225 + 0.023776, abs=1e-12)
    assert align.summary["totals"]["compute_s"] == pytest.approx(4 * 1.225, rel=1e-12)
    assert plain.summary["model_bytes"] == align.summary["model_bytes"] == 236


def test_mu_zero_without_clipping_is_plain_sgd(tmp_path):
    """μ = 0 and no clipping: the loss is the cross-entropy, so the model is plain SGD's (through autograd
    instead of the hand-written chain: the same bits)."""
    zero = {"name": "fedalign", "mu": 0.0, "clip_norm": None}
    plain = run_scenario(tiny(model=MLP44, stop={"rounds": 2}), tmp_path / "a")
    align = run_scenario(tiny(model=MLP44, stop={"rounds": 2}, training={"trainer": zero}), tmp_path / "b")
    np.testing.assert_array_equal(plain.final_params, align.final_params)


def test_the_lipschitz_term_moves_the_model(tmp_path):
    """At width 0.75 (3 of the block's 4 units) the term's gradient reaches the block: another model."""
    wide = {"name": "fedalign", "width": 0.75}
    plain = run_scenario(tiny(model=MLP44, stop={"rounds": 2}), tmp_path / "a")
    align = run_scenario(tiny(model=MLP44, stop={"rounds": 2}, training={"trainer": wide}), tmp_path / "b")
    assert not np.array_equal(plain.final_params, align.final_params)
    assert np.isfinite(align.final_params).all()


def test_the_fast_path_never_groups_fedalign_jobs(tmp_path):
    """The group trainers know plain cross-entropy only: with runtime.fast_path, FedAlign's jobs (even
    without clipping) still train one at a time, to the same bits."""
    trainer = {"name": "fedalign", "width": 0.75, "clip_norm": None}
    base = {"model": MLP44, "stop": {"rounds": 2}, "training": {"trainer": trainer}}
    alone = run_scenario(tiny(**base), tmp_path / "a")
    fast = run_scenario(tiny(**base, runtime={"executor": "local", "fast_path": True}), tmp_path / "b")
    np.testing.assert_array_equal(alone.final_params, fast.final_params)


def test_runs_under_hierfavg(tmp_path):
    """A pure local-loss change: HierFAVG's edges and cloud average as usual."""
    hier = {"protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 1}, "topology": {"edge_servers": 2},
            "stop": {"rounds": 1}, "training": {"trainer": ALIGN, "epochs": None}, "model": MLP44}
    res = run_scenario(tiny(**hier), tmp_path / "a")
    assert res.summary["totals"]["edge_aggregations"] == 2 and np.isfinite(res.final_params).all()


@pytest.mark.parametrize(("override", "expected"), [
    ({"training": {"trainer": "fedalign"}}, ["model", "allowed: an mlp with at least one hidden layer"]),
    ({"training": {"trainer": "fedalign"}, "model": {"name": "mlp", "hidden": []}}, ["model", "allowed: an mlp"]),
    ({"training": {"trainer": {"name": "fedalign", "width": 0}}, "model": MLP44}, ["training.trainer", "width"]),
    ({"training": {"trainer": {"name": "fedalign", "power_iters": 0}}, "model": MLP44},
     ["training.trainer", "power_iters"]),
    ({"training": {"trainer": "fedalign"}, "model": MLP44, "runtime": {"executor": "local", "precision": "bf16"}},
     ["runtime.precision", "allowed: fp32"]),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, override, expected):
    raw = json.loads(json.dumps(TINY))
    raw.update({key: value for key, value in override.items() if key != "training"})
    raw["training"] = {**TINY["training"], **override.get("training", {})}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
