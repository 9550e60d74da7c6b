"""The personalised trainers' torch work on a device host: jobs, and the model a device is tested with.

The kinds (settings: :class:`~hierfl.methods.personal.math.PersonalJob`; configs: :mod:`.config`):

* **A local head** (FedPer, arXiv 1912.00818; docs/explanation/algorithms.md §5.10): the base is global,
  the head stays local.
* **A local base** (LG-FedAvg, arXiv 2001.01523; §5.10): the lower layers stay local, the top layers are global.
* **A meta-learned initialisation** (FedMeta, arXiv 1802.07876) with MAML (Finn, Abbeel, Levine, ICML
  2017; second order, or first order as a knob) and Meta-SGD (Li, Zhou, Chen, Li, arXiv 1707.09835: a
  learned per-parameter inner rate α that the cloud averages with θ). Each device splits its samples
  into a support and a query set; a job adapts on support batches and steps θ (and α) on the query
  loss after adaptation.
* **Fine-tuning at test time** (that paper's baseline, FedAvgMeta): plain training, then fine-tuning on
  the support set at test time.
* **Meta-learning with a local head**: meta-learning of the base with the head kept local.

What never leaves a device: the parameters of its local layers. A job starts from the global model
with the device's own local layers put in, and returns the trained vector with its local layers
*zeroed* (so the cloud's model has zeros there under plain averaging) plus the new local layers, which
the runner (:mod:`.job`) keeps as the device's state in its home host. A device with no state yet
starts from the local layers of the model devices start from (the initial model, or the warm-up's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.device_eval import support_split
from hierfl.core.work import TrainSpec, effective_batch, num_steps
from hierfl.learn.local import download
from hierfl.learn.precision import autocast
from hierfl.methods.personal.math import PersonalJob, local_mask, resolve_layers

if TYPE_CHECKING:
    import torch

    from hierfl.learn.local import LocalTrainer

__all__ = ["Personaliser", "meta_grads"]


def meta_grads(params: Sequence[torch.Tensor], alphas: Sequence[Any], support_loss: Callable[[list[Any]], Any],
               query_loss: Callable[[list[Any]], Any], inner_steps: int = 1, first_order: bool = False,
               learn_alpha: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Meta-gradients of one MAML / Meta-SGD step.

    ``θ' = θ − α ⊙ ∇L_s(θ)`` (``inner_steps`` times), then the gradient of ``L_q(θ')`` with respect
    to θ — through the inner step (second order) or treating ``∇L_s`` as a constant (first order)
    — and, with ``learn_alpha``, with respect to α.

    Parameters
    ----------
    params
        Leaf tensors θ with ``requires_grad``.
    alphas
        Per-tensor inner rates: floats (MAML) or leaf tensors with ``requires_grad`` (Meta-SGD).
    support_loss, query_loss
        Functions of a parameter list returning a scalar loss.
    """
    import torch

    adapted: list[Any] = list(params)
    for _ in range(inner_steps):
        grads = torch.autograd.grad(support_loss(adapted), adapted, create_graph=not first_order)
        adapted = [p - a * g for p, a, g in zip(adapted, alphas, grads)]
    wrt = list(params) + (list(alphas) if learn_alpha else [])
    out = torch.autograd.grad(query_loss(adapted), wrt)
    k = len(params)
    return list(out[:k]), list(out[k:])


