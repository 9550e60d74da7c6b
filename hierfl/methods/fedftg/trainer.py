"""FedFTG's server-side fine-tuning: a conditional generator trained against the clients' models, then
data-free distillation of the averaged model from their ensemble on generated samples.

L. Zhang, L. Shen, L. Ding, D. Tao, L.-Y. Duan, "Fine-tuning Global Model via Data-Free Knowledge
Distillation for Non-IID Federated Learning", CVPR 2022 (arXiv 2203.09249). The defaults follow the
authors' code (``methods/local_fn_gan.py::train_global_model_cgan_bs_weight_iloop_fz_dis``,
``methods/train_gan_fn.py``, ``models/gan_models.py::CGeneratorA``); the paper's KL discrepancy and a
per-sample class weighting are knobs.

One job, ``I`` iterations. Each draws noise ``z ~ N(0, I)`` and ``B`` labels ``y`` (from the
customised label sampling, :func:`hierfl.methods.fedftg.math.allot_labels`), then

* **generator**, ``I_g`` times, one Adam step per teacher ``k``:
  ``L_G,k = L_md + λ_cls·L_cls + λ_div·L_div / K`` with the hardness term
  ``L_md = −mean_b a_k^{y_b}·mean_c |s(x̃_b) − t_k(x̃_b)|`` (the generator *seeks* samples on which the
  student and the teacher disagree), the fidelity term ``L_cls = mean_b(a_k^{y_b})·CE(t_k(x̃), y)``
  (samples the teacher classifies as their label) and the diversity term
  ``L_div = exp(−mean_{a,b} d_z(a,b)·d_x(a,b))``;
* **student**, ``I_d`` SGD steps on ``x̃ = sg(G(z, y))`` toward the class-weighted ensemble
  ``q_b = Σ_k a_k^{y_b} softmax(t_k(x̃_b))``: ``L_S = mean_{b,c} −q_{b,c} log softmax(s(x̃_b))_c``.

The generator's weights (and, with ``persist_gen_optimizer``, its Adam moments) persist across jobs
in the server's state; the code makes a fresh Adam every round.

The job computes on the server's device (``device``: the run's ``runtime.device`` where the cloud holds
one). The generator's initial weights, the labels and the noise are drawn on the CPU from the job's
stream and then moved, the losses are summed there in float64 and read once at the end, and the
models cross as stacks: the student and its teachers up in one copy, the result down in one, the
generator's kept state up and down once each (counted in ``transfers``). On the CPU the arithmetic
is the same operations in the same order as before, so the bits do not depend on the device code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from hierfl.methods.fedftg.math import allot_labels, batch_weights, class_client_weights

if TYPE_CHECKING:
    import torch
    from torch import nn

    from hierfl.learn.staging import Transfers
    from hierfl.models import ModelConfig

__all__ = ["FTGSettings", "build_generator", "class_loss", "diversity_loss", "finetune", "generator_flops",
           "hardness_loss", "student_loss"]

_SEED_BOUND = 2 ** 62


@dataclass(frozen=True)
class FTGSettings:
    """One fine-tuning job's hyper-parameters (the protocol's config, with this round's learning rates)."""

    iters: int = 10
    gen_steps: int = 1
    student_steps: int = 5
    batch_size: int = 50
    noise_dim: int = 100
    gen_width: int = 64
    lr_student: float = 0.1
    lr_gen: float = 0.01
    weight_decay: float = 0.0
    lambda_cls: float = 1.0
    lambda_div: float = 1.0
    md_loss: Literal["code", "kl"] = "code"
    cls_weighting: Literal["code", "per_sample"] = "code"
    persist_gen_optimizer: bool = False


