"""FCCL's device work: pre-training, logits on public batches, the collaboration steps and the local phase.

W. Huang, M. Ye, B. Du, "Learn from Others and Be Yourself in Heterogeneous Federated Learning",
CVPR 2022 (authors' code ``WenkeHuang/FCCL``: ``fccl/Idea/Ours/FCCL.py`` for the rounds,
``fccl/Idea/utils_idea.py::update_model_via_private_data_with_two_model`` for the local loss).

A device keeps, besides the model it trains (the job's parameters), two frozen models in its
host's per-device state (:class:`~hierfl.runtime.device_state.DeviceState`, so they are counted,
checkpointed and reset with it): ``fccl_star`` (pre-trained on the private data alone: the
intra-domain teacher) and ``fccl_prev`` (the snapshot taken at the end of the previous round: the
inter-domain teacher and, with ``self_target: previous``, the source of the party's own entry in
its collaboration target). Between a ``logits`` job and its ``collab`` job the device also keeps the
logits it uploaded (``fccl_z``) and its own target entry (``fccl_self``).

Both phases use Adam (the authors' code; a fresh optimiser for every public batch, one for the
whole local phase), with the job's ``lr`` and ``weight_decay``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.methods.fccl.math import FCCLJob, batch_positions, own_target
from hierfl.core.work import TrainSpec, effective_batch, samples_processed
from hierfl.learn.local import index_blocks, init_params
from hierfl.learn.outputs import class_scores

if TYPE_CHECKING:
    from hierfl.learn.local import LocalTrainer

__all__ = ["STATE_NAMES", "FCCLWork"]

STATE_NAMES: tuple[str, ...] = ("fccl_star", "fccl_prev", "fccl_z", "fccl_self")


class FCCLWork:
    """The FCCL jobs of one host's devices, reading and writing their state in ``states`` (a
    :class:`~hierfl.runtime.device_state.DeviceState`-like object: ``vectors[device][name]`` and ``put``)."""

    def __init__(self, states: Any, x: np.ndarray, y: np.ndarray) -> None:
        self.states = states
        self.x = x
        self.y = y

    def _state(self, device: int, name: str) -> np.ndarray:
        vec = self.states.vectors.get(device, {}).get(name)
        if vec is None:
            raise ValueError(f"device {device}: FCCL's {name} is missing (its pre-training job has not run on this "
                             "host, or its state was reset)")
        return vec

    def run(self, trainer: LocalTrainer, device: int, rows: np.ndarray, spec: TrainSpec, seed: int,
            params: np.ndarray, control: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        """One job (``spec.method``): ``(result, stats)``. ``control``: the summed logits of a ``collab`` job."""
        job = spec.method
        assert job is not None
        if job.kind == "pretrain":
            start = init_params(trainer.model_cfg, trainer.input_shape, trainer.num_classes, job.init_seed)
            result, stats = self._train_private(trainer, start, rows, spec, seed, job, teachers=())
            self.states.put(device, fccl_star=result.copy(), fccl_prev=result.copy())
            return result, stats
        if job.kind == "local":
            star = self._state(device, "fccl_star")
            inter = self._state(device, "fccl_prev") if job.inter_teacher == "previous" else np.asarray(params)
            result, stats = self._train_private(trainer, np.asarray(params), rows, spec, seed, job,
                                                teachers=(inter, star))
            self.states.put(device, fccl_prev=result.copy())  # the next round's snapshot θ^{t}
            return result, stats
        batches = [job.rows[0] + b for b in batch_positions(job, job.rows[1] - job.rows[0])]
        if job.kind == "logits":
            return self._logits(trainer, device, batches, job, params)
        if control is None:
            raise ValueError(f"device {device}: a collaboration job needs the summed logits of the parties")
        return self._collab(trainer, device, batches, job, params, np.asarray(control, dtype=np.float32))

    def _logits(self, trainer: LocalTrainer, device: int, batches: list[np.ndarray], job: FCCLJob,
                params: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """Upload ``Z_k`` on the job's public rows; keep it, and the own entry of the target: the previous
        snapshot's logits (``previous``, per batch) or ``Z_k`` itself (``current``; and per round, where the
        round-start model is the snapshot)."""
        rows = np.concatenate(batches)
        z = class_scores(trainer, params, self.x, rows)
        own = z
        if job.per_batch and job.self_target == "previous":
            own = class_scores(trainer, self._state(device, "fccl_prev"), self.x, rows)
        self.states.put(device, fccl_z=z.copy(), fccl_self=own.copy())
        return z, {"samples": float(rows.size)}

    def _collab(self, trainer: LocalTrainer, device: int, batches: list[np.ndarray], job: FCCLJob,
                params: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """One Adam step (a fresh optimiser) per public batch on the cross-correlation loss toward the target
        ``(Σ_j Z_j − Z_k + Z_self)/K``; per round with ``current``, ``Z_self`` is the model's own output on the
        batch as it is now (detached)."""
        import torch

        from hierfl.learn.distill import cross_correlation_loss

        c = trainer.num_classes
        z_up = self._state(device, "fccl_z").reshape(-1, c)
        z_self = self._state(device, "fccl_self").reshape(-1, c)
        total = total.reshape(-1, c)
        live_self = not job.per_batch and job.self_target == "current"
        trainer._load(params)
        module = trainer.module
        dev = trainer.device  # runtime.device: the model, each batch and its target live there
        module.train()
        loss_sum, start = 0.0, 0
        for batch in batches:
            stop = start + batch.size
            xb = torch.from_numpy(np.ascontiguousarray(self.x[batch], dtype=np.float32).reshape(batch.size, -1)).to(dev)
            opt = torch.optim.Adam(trainer._params, lr=job.lr)  # the CVPR code: a new optimiser per batch
            opt.zero_grad(set_to_none=True)
            out = module(xb).float()
            own = out.detach().cpu().numpy() if live_self else z_self[start:stop]
            target = torch.from_numpy(own_target(total[start:stop], z_up[start:stop], own, job.parties)).to(dev)
            loss = cross_correlation_loss(out, target, job.lambda_col)
            loss.backward()
            opt.step()
            loss_sum += float(loss.item())
            start = stop
        return trainer.host_vector(), {"loss": loss_sum / len(batches), "steps": float(len(batches)),
                                         "samples": float(start)}

    def _train_private(self, trainer: LocalTrainer, params: np.ndarray, rows: np.ndarray, spec: TrainSpec,
                       seed: int, job: FCCLJob, teachers: tuple[np.ndarray, ...]) -> tuple[np.ndarray, dict[str, float]]:
        """Adam on the private rows: cross-entropy, plus ``λ_loc · Σ_teachers KL(p_teacher ‖ p)`` at ``T = 1``
        (``kd_loss(kind="kl")``). The frozen teachers' logits are computed once (they never change during the
        job); data order as :meth:`LocalTrainer.train` (seeded by ``seed`` only)."""
        import torch
        import torch.nn.functional as F

        from hierfl.learn.distill import kd_loss

        n = rows.size
        c = trainer.num_classes
        dev = trainer.device  # runtime.device: the model, each batch and the teachers' logits live there
        soft = [torch.from_numpy(class_scores(trainer, t, self.x, rows).reshape(n, c)).to(dev) for t in teachers]
        trainer._load(params)
        module = trainer.module
        module.train()
        opt = torch.optim.Adam(trainer._params, lr=job.lr, weight_decay=job.weight_decay)
        b = effective_batch(n, spec)
        rng = np.random.default_rng(seed)
        loss_sum, steps = 0.0, 0
        for block in index_blocks(n, b, spec, rng):
            for s in range(0, block.size, b):
                pos = block[s: s + b]
                batch = rows[pos]
                xb = torch.from_numpy(np.ascontiguousarray(self.x[batch], dtype=np.float32).reshape(pos.size, -1)).to(dev)
                opt.zero_grad(set_to_none=True)
                out = module(xb).float()
                loss = F.cross_entropy(out, torch.from_numpy(self.y[batch].astype(np.int64)).to(dev))
                index = torch.from_numpy(pos).to(dev)
                for t in soft:
                    loss = loss + job.lambda_loc * kd_loss(out, t[index], kind="kl", T=1.0)
                loss.backward()
                opt.step()
                loss_sum += float(loss.item())
                steps += 1
        return trainer.host_vector(), {"loss": loss_sum / steps, "steps": float(steps),
                                         "samples": float(samples_processed(n, spec))}
