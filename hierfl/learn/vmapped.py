"""Batched local training for any registered model: ``torch.func`` (``functional_call`` + ``grad`` + ``vmap``).

A group of ``K`` jobs of one :class:`~hierfl.core.work.TrainSpec` runs in lockstep on stacked
parameters: the ``K`` parameter vectors are the rows of one ``(K, P)`` tensor, every step computes
the ``K`` jobs' gradients with one ``vmap(grad_and_value(loss))`` call over the stacked parameters
and their own minibatches, and the SGD step is a few operations on the ``(K, P)`` tensor.

Per job the semantics are those of :meth:`hierfl.learn.local.LocalTrainer.train`:

* the same data order: each job's ``np.random.default_rng(seed)`` and
  :func:`~hierfl.learn.local.index_blocks`, so job ``k``'s minibatches are those the single-job
  path takes for the same (seed, device, job);
* the same loss (cross-entropy, mean over the batch), the same number of steps and samples;
* the same optimiser arithmetic, in the same order as :class:`~hierfl.learn.sgd.ExactSGD`:
  proximal term ``g += ρ (w − w_start)``, control variates' ``g += c − c_i`` (per job), weight decay
  ``g ← g + wd·w``, momentum (``buf ← g`` on the first step, then ``buf ← m·buf + g``; Nesterov:
  ``g ← g + m·buf``), ``w ← w − lr·g``; each job's own gradient clip (``spec.clip_norm``) after the loss
  terms; Adam / AdamW: torch's single-tensor step on the stack (:mod:`hierfl.learn.optim`).

Jobs of unequal sample counts batch together: every step gathers a ``(K, B_max)`` block of sample
indices, padded ones get weight 0 in the loss (a real sample of a batch of ``b`` gets ``1/b``,
so the weighted sum is the batch mean) and a job that has taken all its steps stops updating (its
rows are masked out of the step). The floating-point operations differ from the single-job path
(batched kernels, a weighted sum instead of a mean), so results agree within float tolerance, not
in every bit (the contract: ``docs/howto/batched-learning.md``); run to run they are identical for
the same device, thread count and groups.

Models: any ``nn.Module``. Its running statistics (batch norm) are per-job buffers, stacked like
the parameters (the tail of each job's state vector, :mod:`hierfl.models.state`) and passed to
``functional_call`` with them; the forward pass updates them in place, job by job. Since batch
statistics must be computed over a job's real samples only, a model with batch norm (or any other
buffer) takes each step without padding: the active jobs are split by batch size and each part is
one vmapped call. Dropout masks are drawn outside the vmapped function from each job's own generator,
at its own batch size and in call order, exactly as the job draws them alone
(:mod:`hierfl.learn.randomness`), and passed in. Other random operations in a forward pass, recurrent
dropout, and buffers the state cannot carry raise :class:`UnsupportedModel`.

DP-SGD (``spec.dp_sgd``, :mod:`hierfl.learn.dp_sgd`): each job's own independently sampled batches, padded and
masked, per-sample gradients through a ``vmap`` over samples inside the ``vmap`` over jobs, each job's noise drawn
outside from its own stream as when it trains alone.

Precision: the trainer's ``precision`` (``runtime.precision``, :mod:`hierfl.learn.precision`);
``bf16`` runs the forward pass inside the vmapped function under bfloat16 autocast, parameters,
gradients and optimiser state stay float32.

Devices: ``cpu`` or ``cuda`` (see :func:`resolve_device`). On CUDA the host's samples are copied
to the GPU once and gathered there; TF32 is turned off and cuDNN made deterministic, so a GPU run
is repeatable and within the same tolerance of the CPU single-job path.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch
from hierfl.learn import dp_sgd
from hierfl.learn.local import index_blocks
from hierfl.learn.optim import AdamMoments, clip_rows
from hierfl.learn.precision import autocast, check_precision
from hierfl.learn.randomness import ReplayMasks, Site, draw_mask, dropout_sites, job_generator
from hierfl.learn.staging import Staging, Transfers, stage_starts
from hierfl.models.state import check_buffers, state_buffers

if TYPE_CHECKING:
    import torch

    from hierfl.learn.local import LocalTrainer

__all__ = ["DEVICES", "UnsupportedModel", "VmapTrainer", "resolve_device", "step_plan"]

DEVICES = ("cpu", "cuda", "auto")
"""Allowed values of ``runtime.device``."""


class UnsupportedModel(ValueError):
    """A module the batched trainer cannot train as the single-job path does (random operations other than
    dropout, recurrent dropout, integer buffers)."""


def resolve_device(device: str | None) -> str:
    """``cpu`` or ``cuda``: ``auto`` is ``cuda`` where ``torch.cuda.is_available()``, else ``cpu``.

    ``cuda`` where CUDA is not available raises ``ValueError`` (the scenario loader reports it first).
    """
    device = device or "cpu"
    if device not in DEVICES:
        raise ValueError(f"runtime.device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise ValueError("runtime.device is cuda but torch.cuda.is_available() is false on this machine; "
                         f"allowed: {', '.join(DEVICES)}")
    return "cpu"


def check_module(module: torch.nn.Module, input_shape: tuple[int, ...]) -> list[Site]:
    """The module's dropout sites; :class:`UnsupportedModel` for what neither path can train from a job's streams."""
    try:
        check_buffers(module)
        return dropout_sites(module, input_shape)
    except ValueError as exc:
        raise UnsupportedModel(f"batched training: {exc}") from None


def batch_coupled(module: torch.nn.Module) -> bool:
    """Whether a sample's output depends on the other samples of its batch or the step updates buffers
    (normalisation over the batch, running statistics): such steps take no padded rows."""
    from torch import nn

    return (any(isinstance(m, nn.modules.batchnorm._NormBase) for m in module.modules())
            or any(True for _ in state_buffers(module)))


def step_plan(sizes: list[int], spec: TrainSpec, seeds: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Every job's minibatches, padded into lockstep.

    Job ``k`` has ``sizes[k]`` samples; its batches are cut from :func:`index_blocks` with
    ``np.random.default_rng(seeds[k])`` exactly as the single-job path cuts them. Returns

    * ``pos``: ``(T, K, B)`` int64 positions into each job's rows (padding: position 0);
    * ``weight``: ``(T, K, B)`` float32, ``1/b`` for the ``b`` real samples of a batch, 0 for padding;
    * ``active``: ``(T, K)`` bool, whether job ``k`` takes step ``t``;
    * the number of samples of each job's steps, summed (its ``samples``).

    ``T`` is the largest step count, ``B`` the largest batch.
    """
    per_job: list[list[np.ndarray]] = []
    for n, seed in zip(sizes, seeds):
        b = effective_batch(n, spec)
        steps: list[np.ndarray] = []
        for block in index_blocks(n, b, spec, np.random.default_rng(seed)):
            steps.extend(block[start: start + b] for start in range(0, block.size, b))
        per_job.append(steps)
    k_jobs = len(sizes)
    t_max = max(len(s) for s in per_job)
    b_max = max(int(st.size) for s in per_job for st in s)
    pos = np.zeros((t_max, k_jobs, b_max), dtype=np.int64)
    weight = np.zeros((t_max, k_jobs, b_max), dtype=np.float32)
    active = np.zeros((t_max, k_jobs), dtype=bool)
    samples = []
    for k, steps in enumerate(per_job):
        total = 0
        for t, st in enumerate(steps):
            m = st.size
            pos[t, k, :m] = st
            weight[t, k, :m] = np.float32(1.0) / np.float32(m)
            active[t, k] = True
            total += m
        samples.append(total)
    return pos, weight, active, samples


