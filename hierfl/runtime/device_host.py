"""The device host role: many virtual devices' sample indices, their persistent state and the local training loop
(one job, a fast-path group, a job method's own job and per-device evaluation)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from hierfl.core.method import JobContext, JobMethod
from hierfl.runtime.device_state import DeviceState
from hierfl.runtime.result_blocks import ResultBlocks
from hierfl.core.shared import SharedRows
from hierfl.core.work import TrainSpec
from hierfl.learn.batched import BatchedTrainer
from hierfl.learn.kept import DeviceVectors
from hierfl.learn.staging import DeviceRow, Staging
from hierfl.runtime import group_training
from hierfl.learn.chain import LinearChain
from hierfl.learn.vmapped import VmapTrainer, resolve_device
from hierfl.learn.local import LocalTrainer
from hierfl.core.device_eval import DEFAULT_SUPPORT_FRACTION, support_split

__all__ = ['DeviceHost', 'group_trainers']


from hierfl.runtime.role_common import (NONFINITE, ModelSpec, _pick, cpu_batching_of, device_of, fast_path_of, flag_nonfinite,
                                        models_of, precision_of)


def group_trainers(trainer: LocalTrainer, model: ModelSpec,
                   device: str) -> tuple[BatchedTrainer | None, VmapTrainer | None]:
    """The fast path's group trainers of a host (None, None: every job alone). Linear/ReLU chains on CPU
    in fp32: the hand-written group trainer (faster there than vmap); every other model, every model on
    CUDA and every bf16 run: torch.func's vmap (any model: batch norm and dropout included)."""
    if not fast_path_of(model):
        return None, None
    batched = BatchedTrainer.of(trainer) if device == "cpu" else None
    # on a CPU, vmap's grouped convolutions and LSTMs run slower than one job after another (measured:
    # docs/howto/batched-learning.md), so only Linear/ReLU chains are grouped there unless
    # runtime.cpu_batching asks for vmap; bf16 chains group with vmap (no hand-written bf16)
    chain = LinearChain.of(trainer.module) is not None
    if batched is None and (device != "cpu" or chain or cpu_batching_of(model) == "vmap"):
        return None, VmapTrainer(trainer, device)
    return batched, None