class Personaliser:
    """One host's runner of a :class:`PersonalJob`: the local-layer mask, jobs and adapted evaluation.

    ``width`` is the length of the global vector (``num_params``, or ``2 · num_params`` for
    Meta-SGD's ``[θ; α]``); ``state_len`` the length of a device's state (its local layers).
    """

    def __init__(self, trainer: LocalTrainer, spec: PersonalJob) -> None:
        self.trainer = trainer
        self.spec = spec
        self.num_params = trainer.num_params
        layers = resolve_layers(trainer.layout, spec.local, spec.from_end)
        self.mask = local_mask(trainer.layout, layers)
        self.state_len = int(self.mask.sum())
        self.width = self.num_params * spec.global_factor

    # -- state ------------------------------------------------------------------------------
    def start_theta(self, params: np.ndarray, state: np.ndarray | None) -> np.ndarray:
        """θ of a job or an evaluation: the global θ with the device's local layers put in.

        ``state`` is the device's state (``state_len``) or, for a device without one, the initial
        global vector (its local layers are taken).
        """
        theta = np.array(params[: self.num_params], dtype=np.float32)
        if self.state_len:
            if state is None:
                raise ValueError("a personalised job needs the device's state or the initial model")
            state = np.asarray(state)
            theta[self.mask] = state if state.shape == (self.state_len,) else state[: self.num_params][self.mask]
        return theta

    # -- a job ------------------------------------------------------------------------------
    def train(self, device: int, params: np.ndarray, x: np.ndarray, y: np.ndarray, rows: np.ndarray,
              spec: TrainSpec, seed: int, state: np.ndarray | None) -> tuple[np.ndarray, dict[str, float], np.ndarray]:
        """One personalised job: ``(global update, stats, new device state)``."""
        params = np.asarray(params)
        if params.shape != (self.width,):
            raise ValueError(f"expected a global vector of {self.width}, got {params.shape}")
        theta = self.start_theta(params, state)
        alpha = np.array(params[self.num_params:], dtype=np.float32) if self.spec.kind == "meta_sgd" else None
        if self.spec.meta:
            s_pos, q_pos = support_split(rows.size, self.spec.support_fraction, self.spec.split_seed, device)
            new_theta, new_alpha, stats = self._meta_train(theta, alpha, x, y, rows[s_pos], rows[q_pos], spec, seed)
        else:
            new_theta, stats = self.trainer.train(theta, x, y, spec, seed, rows=rows)
            new_alpha = None
        new_state = new_theta[self.mask].copy()
        new_theta[self.mask] = 0.0  # the local layers never leave the device
        update = new_theta if new_alpha is None else np.concatenate([new_theta, new_alpha])
        return update.astype(np.float32, copy=False), stats, new_state

    def train_group(self, devices: list[int], params: list[np.ndarray], x: np.ndarray, y: np.ndarray,
                    rows: list[np.ndarray], spec: TrainSpec, seeds: list[int], states: list[np.ndarray | None],
                    batched: Any) -> list[tuple[np.ndarray, dict[str, float], np.ndarray]]:
        """Several split-layer jobs (a local head or base, fine-tuning's training) trained together by
        ``batched`` (a :class:`~hierfl.learn.vmapped.VmapTrainer`): each job is :meth:`train`'s —
        start from the global θ with the device's local layers put in, train every layer, send the
        global part (local layers zeroed), keep the local part — within float tolerance.
        Meta-learning jobs (support/query steps) are trained one at a time (:meth:`train`)."""
        if self.spec.meta:
            raise ValueError("meta-learning jobs (support/query steps) are trained one at a time")
        for p in params:
            if np.shape(p) != (self.width,):
                raise ValueError(f"expected a global vector of {self.width}, got {np.shape(p)}")
        thetas = [self.start_theta(np.asarray(p), s) for p, s in zip(params, states)]
        out = np.empty((len(thetas), self.num_params), dtype=np.float32)
        stats = batched.train_group(thetas, x, y, rows, spec, seeds, out)
        results = []
        for k in range(len(thetas)):
            new_theta = out[k].copy()
            new_state = new_theta[self.mask].copy()
            new_theta[self.mask] = 0.0  # the local layers never leave the device
            results.append((new_theta, stats[k], new_state))
        return results

    def _tensors(self, flat: np.ndarray, grad: bool) -> list[torch.Tensor]:
        import torch

        out, start = [], 0
        for _, shape in self.trainer.layout:
            size = int(np.prod(shape, dtype=np.int64))
            # (on the trainer's device, runtime.device, where functional_call finds the module's buffers)
            t = torch.tensor(flat[start:start + size], dtype=torch.float32, device=self.trainer.device).reshape(shape)
            out.append(t.requires_grad_(grad))
            start += size
        return out

    def _loss_fn(self, x: np.ndarray, y: np.ndarray) -> Callable[[list[Any]], Any]:
        import torch
        import torch.nn.functional as F
        from torch.func import functional_call

        module, names = self.trainer.module, [n for n, _ in self.trainer.layout]
        dev = self.trainer.device  # runtime.device: the batch goes up once per loss function
        xb = torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(y), -1))).to(dev)
        yb = torch.from_numpy(np.asarray(y, dtype=np.int64)).to(dev)

        if self.trainer.precision == "fp32":
            def loss(plist: list[Any]) -> Any:
                return F.cross_entropy(functional_call(module, dict(zip(names, plist)), (xb,)), yb)
        else:  # runtime.precision bf16: the forward under autocast, the loss from float32 logits
            def loss(plist: list[Any]) -> Any:
                with autocast("bf16", dev):
                    logits = functional_call(module, dict(zip(names, plist)), (xb,))
                return F.cross_entropy(logits.float(), yb)

        return loss

    def _meta_train(self, theta: np.ndarray, alpha: np.ndarray | None, x: np.ndarray, y: np.ndarray,
                    support: np.ndarray, query: np.ndarray, spec: TrainSpec, seed: int
                    ) -> tuple[np.ndarray, np.ndarray | None, dict[str, float]]:
        """Outer SGD (rate ``spec.lr``) on query batches; each step adapts on a support batch first.

        Steps: ``num_steps(|Q|, spec)`` query batches of ``effective_batch(|Q|, spec)`` in the order
        of :func:`~hierfl.learn.local.index_blocks` (seeded by ``seed``); each is paired with a
        support batch of ``effective_batch(|S|, spec)`` drawn without replacement from a second
        stream of the same seed. Momentum and weight decay are not used by the outer step.
        """
        import torch

        from hierfl.learn.local import index_blocks

        torch.set_num_threads(self.trainer.torch_threads)
        self.trainer.module.train()
        ps = self._tensors(theta, True)
        learn_alpha = alpha is not None
        alphas: list[Any] = self._tensors(alpha, True) if alpha is not None else [self.spec.inner_lr] * len(ps)
        bq, bs = effective_batch(query.size, spec), effective_batch(support.size, spec)
        rng, rng_s = np.random.default_rng(seed), np.random.default_rng((seed, 1))
        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        loss_sum, steps, samples = 0.0, 0, 0
        for block in index_blocks(query.size, bq, spec, rng):
            for start in range(0, block.size, bq):
                qb = query[block[start:start + bq]]
                sb = support[np.sort(rng_s.choice(support.size, size=bs, replace=False))]
                lq = self._loss_fn(x2d[qb], y[qb])
                gθ, gα = meta_grads(ps, alphas, self._loss_fn(x2d[sb], y[sb]), lq, self.spec.inner_steps,
                                    self.spec.first_order, learn_alpha)
                with torch.no_grad():
                    for p, g in zip(ps, gθ):
                        p -= spec.lr * g
                    for a, g in zip(alphas if learn_alpha else [], gα):
                        a -= spec.lr * g
                    loss_sum += float(lq(ps))
                steps += 1
                samples += qb.size + sb.size
        assert steps == num_steps(query.size, spec)
        new_theta = download(torch.cat([p.detach().reshape(-1) for p in ps])).astype(np.float32)
        new_alpha = (download(torch.cat([a.detach().reshape(-1) for a in alphas])).astype(np.float32)
                     if learn_alpha else None)
        return new_theta, new_alpha, {"loss": loss_sum / max(steps, 1), "steps": steps, "samples": samples}

    # -- evaluation -------------------------------------------------------------------------
    def adapted(self, params: np.ndarray, state: np.ndarray | None, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The model a device is tested with: its local layers put in (``state``, see :meth:`start_theta`),
        then (meta methods, FedAvgMeta) ``inner_steps`` full-batch steps on its support samples ``x``, ``y``
        — with α (MAML: ``inner_lr``; Meta-SGD: the learned α) or, for FedAvgMeta, plain SGD at ``inner_lr``."""
        import torch

        theta = self.start_theta(params, state)
        if not self.spec.adapts or len(y) == 0:
            return theta
        loss = self._loss_fn(np.asarray(x).reshape(len(y), -1), y)
        ps = self._tensors(theta, True)
        if self.spec.kind == "meta_sgd":
            alphas: list[Any] = self._tensors(np.asarray(params[self.num_params:], dtype=np.float32), False)
        else:
            alphas = [self.spec.inner_lr] * len(ps)
        for _ in range(self.spec.inner_steps):
            grads = torch.autograd.grad(loss(ps), ps)
            ps = [(p - a * g).detach().requires_grad_(True) for p, a, g in zip(ps, alphas, grads)]
        return download(torch.cat([p.detach().reshape(-1) for p in ps])).astype(np.float32)
