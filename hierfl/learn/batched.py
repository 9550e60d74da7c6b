"""Opt-in fast path (``runtime.fast_path``): several local jobs of one ``logreg``/``mlp`` trained together on CPU.

Jobs of the same specification on the same number of samples take the same steps with the same
batch sizes, so they can run in lockstep: their parameters are stacked into one ``(K, P)``
tensor and every step is a handful of batched tensor operations (``baddbmm``/``bmm`` over the
``K`` jobs) instead of ``K`` times as many small ones. Per job, the semantics are those of
:meth:`hierfl.learn.local.LocalTrainer.train` — the same data order (each job's own
``np.random.default_rng(seed)`` and :func:`~hierfl.learn.local.index_blocks`), the same steps,
loss, SGD with momentum (Nesterov's too), weight decay and proximal term, each job's own gradient clip,
Adam / AdamW with torch's step on the stack (:mod:`hierfl.learn.optim`) — but the floating-point operations
differ (batched kernels, the softmax gradient written directly), so the numbers differ from the
one-job-at-a-time path in the last bits, and may differ with the group a job is trained in.

Determinism therefore rests on the groups: they are decided by the executors from the driver's
sequence of calls only (:mod:`hierfl.runtime.executor`), never by hosts, workers or timing, and
a group is always trained whole by one host, in order. Jobs with control variates (per-device
state) are never grouped. The host trains a group of any other model (and of any model on CUDA) with
:class:`hierfl.learn.vmapped.VmapTrainer`; Linear/ReLU chains on CPU use this trainer, which is
faster there (``analysis/bench/learning.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.work import TrainSpec, effective_batch, num_steps
from hierfl.learn.chain import LinearChain
from hierfl.learn.local import index_blocks
from hierfl.learn.optim import AdamMoments, clip_rows, segments_of
from hierfl.learn.staging import Staging, Transfers, stage_starts

if TYPE_CHECKING:
    from hierfl.learn.local import LocalTrainer

__all__ = ["BatchedTrainer", "GROUP_MAX", "JobGroups"]

GROUP_MAX = 64
"""The cap of a :class:`JobGroups` made without one (tests and benchmarks that form groups by hand). A run passes
its own, resolved once at start (``runtime.group_max``, :mod:`hierfl.learn.group_cap`): with ``auto``, as many
jobs as the device's total memory holds, so a round whose jobs start together is one group; it never depends
on the number of workers, timing or free memory."""


class BatchedTrainer:
    """Trains groups of jobs of one Linear/ReLU chain together (see the module docstring).

    Parameters
    ----------
    trainer
        The host's :class:`~hierfl.learn.local.LocalTrainer` (its model's layer shapes are used).
    """

    def __init__(self, trainer: LocalTrainer, chain: LinearChain) -> None:
        self.trainer = trainer
        self.num_params = trainer.num_params
        self.in_features = trainer.in_features
        # (offset, out, in) of each weight and (offset, out) of each bias in the flat vector
        self._layers: list[tuple[int, int, int, int]] = []
        offset = 0
        for w, b in zip(chain.weights, chain.biases):
            out_f, in_f = int(w.shape[0]), int(w.shape[1])
            self._layers.append((offset, out_f, in_f, offset + out_f * in_f))
            offset += out_f * in_f + out_f
        if offset != self.num_params:
            raise ValueError("layer shapes do not add up to the parameter vector")
        # the staging state (hierfl.learn.staging): a device host shares its own with its trainers
        self.staging = Staging("cpu")

    @property
    def transfers(self) -> Transfers:
        """Model-sized host↔device crossings of this trainer's staging so far (:class:`~hierfl.learn.staging.Transfers`)."""
        return self.staging.transfers

    @classmethod
    def of(cls, trainer: LocalTrainer) -> BatchedTrainer | None:
        """A batched trainer for ``trainer``'s model, or ``None`` if the model is not a Linear/ReLU chain
        or the trainer's precision is not ``fp32`` (bf16 groups train with vmap under autocast)."""
        if trainer.precision != "fp32":
            return None
        chain = LinearChain.of(trainer.module)
        return None if chain is None else cls(trainer, chain)

    def train_group(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, rows: list[np.ndarray],
                    spec: TrainSpec, seeds: list[int], out: np.ndarray) -> list[dict[str, float]]:
        """Train ``K = len(params)`` jobs in lockstep; job ``k`` starts from ``params[k]`` on ``x[rows[k]]``.

        All ``rows[k]`` must have the same length. Results go to ``out[k]`` (``(K, P)`` float32);
        returns each job's ``{'loss', 'steps', 'samples'}`` like the single-job trainer.
        """
        if out.shape[0] != len(params):
            raise ValueError("params, rows, seeds and out must describe the same K >= 1 jobs")
        flat, stats = self.train_resident(params, x, y, rows, spec, seeds, out)
        # the results into the host rows: counted as the K models they are (CPU: trained in out, no copy)
        self.staging.transfers.count("d2h", len(params))
        host = flat.numpy()
        if not np.may_share_memory(host, out):
            out[...] = host
        return stats

    def train_resident(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray, rows: list[np.ndarray],
                       spec: TrainSpec, seeds: list[int], out: np.ndarray | None = None
                       ) -> tuple[Any, list[dict[str, float]]]:
        """:meth:`train_group`, the results left in the group's stacked tensor: ``(the (K, P) tensor, stats)``;
        trained in ``out`` itself where it can be (float32, C-contiguous, sharing no memory with a start model)."""
        import torch

        k_jobs = len(params)
        if not (k_jobs == len(rows) == len(seeds)) or k_jobs < 1 or (out is not None and out.shape[0] != k_jobs):
            raise ValueError("params, rows, seeds and out must describe the same K >= 1 jobs")
        if spec.control_variates:
            raise ValueError("jobs with control variates keep per-device state: they are never trained in a group")
        n = int(rows[0].size)
        if n < 1 or any(r.size != n for r in rows):
            raise ValueError("a group's jobs must all have the same (positive) number of samples")
        x2d = np.asarray(x).reshape(np.asarray(x).shape[0], -1)
        if x2d.shape[1] != self.in_features:
            raise ValueError(f"samples have {x2d.shape[1]} features, model expects {self.in_features}")
        y = np.asarray(y)
        if torch.get_num_threads() != self.trainer.torch_threads:
            torch.set_num_threads(self.trainer.torch_threads)
        b = effective_batch(n, spec)
        total_steps = num_steps(n, spec)
        # the start models: each distinct one staged once (hierfl.learn.staging), in out's rows where it can be
        flat = stage_starts(params, self.num_params, self.staging, out)
        weights = [flat[:, o: o + fo * fi].view(k_jobs, fo, fi) for o, fo, fi, _ in self._layers]
        biases = [flat[:, bo: bo + fo].view(k_jobs, 1, fo) for _, fo, _, bo in self._layers]
        weights_t = [w.transpose(1, 2) for w in weights]
        grad = torch.empty_like(flat)
        grad_w = [grad[:, o: o + fo * fi].view(k_jobs, fo, fi) for o, fo, fi, _ in self._layers]
        grad_b = [grad[:, bo: bo + fo].view(k_jobs, 1, fo) for _, fo, _, bo in self._layers]
        prox, wd, mom, lr = spec.proximal, spec.weight_decay, spec.momentum, spec.lr
        anchor = flat.clone() if prox > 0 else None
        tmp = torch.empty_like(flat) if prox > 0 or spec.nesterov else None
        buf = torch.empty_like(flat) if mom != 0 else None
        # training.optimizer adam / adamw: torch's own step on the stack; training.clip_norm: each job's own clip
        adam = AdamMoments([flat]) if spec.adaptive else None
        segments = segments_of([(fo * fi,) if k == 0 else (fo,) for _, fo, fi, _ in self._layers for k in (0, 1)])
        losses = torch.empty((total_steps, k_jobs), dtype=torch.float32)
        last = len(weights) - 1
        relu_back = torch.ops.aten.threshold_backward.default
        gens = [index_blocks(n, b, spec, np.random.default_rng(s)) for s in seeds]
        step = 0
        samples = 0
        with torch.no_grad():
            for blocks in zip(*gens):
                sel = np.stack([r[blk] for r, blk in zip(rows, blocks)])  # (K, m) rows into x
                xs = torch.from_numpy(np.ascontiguousarray(x2d[sel], dtype=np.float32))
                ys = torch.from_numpy(y[sel].astype(np.int64, copy=False)).unsqueeze(2)
                m = sel.shape[1]
                for start in range(0, m, b):
                    xb = xs[:, start: start + b]
                    yb = ys[:, start: start + b]
                    bsz = xb.shape[1]
                    acts = [xb]
                    h = xb
                    for i, (wt, bias) in enumerate(zip(weights_t, biases)):
                        h = torch.baddbmm(bias, h, wt)
                        if i < last:
                            h = torch.relu(h)
                            acts.append(h)
                    lsm = torch.log_softmax(h, 2)
                    torch.mean(lsm.gather(2, yb).squeeze(2), 1, out=losses[step])
                    g = lsm.exp_()  # d(mean CE)/d logits = (softmax − onehot) / B
                    g.scatter_add_(2, yb, torch.full(yb.shape, -1.0))
                    g.div_(bsz)
                    for i in range(last, -1, -1):
                        torch.sum(g, 1, keepdim=True, out=grad_b[i])
                        torch.bmm(g.transpose(1, 2), acts[i], out=grad_w[i])
                        if i > 0:
                            g = relu_back(torch.bmm(g, weights[i]), acts[i], 0)
                    if prox > 0:
                        assert anchor is not None and tmp is not None
                        grad.add_(torch.sub(flat, anchor, out=tmp), alpha=prox)
                    if spec.clip_norm is not None:
                        clip_rows(grad, segments, spec.clip_norm)
                    if adam is not None:
                        adam.step([flat], [grad], spec)
                    elif wd != 0:
                        grad.add_(flat, alpha=wd)
                    if mom != 0:
                        assert buf is not None
                        if step == 0:
                            buf.copy_(grad)
                        else:
                            buf.mul_(mom).add_(grad)
                        if spec.nesterov:  # torch: grad = grad.add(buf, alpha=momentum)
                            assert tmp is not None
                            flat.add_(torch.add(grad, buf, alpha=mom, out=tmp), alpha=-lr)
                        else:
                            flat.add_(buf, alpha=-lr)
                    if adam is None and mom == 0:
                        flat.add_(grad, alpha=-lr)
                    step += 1
                    samples += bsz
        loss_sums = (-losses.numpy().astype(np.float64)).sum(axis=0)
        return flat, [{"loss": float(loss_sums[k]) / step, "steps": step, "samples": samples} for k in range(k_jobs)]