# -- the generator ---------------------------------------------------------------------------------------
def _generator_class() -> type:
    import torch
    from torch import nn

    class CondGenerator(nn.Module):
        """The code's ``CGeneratorA`` for image inputs ``(C, H, W)`` with ``H``, ``W`` divisible by 4:
        two linear maps (noise, one-hot label) → concat → BN → (×2 upsample, conv, BN, LeakyReLU) →
        (×2 upsample, conv, BN, LeakyReLU, conv) → tanh → affine-free BN. Other input shapes get the
        same pipeline with linear layers in place of the convolutions (a design default)."""

        def __init__(self, noise_dim: int, num_classes: int, input_shape: tuple[int, ...], width: int) -> None:
            super().__init__()
            self.input_shape = tuple(input_shape)
            self.conv = len(input_shape) == 3 and input_shape[1] % 4 == 0 and input_shape[2] % 4 == 0
            if self.conv:
                c, h, w = input_shape
                self.init_hw = (h // 4, w // 4)
                cells = self.init_hw[0] * self.init_hw[1]
                self.l1 = nn.Linear(noise_dim, width * cells)
                self.l2 = nn.Linear(num_classes, width * cells)
                self.blocks0 = nn.Sequential(nn.BatchNorm2d(width * 2))
                self.blocks1 = nn.Sequential(nn.Conv2d(width * 2, width * 2, 3, stride=1, padding=1),
                                             nn.BatchNorm2d(width * 2), nn.LeakyReLU(0.2))
                self.blocks2 = nn.Sequential(nn.Conv2d(width * 2, width, 3, stride=1, padding=1),
                                             nn.BatchNorm2d(width), nn.LeakyReLU(0.2),
                                             nn.Conv2d(width, c, 3, stride=1, padding=1), nn.Tanh(),
                                             nn.BatchNorm2d(c, affine=False))
            else:
                d = math.prod(input_shape)
                self.l1 = nn.Linear(noise_dim, width)
                self.l2 = nn.Linear(num_classes, width)
                self.blocks0 = nn.Sequential(nn.BatchNorm1d(width * 2))
                self.blocks1 = nn.Sequential(nn.Linear(width * 2, width * 2), nn.BatchNorm1d(width * 2),
                                             nn.LeakyReLU(0.2))
                self.blocks2 = nn.Sequential(nn.Linear(width * 2, width), nn.BatchNorm1d(width), nn.LeakyReLU(0.2),
                                             nn.Linear(width, d), nn.Tanh(), nn.BatchNorm1d(d, affine=False))

        def forward(self, z: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
            out = torch.cat([self.l1(z), self.l2(onehot)], dim=1)
            if self.conv:
                out = out.view(out.shape[0], -1, *self.init_hw)
                out = nn.functional.interpolate(self.blocks0(out), scale_factor=2)
                out = nn.functional.interpolate(self.blocks1(out), scale_factor=2)
                out = self.blocks2(out)
            else:
                out = self.blocks2(self.blocks1(self.blocks0(out)))
            return out.reshape(out.shape[0], -1)  # the run's models take flat samples

    return CondGenerator


def build_generator(noise_dim: int, num_classes: int, input_shape: tuple[int, ...], width: int,
                    seed: int) -> nn.Module:
    """The conditional generator for samples of ``input_shape``, initialised from ``seed`` only.

    Built on the ``meta`` device (no global RNG is read); linear and conv layers are initialised like
    PyTorch's defaults from a generator seeded with ``seed``, batch norms to ``(1, 0)``.
    """
    import torch
    from torch import nn

    from hierfl.models import materialise
    from hierfl.models.nets import reset_parameters_

    with torch.device("meta"):
        module = _generator_class()(int(noise_dim), int(num_classes), tuple(int(s) for s in input_shape), int(width))
    materialise(module)
    gen = torch.Generator().manual_seed(int(seed))
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            reset_parameters_(layer, gen)
        elif isinstance(layer, nn.modules.batchnorm._BatchNorm):
            layer.reset_parameters()
    return module


def generator_flops(module: nn.Module, noise_dim: int, num_classes: int) -> int:
    """Forward FLOPs of one generated sample: ``2 ×`` the multiply-adds of its linear and conv layers
    (batch norms, activations and upsampling are not counted, as for the run's models)."""
    import torch
    from torch import nn

    macs = 0

    def hook(layer: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        nonlocal macs
        if isinstance(layer, nn.Linear):
            macs += layer.in_features * layer.out_features
        elif isinstance(layer, nn.Conv2d):
            kh, kw = layer.kernel_size
            macs += output[0].numel() * (layer.in_channels // layer.groups) * kh * kw

    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            module(torch.zeros(1, noise_dim), torch.zeros(1, num_classes))
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
    return 2 * macs


# -- the losses ------------------------------------------------------------------------------------------
def hardness_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, weights: torch.Tensor,
                  kind: Literal["code", "kl"]) -> torch.Tensor:
    """The generator's model-discrepancy term, negated (maximised): ``code``
    ``−mean_b w_b·mean_c |z_s − z_t|``; ``kl`` (the paper) ``−mean_b w_b·KL(p_t ‖ p_s)``. The teacher
    is detached here (the code's ``t_logit.detach()``): the gradient reaches the generator through the
    student only."""
    from hierfl.learn.distill import kd_loss

    t = teacher_logits.detach()
    if kind == "code":
        return -kd_loss(student_logits, t, kind="mae_logits", weights=weights)
    return -kd_loss(student_logits, t, kind="kl", T=1.0, weights=weights)


def class_loss(teacher_logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor,
               kind: Literal["code", "per_sample"]) -> torch.Tensor:
    """The fidelity term: ``code`` ``mean_b(w_b)·mean_b CE_b`` (the code weights an already averaged
    cross-entropy); ``per_sample`` ``mean_b w_b·CE_b``."""
    import torch.nn.functional as F

    if kind == "code":
        return F.cross_entropy(teacher_logits, labels) * weights.mean()
    return (F.cross_entropy(teacher_logits, labels, reduction="none") * weights).mean()


def diversity_loss(noise: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
    """``exp(−mean_{a,b} d_z(a,b)·d_x(a,b))`` with ``d_z`` the mean squared and ``d_x`` the mean
    absolute difference of two rows (all ``B²`` ordered pairs, the diagonal included)."""
    import torch

    z = noise.reshape(noise.shape[0], -1)
    x = samples.reshape(samples.shape[0], -1)
    d_x = (x.unsqueeze(0) - x.unsqueeze(1)).abs().mean(dim=2)
    d_z = (z.unsqueeze(0) - z.unsqueeze(1)).pow(2).mean(dim=2)
    return torch.exp(torch.mean(-d_z * d_x))


def student_loss(student_logits: torch.Tensor, target: torch.Tensor, kind: Literal["code", "kl"]) -> torch.Tensor:
    """The student's distillation loss toward the ensemble distribution ``target`` (B, C): ``code``
    ``mean_{b,c} −q_{b,c} log softmax(z_s)_{b,c}`` (the soft cross-entropy divided by ``C``, as the code
    averages over classes too); ``kl`` (the paper) ``mean_b KL(q_b ‖ softmax(z_s)_b)``."""
    from hierfl.learn.distill import kd_loss

    if kind == "code":
        return kd_loss(student_logits, target, kind="soft_ce", T=1.0, teacher_is_prob=True) / student_logits.shape[1]
    return kd_loss(student_logits, target, kind="kl", T=1.0, teacher_is_prob=True)


# -- the generator's persistent state -------------------------------------------------------------------
def _flat(tensors: list[torch.Tensor]) -> np.ndarray:
    """One host float32 vector of ``tensors`` (concatenated where they live: one copy down off the CPU)."""
    import torch

    from hierfl.learn.local import download

    if not tensors:
        return np.zeros(0, dtype=np.float32)
    return download(torch.cat([t.detach().reshape(-1).float() for t in tensors]))


def _unflat(flat: np.ndarray, tensors: list[torch.Tensor]) -> None:
    """Copy a host vector into ``tensors`` (uploaded in one copy, then split where they live)."""
    import torch

    flat = np.asarray(flat, dtype=np.float32)
    need = sum(t.numel() for t in tensors)
    if flat.shape != (need,):
        raise ValueError(f"stored generator state has {flat.size} values, the generator needs {need}")
    if not tensors:
        return
    up = torch.from_numpy(flat.copy()).to(tensors[0].device)
    at = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(up[at : at + n].reshape(t.shape).to(t.dtype))
            at += n


def _float_buffers(module: nn.Module) -> list[torch.Tensor]:
    # BN running means and variances; the integer batch counters are unused with BN's momentum 0.1
    return [b for b in module.buffers() if b.is_floating_point()]


def _student_masks(stud: nn.Module, input_shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    """The student's dropout masks while it trains (it is the only network run in training mode with dropout
    live): drawn from a generator seeded by one draw of the task's stream, never from torch's global one, so a
    fine-tuning is repeatable. A student without dropout draws nothing (the stream, and every bit, as before)."""
    from contextlib import nullcontext

    import torch

    from hierfl.learn.randomness import DrawMasks, dropout_sites

    if not dropout_sites(stud, tuple(input_shape)):
        return nullcontext()
    return DrawMasks(torch.Generator().manual_seed(int(rng.integers(_SEED_BOUND))))


# -- the job ---------------------------------------------------------------------------------------------
def finetune(model_cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, student: np.ndarray,
             teachers: list[np.ndarray], counts: np.ndarray, settings: FTGSettings, state: dict[str, np.ndarray],
             rng: np.random.Generator, device: str = "cpu",
             transfers: Transfers | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """Fine-tune ``student`` (a flat vector of ``model_cfg``) against the ``teachers``; returns the new
    flat vector and the mean losses. ``counts``: the teachers' ``(K, C)`` label histograms. ``state`` is
    the server's store: the generator's weights and BN statistics are read from it (built from ``rng``
    on the first job) and written back. Draws from ``rng``, in order: the generator's seed (first job
    only), the label permutation, then ``I`` noise batches ``(B, noise_dim)``. ``device``: where the
    generator, the networks and every batch live (draws stay on the CPU); ``transfers``, if given, counts
    the model-sized crossings (:class:`hierfl.learn.staging.Transfers`)."""
    import torch

    from hierfl.learn.local import download

    def crossing(way: str, models: int) -> None:
        if transfers is not None:
            transfers.count(way, models)

    s = settings
    k = len(teachers)
    if k < 1:
        raise ValueError("fine-tuning needs at least one teacher")
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != (k, num_classes):
        raise ValueError(f"label histograms must be ({k}, {num_classes}), got {counts.shape}")
    # the generator is built and initialised on the CPU (its seed's draws), then moved with its kept state
    gen = build_generator(s.noise_dim, num_classes, input_shape, s.gen_width,
                          int(rng.integers(_SEED_BOUND)) if "gen_params" not in state else 0).to(device)
    g_params = list(gen.parameters())
    if "gen_params" in state:
        _unflat(state["gen_params"], g_params)
        _unflat(state["gen_buffers"], _float_buffers(gen))
        crossing("h2d", 1)
    opt_g = torch.optim.Adam(g_params, lr=s.lr_gen, foreach=False)
    if s.persist_gen_optimizer and "gen_adam_step" in state:
        m, v = [torch.zeros_like(p) for p in g_params], [torch.zeros_like(p) for p in g_params]
        _unflat(state["gen_adam_m"], m)
        _unflat(state["gen_adam_v"], v)
        crossing("h2d", 2)
        step = float(state["gen_adam_step"][0])
        for p, mp, vp in zip(g_params, m, v):  # Adam's step count stays a CPU scalar, as torch keeps it
            opt_g.state[p] = {"step": torch.tensor(step), "exp_avg": mp, "exp_avg_sq": vp}

    # the student and the teachers go up in one copy; every network's parameters are views of its own row
    rows = torch.from_numpy(np.stack([np.asarray(v, dtype=np.float32) for v in (student, *teachers)])).to(device)
    crossing("h2d", rows.shape[0])

    def net(row: torch.Tensor) -> nn.Module:
        module = model_cfg.build(input_shape, num_classes).to(device)
        torch.nn.utils.vector_to_parameters(row, module.parameters())
        return module

    stud = net(rows[0])
    t_nets = [net(rows[1 + j]) for j in range(k)]
    for t in t_nets:
        t.eval()
        t.requires_grad_(False)
    opt_s = torch.optim.SGD(stud.parameters(), lr=s.lr_student, weight_decay=s.weight_decay, foreach=False)

    weights = class_client_weights(counts)  # (C, K)
    labels_all = allot_labels(s.iters * s.batch_size, counts.sum(axis=0), rng)
    masks = _student_masks(stud, input_shape, rng)
    # the mean losses' float64 sums, kept where the losses are (a GPU is read once, at the end): the same
    # additions in the same order as Python floats summing each loss's .item()
    names = ("loss_md", "loss_cls", "loss_div", "loss_student")
    sums = torch.zeros(len(names), dtype=torch.float64, device=device)
    n_gen = n_stud = 0
    for it in range(s.iters):
        labels = labels_all[it * s.batch_size : (it + 1) * s.batch_size]
        # drawn on the CPU from the job's stream, then moved (small: not counted as model crossings)
        w = torch.from_numpy(batch_weights(labels, weights).astype(np.float32)).to(device)  # (B, K)
        y = torch.from_numpy(labels).to(device)
        onehot = torch.nn.functional.one_hot(y, num_classes).float()
        z = torch.from_numpy(rng.standard_normal((labels.size, s.noise_dim)).astype(np.float32)).to(device)
        # generator: the student is frozen (and in evaluation mode) while the generator learns
        stud.eval()
        stud.requires_grad_(False)
        gen.train()
        for _ in range(s.gen_steps):
            for j, teacher in enumerate(t_nets):
                opt_g.zero_grad()
                fake = gen(z, onehot)
                t_logit, s_logit = teacher(fake), stud(fake)
                md = hardness_loss(s_logit, t_logit, w[:, j], s.md_loss)
                cls = class_loss(t_logit, y, w[:, j], s.cls_weighting)
                div = diversity_loss(z, fake)
                (md + s.lambda_cls * cls + s.lambda_div * div / k).backward()
                opt_g.step()
                sums[:3] += torch.stack([md.detach(), cls.detach(), div.detach()]).to(torch.float64)
                n_gen += 1
        # student: distils from the class-weighted ensemble on the (now fixed) generated batch
        stud.train()
        stud.requires_grad_(True)
        gen.eval()
        for _ in range(s.student_steps):
            opt_s.zero_grad()
            with torch.no_grad():
                fake = gen(z, onehot)
                target = _ensemble(t_nets, fake, w)
            with masks:
                loss = student_loss(stud(fake), target, s.md_loss)
            loss.backward()
            opt_s.step()
            sums[3] += loss.detach().to(torch.float64)
            n_stud += 1
    state["gen_params"] = _flat(g_params)
    state["gen_buffers"] = _flat(_float_buffers(gen))
    crossing("d2h", 1)
    if s.persist_gen_optimizer:
        st = [opt_g.state.get(p, {}) for p in g_params]
        if all(st):
            state["gen_adam_m"] = _flat([x["exp_avg"] for x in st])
            state["gen_adam_v"] = _flat([x["exp_avg_sq"] for x in st])
            crossing("d2h", 2)
            state["gen_adam_step"] = np.array([float(st[0]["step"])], dtype=np.float64)
    totals = download(sums).tolist()
    stats = {key: v / max(n_stud if key == "loss_student" else n_gen, 1) for key, v in zip(names, totals)}
    out = download(torch.nn.utils.parameters_to_vector(stud.parameters())).astype(np.float32, copy=False)
    crossing("d2h", 1)
    return out, stats


def _ensemble(t_nets: list[nn.Module], x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``q_b = Σ_k w_{b,k} softmax(t_k(x_b))``, summed over the teachers in order."""
    from hierfl.learn.distill import ensemble_target

    return ensemble_target([t(x) for t in t_nets], w, T=1.0)
