"""Model-zoo features: the final block's taps and slim pass (FedAlign), the dual-input wrapper with a
shared backbone (DisTrans), on tiny inputs with hand-set weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from hierfl.learn.local import final_block_flops, forward_flops
from hierfl.models import CNNConfig, DualInputConfig, LogRegConfig, MLPConfig
from hierfl.models.nets import DualInput, slim_size


def _mlp() -> nn.Module:
    """in 3 → 4 → 4 → 2; the final block's weight is arange(16)/10, its bias [0.1, −0.2, 0.3, −0.4]."""
    m = MLPConfig(hidden=[4, 4]).build((3,), 2, seed=1)
    with torch.no_grad():
        m.layers[2].weight.copy_(torch.arange(16.0).reshape(4, 4) / 10)
        m.layers[2].bias.copy_(torch.tensor([0.1, -0.2, 0.3, -0.4]))
    return m


def test_slim_size():
    assert [slim_size(4, 0.25), slim_size(5, 0.25), slim_size(3, 0.01), slim_size(8, 1.0)] == [1, 2, 1, 8]
    with pytest.raises(ValueError, match="width"):
        slim_size(4, 0.0)


def test_mlp_taps_split_the_forward_pass():
    """f_in = ReLU(first layer), f_out = ReLU(final block), logits = forward's exactly."""
    m = _mlp()
    x = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.2, -0.1]])
    f_in, f_out, logits = m.taps(x)
    assert f_in.shape == (2, 4) and f_out.shape == (2, 4)
    torch.testing.assert_close(f_in, torch.relu(m.layers[0](x)), rtol=0, atol=0)
    torch.testing.assert_close(f_out, torch.relu(m.layers[2](f_in)), rtol=0, atol=0)
    assert torch.equal(logits, m(x))
    assert m.final_block_layers() == [m.layers[2]]


def test_mlp_slim_pass_by_hand():
    """width 0.5 keeps 2 of 4 inputs and outputs: W[:2, :2] = [[0, .1], [.4, .5]];
    f_in[:2] = [1, 2] → [0.2, 1.4] + [0.1, −0.2] = [0.3, 1.2] (both positive, ReLU keeps them);
    f_in[:2] = [1, −4] → [−0.4, −1.6] + b → [−0.3, −1.8] → ReLU [0, 0]."""
    m = _mlp()
    f_in = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, -4.0, 9.0, 9.0]])
    out = m.slim_block(f_in, 0.5)
    torch.testing.assert_close(out, torch.tensor([[0.3, 1.2], [0.0, 0.0]]), rtol=1e-6, atol=1e-6)
    # at full width the slim pass is the block itself
    torch.testing.assert_close(m.slim_block(f_in, 1.0), torch.relu(m.layers[2](f_in)), rtol=0, atol=0)


def test_cnn_taps_and_slim_pass_share_the_weights():
    m = CNNConfig(channels=(4, 8), hidden=16).build((1, 8, 8), 3, seed=2)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(0))
    f_in, f_out, logits = m.taps(x)
    assert f_in.shape == (2, 4, 4, 4) and f_out.shape == (2, 8, 2, 2)
    assert torch.equal(logits, m(x))
    slim = m.slim_block(f_in, 0.25)  # ⌈0.25·4⌉ = 1 input map, ⌈0.25·8⌉ = 2 filters
    assert slim.shape == (2, 2, 2, 2)
    conv = m.features[3]
    want = nn.functional.max_pool2d(torch.relu(nn.functional.conv2d(f_in[:, :1], conv.weight[:2, :1], conv.bias[:2],
                                                                    padding=2)), 2)
    torch.testing.assert_close(slim, want, rtol=0, atol=0)
    torch.testing.assert_close(m.slim_block(f_in, 1.0), f_out, rtol=1e-6, atol=1e-6)


def test_which_models_have_a_slimmable_final_block():
    assert MLPConfig(hidden=[4]).slimmable_final_block and CNNConfig().slimmable_final_block
    assert not MLPConfig(hidden=[]).slimmable_final_block and not LogRegConfig().slimmable_final_block
    assert not DualInputConfig().slimmable_final_block
    with pytest.raises(ValueError, match="no final block"):
        MLPConfig(hidden=[]).build((3,), 2).taps(torch.zeros(1, 3))


def test_final_block_flops_by_hand():
    """mlp 5 → 4 → 4 → 3: F = 2(20 + 16 + 12) = 96, the final block 2·16 = 32."""
    cfg = MLPConfig(hidden=[4, 4])
    assert forward_flops(cfg, (5,), 3) == 96
    assert final_block_flops(cfg, (5,), 3) == 32


def test_dual_input_by_hand():
    """φ = Linear(2 → 1), w = [1, −1], b = 0; head = identity; a = 0.5; x = [2, 1], t = [0, 2]:
    x_L = 0.5x + 0.5t = [1, 1.5], x_R = 1.5x − 0.5t = [3, 0.5]; φ(x_L) = −0.5 → ReLU 0, φ(x_R) = 2.5;
    logits [0, 2.5]. With no offset the views are 0.5x and 1.5x: φ = 0.5, 1.5."""
    m = DualInput(nn.Linear(2, 1), 1, 2, a=0.5)
    with torch.no_grad():
        m.backbone.weight.copy_(torch.tensor([[1.0, -1.0]]))
        m.backbone.bias.zero_()
        m.head.weight.copy_(torch.eye(2))
        m.head.bias.zero_()
    x = torch.tensor([[2.0, 1.0]])
    assert torch.equal(m(x), torch.tensor([[0.5, 1.5]]))
    m.offset = torch.tensor([0.0, 2.0])
    x_l, x_r = m.views(x)
    assert torch.equal(x_l, torch.tensor([[1.0, 1.5]])) and torch.equal(x_r, torch.tensor([[3.0, 0.5]]))
    assert torch.equal(m(x), torch.tensor([[0.0, 2.5]]))


def test_dual_input_shares_one_backbone():
    """One set of backbone parameters (not two); its gradient sums both views' contributions; the dual
    model's FLOPs count the backbone twice: mlp 5 → 6 → 4 is 2(30 + 24) = 108, the head 8 → 3 is 48, so
    2·108 + 48 = 264."""
    cfg = DualInputConfig(features=4, a=0.3, backbone=MLPConfig(hidden=[6]))
    m = cfg.build((5,), 3, seed=4)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["backbone.layers.0.weight", "backbone.layers.0.bias", "backbone.layers.2.weight",
                     "backbone.layers.2.bias", "head.weight", "head.bias"]
    assert m.a == 0.3 and m.offset is None
    assert forward_flops(cfg, (5,), 3) == 264
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    t = torch.randn(5, generator=torch.Generator().manual_seed(2))
    m.offset = t
    m(x).sum().backward()
    grad = m.backbone.layers[0].weight.grad.clone()
    # the same gradient from two separate copies of the backbone, one per view, added
    left, right = (cfg.backbone.build((5,), 4, seed=0) for _ in range(2))
    for copy in (left, right):
        copy.load_state_dict(m.backbone.state_dict())
    x_l, x_r = m.views(x)
    feats = torch.cat([torch.relu(left(x_l)), torch.relu(right(x_r))], dim=1)
    nn.functional.linear(feats, m.head.weight.detach(), m.head.bias.detach()).sum().backward()
    np.testing.assert_allclose(grad.numpy(), (left.layers[0].weight.grad + right.layers[0].weight.grad).numpy(),
                               rtol=1e-5, atol=1e-6)