class JobGroups:
    """The fast path's grouping rule, one definition for every executor.

    Groups are formed from the sequence of executor calls the driver makes, which is the same
    whatever the executor, its number of hosts or its timing: consecutive ``train`` calls with
    the same :class:`~hierfl.core.work.TrainSpec` join the open group, other calls in between
    included; the group closes when

    * a call needs the result of one of its jobs (``wait`` on it, a ``train`` starting from it,
      an aggregation, evaluation or fetch of it): the executor calls :meth:`seal`;
    * it holds ``cap`` jobs (the run's resolved ``runtime.group_max``; :data:`GROUP_MAX` without one), or a
      ``train`` call has another spec (:meth:`add`).

    Jobs with control variates (``spec.control_variates``) are never grouped: they run alone. An executor
    trains each closed group whole, on one host.
    """

    def __init__(self, cap: int = GROUP_MAX) -> None:
        if int(cap) < 1:
            raise ValueError(f"a group holds at least one job, got a cap of {cap}")
        self.cap = int(cap)
        self.open: list[Any] = []
        self.open_id = -1
        self._spec: TrainSpec | None = None
        self.next_id = 0

    def add(self, job: Any, spec: TrainSpec, params: Any) -> tuple[int, list[Any]]:
        """Put ``job`` (an executor's handle) in a group: ``(group id, jobs of a group closed to make room)``."""
        closed: list[Any] = []
        if self.open and (len(self.open) >= getattr(self, "cap", GROUP_MAX) or spec != self._spec or any(params is j for j in self.open)):
            closed = self.seal()
        if not self.open:
            self.open_id, self.next_id = self.next_id, self.next_id + 1
            self._spec = spec
        self.open.append(job)
        return self.open_id, closed

    def seal(self) -> list[Any]:
        """Close the open group (a call needs one of its results): its jobs, possibly none."""
        jobs, self.open = self.open, []
        self._spec = None
        return jobs