class DeviceHost:
    """Hosts many virtual devices: their sample indices, their persistent state and the local training loop.

    Persistent per-device state: named vectors per device that a job method keeps
    (:attr:`JobMethod.keeps_device_state <hierfl.core.method.JobMethod.keeps_device_state>`). It lives here, so a
    device always trains on its home host (Ray); it is checkpointed (:meth:`export_state`), measured
    (:meth:`state_bytes`) and reset (:meth:`reset_devices`). A device's state that was never written
    starts from :attr:`state_base` (the run's initial model until the executor says otherwise).
    """

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray], model: ModelSpec,
                 eval_sets: list[tuple[int, np.ndarray, np.ndarray | None]] | None = None) -> None:
        model_cfg, input_shape, num_classes, threads = model[:4]
        self.x = x_train
        self.y = y_train
        self.parts = parts
        self.eval_sets = list(eval_sets or [])
        self.device = resolve_device(device_of(model))
        self.configured_device = device_of(model)  # runtime.device as written (auto), for messages
        self.trainer = LocalTrainer(model_cfg, tuple(input_shape), num_classes, torch_threads=threads,
                                    device=self.device, precision=precision_of(model))
        self.states = DeviceState()  # per-device vectors the job methods keep
        self.state_base: np.ndarray | None = None  # the model devices' state starts from (set_state_base)
        self._model = (model_cfg, tuple(input_shape), int(num_classes), int(threads))
        self._input_size = int(np.prod(input_shape))
        self._method_caches: dict[type, dict[str, Any]] = {}  # what a job method keeps on this host, by its class
        # models: one trainer per architecture (a job's spec.model picks it); the first is self.trainer
        self.trainers = [self.trainer] + [LocalTrainer(cfg, tuple(input_shape), num_classes, torch_threads=threads,
                                                       device=self.device, precision=precision_of(model))
                                          for cfg in models_of(model)[1:]]
        self.num_classes = int(num_classes)
        self._y_flip: np.ndarray | None = None  # labels of label-flipping devices (made on first use)
        self._shared = SharedRows(parts, y_train, num_classes)  # a device's rows with a shared set (D_g) added
        # opt-in fast path: groups of jobs trained together (None: every job alone)
        self.batched, self.vmapped = group_trainers(self.trainer, model, self.device)
        self._dp_vmapped: VmapTrainer | None = None  # DP-SGD groups where the chain trainer groups the others
        self._blocks = ResultBlocks()  # the groups' result arrays, reused once no result refers to them
        self.model_spec = model
        # the staging state the group trainers share: model-sized host↔device crossings are counted there
        self.staging = Staging(self.device)
        for group_trainer in (self.batched, self.vmapped):
            if group_trainer is not None:
                group_trainer.staging = self.staging
        for trainer in self.trainers:  # (a device's kept optimizer state crossing is counted there too)
            trainer.transfers = self.staging.transfers
        # a job method's vectors on the training device (its kept state, the round's shared control), counted there
        self.device_vectors = DeviceVectors(self.staging)

    def train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
              control: np.ndarray | None = None, out: np.ndarray | None = None,
              resident: bool = False) -> tuple[Any, dict[str, float]]:
        """One local job of ``device`` starting from ``params``; seeded by ``seed`` only.

        With a job method (``spec.method``) the method runs the job (:meth:`JobMethod.run`), given
        ``control``, the extra vector that came with the job (a server control, targets). ``out``:
        optional array of the result's length that receives it. The device's samples are read from the host's
        arrays through its rows (never gathered into a per-job copy first). ``resident`` (the local executor): a job
        method may leave its result on the training device (:class:`~hierfl.learn.staging.DeviceRow`).
        """
        result, stats = self._train(device, seed, spec, params, control, out, resident=resident)
        if isinstance(result, DeviceRow):  # (one flag read on the device, the result stays there)
            return result, stats if result.finite() else {**stats, NONFINITE: 1.0}
        return result, flag_nonfinite(result, stats)

    def rows_of(self, device: int, spec: TrainSpec) -> np.ndarray:
        """The device's rows a job sees: all, the first ``spec.revealed`` (streaming), or with a shared set added."""
        if spec.shared is not None:
            return self._shared.rows(spec.shared, device)
        return self.parts[device] if spec.revealed is None else self.parts[device][: spec.revealed]

    def _train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
               control: np.ndarray | None, out: np.ndarray | None,
               labels: np.ndarray | None = None, resident: bool = False) -> tuple[Any, dict[str, float]]:
        if spec.attack is not None:  # (its behaviour transforms the result on the host)
            return self._train_byzantine(device, seed, spec, params, control, out)
        if spec.method is not None:
            ctx = self._context(device, seed, spec, params, control, out, labels=labels)
            ctx.keep_result = resident
            return spec.method.run(ctx)
        trainer = self.trainers[spec.model]
        y = self._shared.y_for(spec.shared, device) if labels is None else labels
        if spec.optimizer_state == "device":  # the device's optimizer state, kept here across its jobs
            kept = dict(self.states.vectors.get(device, {}))
            result = trainer.train(params, self.x, y, spec, seed, rows=self.rows_of(device, spec), out=out,
                                   opt_state=kept)
            self.states.put(device, **kept)
            return result
        return trainer.train(params, self.x, y, spec, seed, rows=self.rows_of(device, spec), out=out)

    def method_context(self, device: int, spec: TrainSpec, params: np.ndarray | None = None) -> JobContext:
        """What a job of ``spec``'s method on ``device`` would see of this host (tests, inspection)."""
        return self._context(device, 0, spec, np.zeros(0, np.float32) if params is None else params, None, None)

    def _context(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray, received: np.ndarray | None,
                 out: np.ndarray | None, method: JobMethod | None = None,
                 labels: np.ndarray | None = None, rows: np.ndarray | None = None) -> JobContext:
        """What a job method sees of this host for one job (or one evaluation) of ``device``: the labels this
        device's job reads (``labels`` when given: a label-flipping device's)."""
        kind = type(spec.method if method is None else method)
        cache = self._method_caches.setdefault(kind, {})
        y = self._shared.y_for(spec.shared, device) if labels is None else labels
        return JobContext(device=device, seed=seed, spec=spec, params=params, received=received,
                          trainer=self.trainers[spec.model], x=self.x, y=y,
                          rows=self.rows_of(device, spec) if rows is None else rows,
                          parts=self.parts, state=self.states, model=self._model, out=out, cache=cache,
                          base=self.state_base, device_vectors=self.device_vectors)

    def set_state_base(self, params: np.ndarray) -> bool:
        """From now on, a device whose state was never written starts from ``params``
        (:attr:`JobContext.base <hierfl.core.method.JobContext.base>`)."""
        self.state_base = np.asarray(params)
        return True

    def state_bytes(self) -> tuple[int, int]:
        """``(devices holding state, bytes of their state vectors)`` on this host (memory accounting)."""
        return self.states.nbytes()

    def reset_devices(self, devices: list[int]) -> bool:
        """Forget the state of ``devices`` (they start again from zeros: a device that changed aggregator)."""
        self.states.reset(devices)
        return True

    def _train_byzantine(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
                         control: np.ndarray | None, out: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        """A Byzantine device's job: trained like an honest one (on flipped labels for ``label_flip``),
        then its behaviour transforms the model part of the result (seeded by the job's seed)."""
        behavior = spec.attack
        honest = replace(spec, attack=None)
        labels = None
        if type(behavior).flips_labels:  # C − 1 − y of the labels it would read: every label moved
            own = self._shared.y_for(honest.shared, device)
            if own is self.y:  # the common case, made once (the same permutation on every host)
                if self._y_flip is None:
                    self._y_flip = (self.num_classes - 1 - self.y).astype(self.y.dtype)
                labels = self._y_flip
            else:
                labels = (self.num_classes - 1 - own).astype(own.dtype)
        result, stats = self._train(device, seed, honest, params, control, out, labels=labels)
        stats = flag_nonfinite(result, stats)
        size = self.trainer.num_params
        start = np.asarray(params, dtype=np.float32)[:size]
        rng = np.random.default_rng([seed, 0xB12])
        result[:size] = behavior.transform(result[:size], start, rng)
        return result, stats

    def evaluate_devices(self, slots: list[int], params: np.ndarray, method: JobMethod | None = None) -> np.ndarray:
        """Per-device evaluation of evaluation sets ``slots`` (indices into ``eval_sets``) with ``params``.

        Each device is tested on its held-out rows or — a held-out device — on the query part of its rows
        (:meth:`JobMethod.eval_split`); with a ``method`` that declares ``device_evaluation``, through it
        (:meth:`JobMethod.evaluate`: with the device's state kept here, given the support part of its own rows
        to adapt on). Returns ``(len(slots), 3)`` float64 rows: correct, tested samples, loss sum.
        """
        out = np.zeros((len(slots), 3), dtype=np.float64)
        for k, slot in enumerate(slots):
            device, rows, test = self.eval_sets[slot]
            if method is None:
                s_pos, q_pos = support_split(rows.size, DEFAULT_SUPPORT_FRACTION, 0, device)
            else:
                s_pos, q_pos = method.eval_split(device, rows.size)
            if test is None:
                test = rows[q_pos]
            if method is None:
                acc, loss = self.trainer.evaluate(np.asarray(params[: self.trainer.num_params]), self.x[test],
                                                  self.y[test])
            else:
                # (a held-out device has no rows of its own here: the context gets its test rows)
                ctx = self._context(device, 0, TrainSpec(method=method), params, None, None, rows=test)
                ctx.x, ctx.y = self.x[test], self.y[test]
                support = rows[s_pos]
                ctx.support = (self.x[support], self.y[support])
                acc, loss = method.evaluate(ctx)
            out[k] = (round(acc * test.size), test.size, loss * test.size)
        return out

    def train_many(self, devices: list[int], seeds: list[int], spec: TrainSpec, param_index: list[int],
                   param_rows: list[int | None], control_index: list[int] | None,
                   *param_arrays: np.ndarray, groups: list[int] | None = None) -> tuple[Any, ...]:
        """Several jobs in one call (the Ray executor's batching): results are the rows of one array.

        Job ``k`` starts from ``param_arrays[param_index[k]]`` (or its row ``param_rows[k]``), with
        the server control ``param_arrays[control_index[k]]`` when given (``-1``: none).
        Without ``groups`` each job is exactly :meth:`train`, so batching never changes a result.
        ``groups`` (fast path only): job ``k`` belongs to group ``groups[k]``; the jobs of a group
        are trained together by :meth:`train_group`, as the executor formed the group.
        """
        def start(k: int) -> np.ndarray:
            return _pick(param_arrays[param_index[k]], param_rows[k])

        # (an array of an earlier group that no result refers to any more: no fresh pages every round)
        out = self._blocks.take(len(devices), self.result_width(spec))
        stats: list[dict[str, float]] = [{} for _ in devices]

        if groups is not None:
            if spec.keeps_device_state:
                raise ValueError("jobs that keep per-device state are never trained in a group")
            if len(groups) != len(devices):
                raise ValueError(f"groups names {len(groups)} jobs, the call has {len(devices)}")
            members: dict[int, list[int]] = {}
            for k, g in enumerate(groups):
                members.setdefault(g if g >= 0 else -1 - k, []).append(k)  # g < 0: a job alone
            for ks in members.values():
                rows, st = self.train_group([devices[k] for k in ks], [seeds[k] for k in ks], spec,
                                            [start(k) for k in ks])
                out[ks] = rows
                for k, one in zip(ks, st):
                    stats[k] = one
            return out, stats
        for k, (device, seed) in enumerate(zip(devices, seeds)):
            ci = -1 if control_index is None else control_index[k]
            _, stats[k] = self.train(device, seed, spec, start(k), None if ci < 0 else param_arrays[ci], out=out[k])
        return out, stats

    def train_group(self, devices: list[int], seeds: list[int], spec: TrainSpec,
                    params: list[np.ndarray]) -> tuple[np.ndarray, list[dict[str, float]]]:
        """The jobs of one fast-path group (formed by the executor; see :mod:`hierfl.learn.batched`).

        Linear/ReLU chains on CPU in fp32 (:class:`BatchedTrainer`): the group is cut into sub-groups of
        devices with the same sample count (in order of first appearance), which run in lockstep.
        Other models, every model on CUDA and every bf16 run (:class:`VmapTrainer`): the whole group runs in
        lockstep, unequal sample counts padded and masked. On CPU a job alone in its (sub-)group,
        and without the fast path every job, is exactly :meth:`train`. Returns the results as rows
        of one array, in job order, and each job's stats (:mod:`hierfl.runtime.group_training`).
        """
        return group_training.train_group(self, devices, seeds, spec, params, resident=False)

    def train_group_resident(self, devices: list[int], seeds: list[int], spec: TrainSpec,
                             params: list[np.ndarray]) -> tuple[Any, list[dict[str, float]]]:
        """:meth:`train_group` with the results left on the training device: a
        :class:`~hierfl.learn.staging.DeviceStack` (the same bits), or the host array where jobs ran one at a
        time (the local executor's fast path; :mod:`hierfl.learn.staging`)."""
        return group_training.train_group(self, devices, seeds, spec, params, resident=True)

    def take_block(self, rows: int, spec: TrainSpec) -> np.ndarray:
        """A ``(rows, result width)`` float32 array for a group's results that no earlier result refers to."""
        return self._blocks.take(rows, self.result_width(spec))

    def labels_of(self, spec: TrainSpec, device: int) -> np.ndarray:
        """The labels a job of ``spec`` on ``device`` reads."""
        return self._shared.y_for(spec.shared, device)

    def result_width(self, spec: TrainSpec) -> int:
        """Length of one job's result: its model's parameters, or what its job method returns
        (:meth:`JobMethod.result_width`)."""
        num_params = self.trainers[spec.model].num_params
        if spec.method is None:
            return num_params
        return spec.method.result_width(num_params, self.num_classes, self._input_size)

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True

    def pid(self) -> int:
        """The hosting process's id (operations and fault-injection tests)."""
        return os.getpid()

    def export_state(self) -> dict[int, dict[str, np.ndarray]]:
        """The persistent per-device state (device → named vectors), for a checkpoint."""
        return self.states.export()

    def import_state(self, states: dict[int, Any]) -> bool:
        """Take over per-device state from a checkpoint (:meth:`DeviceState.merge`)."""
        self.states.merge(states)
        return True

    def warmup(self, spec: TrainSpec, params: np.ndarray) -> bool:
        """Run one short throw-away job: the first job of a process pays torch's lazy start-up
        (about a second), which belongs to start-up time, not to the first emulated round."""
        short = TrainSpec(epochs=None, steps=2, batch_size=spec.batch_size, lr=spec.lr,
                          momentum=spec.momentum, weight_decay=spec.weight_decay, optimizer=spec.optimizer,
                          nesterov=spec.nesterov, betas=spec.betas, eps=spec.eps)
        params = np.asarray(params)[: self.trainer.num_params]  # (a vector with values behind the model: the model)
        self.train(0, 0, short, params)
        if self.batched is not None or self.vmapped is not None:  # the batched kernels' first call, too
            self.train_group([0, 0], [0, 1], short, [params, params])
        return True