class VmapTrainer:
    """Trains groups of jobs of any (supported) model together (see the module docstring).

    Parameters
    ----------
    trainer
        The host's :class:`~hierfl.learn.local.LocalTrainer` (model, layout, thread count).
    device
        ``cpu``, ``cuda`` or ``auto`` (:func:`resolve_device`).

    Raises
    ------
    UnsupportedModel
        For modules with batch norm, dropout or buffers.
    """

    def __init__(self, trainer: LocalTrainer, device: str = "cpu") -> None:
        import torch

        self.sites = check_module(trainer.module, trainer.input_shape)
        self.trainer = trainer
        self.device = resolve_device(device)
        # the trainer's runtime.precision, checked again for this trainer's device (bf16 on a GPU)
        self.precision = check_precision(trainer.precision, self.device)
        self.num_params = trainer.num_params
        self.in_features = trainer.in_features
        if self.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        # a module of the same architecture on the device; functional_call supplies every parameter
        self.module = trainer.model_cfg.build(trainer.input_shape, trainer.num_classes).to(self.device)
        # the state vector: parameters (the optimiser's), then carried buffers (hierfl.models.state)
        n_params = sum(1 for _ in self.module.parameters())
        self.num_trainable = trainer.num_trainable
        self.names = [name for name, _ in trainer.layout[:n_params]]
        self.shapes = [shape for _, shape in trainer.layout[:n_params]]
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
        self.buffer_layout = [(name, shape, int(np.prod(shape, dtype=np.int64))) for name, shape in trainer.layout[n_params:]]
        # integer buffers the forward pass increments (batch norm's num_batches_tracked): per-job scratch
        self.counters = [(name, buf) for name, buf in self.module.named_buffers() if not buf.is_floating_point()]
        self.exact = batch_coupled(self.module)
        self._replay = ReplayMasks()
        # LSTM: the fused kernels (mkldnn / cuDNN) have no vmap batching rule, the composite does
        self._has_rnn = any(isinstance(m, torch.nn.RNNBase) for m in self.module.modules())
        self._grad_fn = self._make_grad_fn()
        self._x_cache: tuple[Any, Any, Any, Any] | None = None  # (x, y, their device tensors)
        # the staging state (hierfl.learn.staging): model-sized host↔device crossings are counted there; a
        # device host shares its own with its trainers
        self.staging = Staging(self.device)

    @property
    def transfers(self) -> Transfers:
        """Model-sized host↔device crossings of this trainer's staging so far (:class:`~hierfl.learn.staging.Transfers`)."""
        return self.staging.transfers

    def _make_grad_fn(self) -> Any:
        import torch.nn.functional as F
        from torch.func import functional_call, grad_and_value, vmap

        module = self.module
        device = self.device

        replay = self._replay

        if self.precision == "fp32":
            def loss(params: dict[str, Any], buffers: dict[str, Any], x: Any, y: Any, w: Any, masks: tuple) -> Any:
                replay.load(list(masks))  # this job's dropout masks, consumed in call order
                logits = functional_call(module, (params, buffers), (x,))
                return (F.cross_entropy(logits, y, reduction="none") * w).sum()
        else:
            # autocast inside the function vmap and grad transform: it covers the forward only
            # (grad's backward runs after the function returns, outside the region), and the
            # weighted loss is computed from float32 logits (hierfl.learn.precision)
            def loss(params: dict[str, Any], buffers: dict[str, Any], x: Any, y: Any, w: Any, masks: tuple) -> Any:
                replay.load(list(masks))
                with autocast("bf16", device):
                    logits = functional_call(module, (params, buffers), (x,))
                return (F.cross_entropy(logits.float(), y, reduction="none") * w).sum()

        return vmap(grad_and_value(loss), in_dims=(0, 0, 0, 0, 0, 0))

    def _backend_flags(self) -> Any:
        import contextlib

        import torch

        stack = contextlib.ExitStack()
        if self.sites:  # dropout calls take the stacked per-job masks
            stack.enter_context(self._replay)
        if not self._has_rnn:
            return stack
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="There is a performance drop")
        warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
        stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        stack.enter_context(torch.backends.cudnn.flags(enabled=False))
        return stack

    def _data(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """The host's samples as tensors on the device (CUDA: copied once per array and kept)."""
        import torch

        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        if x2d.shape[1] != self.in_features:
            raise ValueError(f"samples have {x2d.shape[1]} features, model expects {self.in_features}")
        if self.device == "cpu":
            return x2d, np.asarray(y)
        if self._x_cache is None or self._x_cache[0] is not x or self._x_cache[1] is not y:
            xt = torch.from_numpy(np.ascontiguousarray(x2d, dtype=np.float32)).to(self.device)
            yt = torch.from_numpy(np.asarray(y).astype(np.int64)).to(self.device)
            self._x_cache = (x, y, xt, yt)
        return self._x_cache[2], self._x_cache[3]

    def train_group(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, rows: list[np.ndarray],
                    spec: TrainSpec, seeds: list[int], out: np.ndarray,
                    corrections: list[np.ndarray] | None = None) -> list[dict[str, float]]:
        """Train ``K = len(params)`` jobs in lockstep; job ``k`` starts from ``params[k]`` on ``x[rows[k]]``.

        ``rows[k]`` may have different lengths. ``corrections`` (control variates): job ``k``'s flat
        ``c − c_i``, added to each of its gradients. Results go to ``out[k]`` (``(K, P)`` float32);
        returns each job's ``{'loss', 'steps', 'samples'}`` like the single-job trainer.
        """
        if out.shape[0] != len(params):
            raise ValueError("params, rows, seeds and out must describe the same K >= 1 jobs")
        state, stats = self.train_resident(params, x, y, rows, spec, seeds, out, corrections)
        self._unstage(state, out)
        return stats

    def train_resident(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, rows: list[np.ndarray],
                       spec: TrainSpec, seeds: list[int], out: np.ndarray | None = None,
                       corrections: list[np.ndarray] | None = None) -> tuple[Any, list[dict[str, float]]]:
        """:meth:`train_group`, the results left on the device: ``(the (K, P) state tensor, stats)``.

        On the CPU the state is ``out`` itself where it can be (trained in place); on CUDA ``out`` is not used
        and nothing is copied back (:mod:`hierfl.learn.staging`).
        """
        import torch

        k_jobs = len(params)
        if not (k_jobs == len(rows) == len(seeds)) or k_jobs < 1 or (out is not None and out.shape[0] != k_jobs):
            raise ValueError("params, rows, seeds and out must describe the same K >= 1 jobs")
        if corrections is not None and len(corrections) != k_jobs:
            raise ValueError("corrections must have one vector per job")
        rows = [np.asarray(r) for r in rows]
        if any(r.ndim != 1 or r.size < 1 for r in rows):
            raise ValueError("every job needs a non-empty 1-d array of rows")
        if torch.get_num_threads() != self.trainer.torch_threads:
            torch.set_num_threads(self.trainer.torch_threads)
        state = self._stage(params, out)
        losses, active, samples = self._descend(state, x, y, rows, spec, seeds, corrections)
        loss_np = losses.cpu().numpy().astype(np.float64)
        loss_np[~active] = 0.0
        steps = active.sum(axis=0)
        return state, [{"loss": float(loss_np[:, k].sum()) / int(steps[k]), "steps": int(steps[k]),
                        "samples": samples[k]} for k in range(k_jobs)]

    def _descend(self, state: Any, x: np.ndarray, y: np.ndarray, rows: list[np.ndarray], spec: TrainSpec,
                 seeds: list[int], corrections: list[np.ndarray] | None) -> tuple[Any, np.ndarray, list[int]]:
        """The group's local steps on ``state`` (in place): ``(losses (T, K), active (T, K), samples)``.

        (The host-cost benchmark replaces this with an identity to time everything around training.)
        """
        import torch

        k_jobs, P, dev = len(rows), self.num_params, self.device
        flat = state[:, : self.num_trainable]  # the parameters: the optimiser's part of the state
        corr = None
        if corrections is not None:
            corr = torch.from_numpy(np.stack([np.asarray(c, dtype=np.float32) for c in corrections])).to(dev)
            if corr.shape != (k_jobs, P):
                raise ValueError(f"corrections must have shape ({P},) each")
            corr = corr[:, : self.num_trainable]
        xs_all, ys_all = self._data(x, y)
        dp = spec.dp_sgd  # sample-level DP-SGD (hierfl.learn.dp_sgd): its own batches, per-sample clipped noisy grads
        plan = step_plan if dp is None else dp_sgd.dp_step_plan
        pos, weight, active, samples = plan([int(r.size) for r in rows], spec, seeds)
        t_max = pos.shape[0]
        # absolute sample indices of every step: rows[k][pos[t, k, :]]
        width = max(r.size for r in rows)
        padded_rows = np.zeros((k_jobs, width), dtype=np.int64)
        for k, r in enumerate(rows):
            padded_rows[k, : r.size] = r
        index = padded_rows[np.arange(k_jobs)[None, :, None], pos]  # (T, K, B)
        weight_t = torch.from_numpy(weight).to(dev)
        all_active = active.all(axis=1)
        active_t = torch.from_numpy(active).to(dev)
        index_t = torch.from_numpy(index).to(dev) if dev != "cpu" else None
        views = {name: flat[:, o: o + n].view(k_jobs, *shape)
                 for name, o, n, shape in zip(self.names, self.offsets, self.sizes, self.shapes)}
        buffers = self._buffer_views(state, k_jobs)
        gens = [job_generator(s) for s in seeds] if self.sites else []
        prox, wd, mom, lr = spec.proximal, spec.weight_decay, spec.momentum, spec.lr
        anchor = flat.clone() if prox > 0 else None
        buf = torch.empty_like(flat) if mom != 0 else None
        grad = torch.empty_like(flat)
        # training.optimizer / clip_norm (hierfl.learn.optim): torch's Adam step on the stack, each job's own clip
        adam = AdamMoments([flat]) if spec.adaptive else None
        segments = list(zip(self.offsets, self.sizes))
        losses = torch.empty((t_max, k_jobs), dtype=torch.float32, device=dev)
        grad_fn = self._grad_fn
        if dp is not None:
            if self.exact:
                raise UnsupportedModel("DP-SGD: per-sample gradients of a batch-coupled model (batch norm, buffers)")
            dp_fn = dp_sgd.job_grad_fn(self.module, self.names, float(dp.clip))
            noise_gens = [dp_sgd.noise_generator(s) for s in seeds]
            std = float(dp.noise_multiplier) * float(dp.clip)
            denom = torch.tensor([float(effective_batch(int(r.size), spec)) for r in rows], device=dev)
            counts = torch.from_numpy(np.maximum(weight.sum(axis=2), 1.0)).to(dev)
        with self._backend_flags():
            for t in range(t_max):
                if dev == "cpu":
                    sel = index[t]
                    xb = torch.from_numpy(np.ascontiguousarray(xs_all[sel], dtype=np.float32))
                    yb = torch.from_numpy(ys_all[sel].astype(np.int64, copy=False))
                else:
                    assert index_t is not None
                    xb = xs_all[index_t[t]]
                    yb = ys_all[index_t[t]]
                masks = self._masks(gens, weight[t], active[t])
                if dp is not None:  # each job's noise from its own stream, drawn on the CPU as when it trains alone
                    noise = torch.stack([dp_sgd.draw_noise(g, self.num_trainable, std) for g in noise_gens]).to(dev)
                    with torch.no_grad():
                        dp_grad, loss_sums = dp_fn(views, xb, yb, weight_t[t], noise, denom)
                        grad.copy_(dp_grad)
                        losses[t] = loss_sums / counts[t]
                elif self.exact:  # no padded rows: jobs of each batch size in one call, buffers updated
                    self._exact_step(views, buffers, xb, yb, weight_t[t], masks, weight[t], active[t], grad,
                                     losses[t])
                else:
                    grads, loss = grad_fn(views, buffers, xb, yb, weight_t[t], tuple(m.to(dev) for m in masks))
                    losses[t] = loss
                with torch.no_grad():
                    if not self.exact and dp is None:
                        torch.cat([grads[name].reshape(k_jobs, -1) for name in self.names], dim=1, out=grad)
                    g = grad
                    if prox > 0:
                        assert anchor is not None
                        g.add_(flat - anchor, alpha=prox)
                    if corr is not None:
                        g.add_(corr)
                    if spec.clip_norm is not None:
                        clip_rows(g, segments, spec.clip_norm)
                    if adam is not None:
                        kept = None if all_active[t] else flat.clone()
                        adam.step([flat], [g], spec)
                        if kept is not None:  # jobs past their last step keep their parameters
                            flat.copy_(torch.where(active_t[t].unsqueeze(1), flat, kept))
                        continue
                    if wd != 0:
                        g = torch.add(g, flat, alpha=wd)
                    if mom != 0:
                        assert buf is not None
                        if t == 0:
                            buf.copy_(g)
                        else:
                            buf.mul_(mom).add_(g, alpha=1)
                        g = torch.add(g, buf, alpha=mom) if spec.nesterov else buf
                    if all_active[t]:
                        flat.add_(g, alpha=-lr)
                    else:  # jobs past their last step keep their parameters (where: no NaN·0)
                        flat.copy_(torch.where(active_t[t].unsqueeze(1), flat - lr * g, flat))
        return losses, active, samples

    def _stage(self, params: list[np.ndarray], out: np.ndarray | None) -> Any:
        """The ``(K, P)`` state tensor the group trains, on the device, filled with the start models
        (:func:`~hierfl.learn.staging.stage_starts`: each distinct start model crosses once).

        CPU: the state is ``out`` itself where it can be (float32, C-contiguous, sharing no memory with a
        start model), so the results need no copy back; else a fresh host array.
        """
        return stage_starts(params, self.num_params, self.staging, out if self.device == "cpu" else None)

    def _unstage(self, state: Any, out: np.ndarray) -> None:
        """The trained state into the host rows ``out`` (counted: ``K`` models device→host, one call); on the CPU
        nothing is copied where it trained in ``out``."""
        import torch

        self.staging.transfers.count("d2h", int(state.shape[0]))
        if self.device == "cpu":
            host = state.numpy()
            if not np.may_share_memory(host, out):  # (trained in a fresh array, not in out)
                out[...] = host
            return
        if out.dtype == np.float32 and out.flags.c_contiguous and out.shape == tuple(state.shape):
            torch.from_numpy(out).copy_(state)  # straight into the result rows, no intermediate array
        else:
            out[...] = state.cpu().numpy()

    def _buffer_views(self, state: Any, k_jobs: int) -> dict[str, Any]:
        """Each job's carried buffers, views into the state's tail, and a scratch copy of each counter."""
        out: dict[str, Any] = {}
        offset = self.num_trainable
        for name, shape, n in self.buffer_layout:
            out[name] = state[:, offset: offset + n].view(k_jobs, *shape)
            offset += n
        for name, buf in self.counters:  # incremented by the forward pass, read by no carried rule
            out[name] = buf.detach().to(self.device).expand(k_jobs, *buf.shape).clone()
        return out

    def _masks(self, gens: list[Any], weight: np.ndarray, active: np.ndarray) -> list[Any]:
        """One step's dropout masks ``(K, B, *shape)`` per site: job ``k``'s drawn from its generator at its own
        batch size, in site order, as it draws them alone; padded rows and idle jobs get zeros."""
        import torch

        if not self.sites:
            return []
        k_jobs, width = weight.shape
        out = [torch.zeros((k_jobs, width, *shape)) for _, _, shape in self.sites]
        for k in range(k_jobs):
            if not active[k]:
                continue
            m = int(np.count_nonzero(weight[k]))
            for stack, (kind, p, shape) in zip(out, self.sites):
                stack[k, :m] = draw_mask(gens[k], p, (m, *shape))
        return out

    def _exact_step(self, views: dict[str, Any], buffers: dict[str, Any], xb: Any, yb: Any, weight_t: Any,
                    masks: list[Any], weight: np.ndarray, active: np.ndarray, grad: Any, losses: Any) -> None:
        """One step of a batch-coupled model: the active jobs, split by batch size, each part one vmapped call on
        exactly its jobs' samples; gradients go to ``grad``'s rows (idle jobs: zeros), running statistics back to
        the state, losses to ``losses``."""
        import torch

        grad.zero_()
        losses.zero_()
        sizes = np.count_nonzero(weight, axis=1)
        for m in sorted({int(sizes[k]) for k in range(len(sizes)) if active[k]}):
            idx = np.flatnonzero(active & (sizes == m))
            sel = torch.from_numpy(idx).to(xb.device)
            params = {name: v[sel] for name, v in views.items()}
            bufs = {name: b[sel] for name, b in buffers.items()}  # copies: the forward updates them
            part = tuple(mk[idx, :m].to(xb.device) for mk in masks)
            grads, loss = self._grad_fn(params, bufs, xb[sel, :m], yb[sel, :m], weight_t[sel, :m], part)
            with torch.no_grad():
                grad[sel] = torch.cat([grads[name].reshape(len(idx), -1) for name in self.names], dim=1)
                for name, b in buffers.items():
                    b[sel] = bufs[name]
                losses[sel] = loss
