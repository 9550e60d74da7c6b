"""Role logic as plain classes: device hosts, leaders and the cloud.

Actors are thin: :mod:`hierfl.runtime.ray_cluster` applies ``ray.remote`` to these classes in
one place, and :class:`~hierfl.runtime.executor.LocalExecutor` calls them directly. Parameters
are one contiguous float32 vector per model; aggregation is vector arithmetic.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from typing import Any

import numpy as np

from hierfl.core.aggregate import WeightedSum, linear_combination
from hierfl.core.method import JobContext, JobMethod
from hierfl.runtime.device_state import DeviceState
from hierfl.core.serveropt import OptState
from hierfl.core.shared import SharedRows
from hierfl.core.work import TrainSpec
from hierfl.learn.batched import BatchedTrainer
from hierfl.learn.chain import LinearChain
from hierfl.learn.vmapped import VmapTrainer, resolve_device
from hierfl.learn.local import LocalTrainer
from hierfl.learn.personal import DEFAULT_QUERY_FRACTION, Personaliser
from hierfl.core.personal import PersonalSpec, support_split
from hierfl.learn.serveropt import ServerOptimizerConfig

__all__ = ["DeviceHost", "LeaderHost", "Cloud", "ModelSpec", "Aggregation", "average_rows", "combine_packed",
           "delta_packed", "device_of", "fast_path_of", "models_of", "precision_of", "cpu_batching_of", "NONFINITE", "flag_nonfinite"]

ModelSpec = tuple[Any, ...]
"""(model config, input shape, number of classes, torch threads[, fast path[, device[, precision[, CPU batching]]]]).

The optional fifth element (``runtime.fast_path``, default ``False``) turns on the opt-in batched
fast path: executors group jobs and hosts train a group's jobs together (``logreg``/``mlp`` on CPU:
:mod:`hierfl.learn.batched`; every other model, and every model on CUDA: :mod:`hierfl.learn.vmapped`);
the numbers then differ from the one-job-at-a-time path within float tolerance. The optional sixth
(``runtime.device``: ``cpu``, ``cuda`` or ``auto``, default ``cpu``) is the torch device of batched
training and evaluation, resolved in each host's own process. The optional seventh
(``runtime.precision``: ``fp32`` or ``bf16``, default ``fp32``) is the precision of every forward
pass, one job, a group or an evaluation (:mod:`hierfl.learn.precision`). The optional eighth
(``runtime.cpu_batching``: ``auto`` or ``vmap``, default ``auto``) says which models a CPU host
trains in groups: ``auto`` only Linear/ReLU chains, every other model job by job. The optional ninth
(``models:``) is the tuple of the run's further model configs: a job whose ``spec.model`` is ``k >= 1``
runs the ``k``-th of them (model 0 is the first element).
"""


def models_of(model: ModelSpec) -> tuple[Any, ...]:
    """Every model config of a :data:`ModelSpec`: the first element, then the optional ninth's."""
    return (model[0], *(model[8] if len(model) > 8 and model[8] else ()))


def fast_path_of(model: ModelSpec) -> bool:
    """Whether a :data:`ModelSpec` turns the batched fast path on (its optional fifth element)."""
    return bool(model[4]) if len(model) > 4 else False


def device_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.device`` (its optional sixth element; ``cpu`` without one)."""
    return str(model[5]) if len(model) > 5 and model[5] else "cpu"


def cpu_batching_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.cpu_batching`` (its optional eighth element; ``auto`` without one)."""
    return str(model[7]) if len(model) > 7 and model[7] else "auto"


def precision_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.precision`` (its optional seventh element; ``fp32`` without one)."""
    return str(model[6]) if len(model) > 6 and model[6] else "fp32"


NONFINITE = "nonfinite"
"""Key of a job's stats set (to 1.0) when its result holds NaN or Inf; absent otherwise."""


def flag_nonfinite(result: np.ndarray, stats: dict[str, float]) -> dict[str, float]:
    """Mark ``stats`` when ``result`` is not finite: one ``isfinite`` pass per update, on the host that
    made it (the driver never downloads an update; it reads the flag with the stats it waits for).
    The key is added only when set, so finite runs' outputs are unchanged."""
    if not np.isfinite(result).all():
        stats = dict(stats)
        stats[NONFINITE] = 1.0
    return stats


def _pick(array: np.ndarray, row: int | None) -> np.ndarray:
    """A whole vector, or one row (zero-copy view) of a batch of results."""
    return array if row is None else array[row]


def average_rows(weights: list[float], index: list[int], rows: list[int | None],
                 *arrays: np.ndarray) -> np.ndarray:
    """Weighted average of model ``k`` = ``arrays[index[k]]`` (row ``rows[k]``), summed in the given order."""
    acc = WeightedSum()
    for k, w in enumerate(weights):
        acc.add(_pick(arrays[index[k]], rows[k]), w)
    return acc.result()

def combine_packed(coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                   minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
    """:func:`~hierfl.core.aggregate.linear_combination` of packed terms: term ``j`` is
    ``coefs[j] · (arrays[plus[j]] − arrays[minus[j]])`` (rows picked; ``minus[j] < 0``: no subtrahend)."""
    # (_pick inline: one term per update of an asynchronous aggregation)
    terms = [(c, arrays[p] if pr is None else arrays[p][pr],
              None if m < 0 else arrays[m] if mr is None else arrays[m][mr])
             for c, p, pr, m, mr in zip(coefs, plus, plus_rows, minus, minus_rows)]
    return linear_combination(terms)


def delta_packed(coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                 minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
    """Like :func:`combine_packed`, in float64: the delta a server optimizer steps with."""
    terms = [(c, _pick(arrays[p], pr), None if m < 0 else _pick(arrays[m], mr))
             for c, p, pr, m, mr in zip(coefs, plus, plus_rows, minus, minus_rows)]
    return linear_combination(terms, dtype=np.float64)


class Aggregation:
    """One aggregator's (a leader's or the cloud's) running state.

    * the weighted sum of the models arriving in this round (float64, in arrival order);
    * SCAFFOLD: the sum ``Σ κ_i Δc_i`` of the control deltas that came with them (float64) —
      an update with a ``control_coef`` is a packed ``[model; Δc]`` vector of twice the length;
    * the server optimizer's state (docs/explanation/algorithms.md §5.7), kept across rounds;
    * with a robust ``rule`` (``aggregation:`` set, or attacks on): the updates themselves, kept
      until the commit, where the rule combines them (:mod:`hierfl.robust.rules`), and one report
      per commit (accepted / rejected, honest / Byzantine, distance from the honest mean).
    """

    def __init__(self, rule: Any = None) -> None:
        self.pending: WeightedSum | None = None
        self.control_sum: np.ndarray | None = None
        self.opt_state = OptState()
        self.rule = rule
        self._rows: list[np.ndarray] = []
        self._weights: list[float] = []
        self._tags: list[Any] = []
        self.reports: list[dict[str, Any]] = []

    def add(self, vector: np.ndarray, weight: float, control_coef: float | None = None, tag: Any = None) -> None:
        """Fold in one update (a packed ``[model; Δc]`` when ``control_coef`` is given).

        ``tag`` (robust aggregation only): None for an honest update, else ``(source, behaviour
        name, ALIE z or None)`` of a Byzantine one.
        """
        vec = np.asarray(vector)
        if control_coef is not None:
            half = vec.shape[0] // 2
            if vec.shape[0] != 2 * half:
                raise ValueError(f"a SCAFFOLD update is [model; control delta], got an odd length {vec.shape[0]}")
            dc = vec[half:].astype(np.float64) * float(control_coef)
            self.control_sum = dc if self.control_sum is None else self.control_sum + dc
            vec = vec[:half]
        if self.rule is not None:
            self._rows.append(vec)
            self._weights.append(float(weight))
            self._tags.append(tag)
            return
        if self.pending is None:
            self.pending = WeightedSum()
        self.pending.add(vec, weight)

    def _robust(self, base: np.ndarray | None, loss: Any, tier: str, entity: int) -> np.ndarray:
        """The rule's aggregate of the kept updates (float32) and its report."""
        from hierfl.robust.math import alie_vector, finite_rows

        if not self._rows:
            raise ValueError("aggregation with no update")
        V = np.stack([np.asarray(r, dtype=np.float64) for r in self._rows])
        w = np.asarray(self._weights, dtype=np.float64)
        tags = self._tags
        self._rows, self._weights, self._tags = [], [], []
        byz = np.array([t is not None for t in tags])
        honest = ~byz
        honest_mean = None
        if honest.any() and w[honest].sum() > 0:
            honest_mean = (w[honest] @ V[honest]) / w[honest].sum()
        alie = [i for i, t in enumerate(tags) if t is not None and t[2] is not None]
        if alie:  # colluders send μ − zσ of the honest updates (their own when none is honest)
            ref = V[honest] if honest.any() else V[alie]
            vec = alie_vector(ref, float(tags[alie[0]][2])).astype(np.float32).astype(np.float64)
            V[alie] = vec
        m = V.shape[0]
        accepted = np.zeros(m, dtype=bool)
        finite = np.ones(m, dtype=bool) if self.rule.is_mean else finite_rows(V)
        clipped = 0
        if finite.any():
            out = self.rule.apply(V[finite], w[finite], base, loss)
            accepted[np.flatnonzero(finite)[out.accepted]] = True
            agg, clipped = out.aggregate, out.clipped
        else:  # nothing usable: the model stays where the round started
            agg = np.asarray(base, dtype=np.float64) if base is not None else np.full(V.shape[1], np.nan)
        dist = None if honest_mean is None else float(np.linalg.norm(agg - honest_mean))
        self.reports.append({
            "tier": tier, "entity": int(entity), "rule": self.rule.name, "m": int(m),
            "accepted": int(accepted.sum()), "rejected": int(m - accepted.sum()),
            "rejected_nonfinite": int((~finite).sum()), "clipped": int(clipped),
            "honest": int(honest.sum()), "malicious": int(byz.sum()),
            "malicious_accepted": int((byz & accepted).sum()), "honest_rejected": int((honest & ~accepted).sum()),
            "rejected_ids": [int(i) for i in np.flatnonzero(~accepted)],
            "dist_honest_mean": dist if dist is None or np.isfinite(dist) else None,
        })
        return np.asarray(agg.astype(np.float32))

    def finish(self, opt: ServerOptimizerConfig | None, base: np.ndarray | None, loss: Any = None,
               tier: str = "cloud", entity: int = 0) -> np.ndarray:
        """End the round: the weighted average (or the robust rule's aggregate), or ``opt`` stepped from
        ``base`` with ``Δ = aggregate − base``."""
        if self.rule is not None:
            count = len(self._rows)
            avg = self._robust(base, loss, tier, entity)
        else:
            if self.pending is None:
                raise ValueError("aggregation with no update")
            count = self.pending.count
            avg, self.pending = self.pending.result(), None
        if opt is None:
            return avg  # plain averaging: the average itself, bit for bit
        # a server optimizer, or a round rule that needs the round's size too (FedDC's drift); a rule that
        # keeps its aggregator's own control (FedDC's edge c_e) takes the round's control sum
        out = opt.round_step(base, avg, count, self.opt_state)
        if opt.take_control(self.control_sum, self.opt_state):
            self.control_sum = None
        return out

    def take_reports(self) -> list[dict[str, Any]]:
        """The robust-aggregation reports since the last call."""
        out, self.reports = self.reports, []
        return out

    def take_control(self, size: int) -> np.ndarray:
        """``Σ κ_i Δc_i`` since the last call (zeros if none), as float32; resets it."""
        out = np.zeros(size, dtype=np.float32) if self.control_sum is None else self.control_sum.astype(np.float32)
        self.control_sum = None
        return out


def robust_step(rule: Any, opt: ServerOptimizerConfig | None, state: OptState, coefs: list[float],
                plus: list[np.ndarray], minus: list[np.ndarray | None], tags: list[Any], base: np.ndarray,
                tier: str, entity: int, reports: list[dict[str, Any]]) -> np.ndarray:
    """A buffer / queue step under a robust rule: the rule combines the deltas ``a_i − b_i`` (weights
    ``c_i``) into ``d``; the step is ``Δ = (Σ c_i)·d``, added to ``base`` (or stepped by ``opt``). Under the
    mean this is exactly ``Σ c_i (a_i − b_i)``, the protocols' own step."""
    agg = Aggregation(rule)
    size = base.shape[0]
    for c, a, b, tag in zip(coefs, plus, minus, tags):
        d = np.asarray(a, dtype=np.float64) - (0.0 if b is None else np.asarray(b, dtype=np.float64))
        agg.add(d, abs(float(c)), None, tag)
    d_rule = agg.finish(None, np.zeros(size, dtype=np.float32), tier=tier, entity=entity).astype(np.float64)
    reports.extend(agg.take_reports())
    delta = float(sum(coefs)) * d_rule
    if opt is not None:
        return opt.step(base, delta, state)
    return (np.asarray(base, dtype=np.float64) + delta).astype(np.float32)


def group_trainers(trainer: LocalTrainer, model: ModelSpec,
                   device: str) -> tuple[BatchedTrainer | None, VmapTrainer | None]:
    """The fast path's group trainers of a host (None, None: every job alone). Linear/ReLU chains on CPU
    in fp32: the hand-written group trainer (faster there than vmap); every other model, every model on
    CUDA and every bf16 run: torch.func's vmap (refuses batch norm, dropout, buffers)."""
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
    (:meth:`state_bytes`) and reset (:meth:`reset_devices`).

    Personalised jobs keep none here: the executor keeps their local layers (:meth:`train_personal`).
    """

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, parts: list[np.ndarray], model: ModelSpec,
                 eval_sets: list[tuple[int, np.ndarray, np.ndarray | None]] | None = None) -> None:
        model_cfg, input_shape, num_classes, threads = model[:4]
        self.x = x_train
        self.y = y_train
        self.parts = parts
        self.eval_sets = list(eval_sets or [])
        self.device = resolve_device(device_of(model))
        self.trainer = LocalTrainer(model_cfg, tuple(input_shape), num_classes, torch_threads=threads,
                                    device=self.device, precision=precision_of(model))
        self.states = DeviceState()  # per-device vectors the job methods keep
        self._model = (model_cfg, tuple(input_shape), int(num_classes), int(threads))
        self._input_size = int(np.prod(input_shape))
        self._method_caches: dict[type, dict[str, Any]] = {}  # what a job method keeps on this host, by its class
        # models: one trainer per architecture (a job's spec.model picks it); the first is self.trainer
        self.trainers = [self.trainer] + [LocalTrainer(cfg, tuple(input_shape), num_classes, torch_threads=threads,
                                                       device=self.device, precision=precision_of(model))
                                          for cfg in models_of(model)[1:]]
        self.num_classes = int(num_classes)
        self._y_flip: np.ndarray | None = None  # labels of label-flipping devices (made on first use)
        self._personalisers: dict[PersonalSpec, Personaliser] = {}
        self._shared = SharedRows(parts, y_train, num_classes)  # a device's rows with a shared set (BGFL's D_g) added
        # opt-in fast path: groups of jobs trained together (None: every job alone)
        self.batched, self.vmapped = group_trainers(self.trainer, model, self.device)

    def train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
              control: np.ndarray | None = None, out: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """One local job of ``device`` starting from ``params``; seeded by ``seed`` only.

        With a job method (``spec.method``) the method runs the job (:meth:`JobMethod.run`), given
        ``control``, the extra vector that came with the job (a server control, targets). ``out``:
        optional array of the result's length that receives it. The device's samples are read from the host's
        arrays through its rows (never gathered into a per-job copy first).
        """
        result, stats = self._train(device, seed, spec, params, control, out)
        return result, flag_nonfinite(result, stats)

    def _rows(self, device: int, spec: TrainSpec) -> np.ndarray:
        """The device's rows a job sees: all, the first ``spec.revealed`` (streaming), or with a shared set added."""
        if spec.shared is not None:
            return self._shared.rows(spec.shared, device)
        return self.parts[device] if spec.revealed is None else self.parts[device][: spec.revealed]

    def _train(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
               control: np.ndarray | None, out: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
        if spec.attack is not None:
            return self._train_byzantine(device, seed, spec, params, control, out)
        if spec.method is not None:
            return spec.method.run(self._context(device, seed, spec, params, control, out))
        trainer = self.trainers[spec.model]
        return trainer.train(params, self.x, self._shared.y_for(spec.shared, device), spec, seed,
                             rows=self._rows(device, spec), out=out)

    def method_context(self, device: int, spec: TrainSpec, params: np.ndarray | None = None) -> JobContext:
        """What a job of ``spec``'s method on ``device`` would see of this host (tests, inspection)."""
        return self._context(device, 0, spec, np.zeros(0, np.float32) if params is None else params, None, None)

    def _context(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray, received: np.ndarray | None,
                 out: np.ndarray | None, method: JobMethod | None = None) -> JobContext:
        """What a job method sees of this host for one job (or one evaluation) of ``device``."""
        kind = type(spec.method if method is None else method)
        cache = self._method_caches.setdefault(kind, {})
        return JobContext(device=device, seed=seed, spec=spec, params=params, received=received,
                          trainer=self.trainers[spec.model], x=self.x, y=self.y, rows=self._rows(device, spec),
                          parts=self.parts, state=self.states, model=self._model, out=out, cache=cache)

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
        y = self.y
        if type(behavior).flips_labels:
            if self._y_flip is None:  # C − 1 − y: every label moved, the same permutation on every host
                self._y_flip = (self.num_classes - 1 - self.y).astype(self.y.dtype)
            y, self.y = self.y, self._y_flip
        try:
            result, stats = self.train(device, seed, honest, params, control, out)
        finally:
            self.y = y
        size = self.trainer.num_params
        start = np.asarray(params, dtype=np.float32)[:size]
        rng = np.random.default_rng([seed, 0xB12])
        result[:size] = behavior.transform(result[:size], start, rng)
        return result, stats

    def personaliser(self, spec: PersonalSpec) -> Personaliser:
        """The (cached) runner of ``spec`` on this host's model."""
        pz = self._personalisers.get(spec)
        if pz is None:
            pz = self._personalisers[spec] = Personaliser(self.trainer, spec)
        return pz

    def train_personal(self, device: int, seed: int, spec: TrainSpec, params: np.ndarray,
                       state: np.ndarray | None) -> tuple[np.ndarray, dict[str, float], np.ndarray]:
        """One personalised job: ``(global update, stats, new device state)``; ``state`` is the device's
        state or, for its first job, the initial global vector (see :class:`Personaliser`)."""
        assert spec.personal is not None
        return self.personaliser(spec.personal).train(device, params, self.x, self.y, self._rows(device, spec),
                                                      spec, seed, state)

    def evaluate_devices(self, personal: PersonalSpec | None, slots: list[int], state_index: list[int],
                         state_rows: list[int | None], params: np.ndarray, *arrays: np.ndarray,
                         method: JobMethod | None = None) -> np.ndarray:
        """Per-device evaluation of evaluation sets ``slots`` (indices into ``eval_sets``) with ``params``.

        Each device is tested with its personalised model (:meth:`Personaliser.adapted`; state ``k``
        is ``arrays[state_index[k]]``, row ``state_rows[k]``, or none with index ``-1``) on its held-out
        rows, or — a held-out device — adapted on the support part of its rows and tested on the
        query part; with a ``method`` that declares ``device_evaluation``, through it (:meth:`JobMethod.evaluate`:
        a device's own offset, kept here). Returns ``(len(slots), 3)`` float64
        rows: correct, tested samples, loss sum.
        """
        out = np.zeros((len(slots), 3), dtype=np.float64)
        pz = None if personal is None else self.personaliser(personal)
        fraction = DEFAULT_QUERY_FRACTION if personal is None else personal.support_fraction
        split_seed = 0 if personal is None else personal.split_seed
        for k, slot in enumerate(slots):
            device, rows, test = self.eval_sets[slot]
            s_pos, q_pos = support_split(rows.size, fraction, split_seed, device)
            if test is None:
                test = rows[q_pos]
            if pz is None:
                theta = np.asarray(params[: self.trainer.num_params])
            else:
                state = None if state_index[k] < 0 else _pick(arrays[state_index[k]], state_rows[k])
                theta = pz.adapted(device, params, state, self.x, self.y, rows[s_pos])
            if method is None:
                acc, loss = self.trainer.evaluate(theta, self.x[test], self.y[test])
            else:
                ctx = self._context(device, 0, TrainSpec(method=method), params, None, None)
                ctx.x, ctx.y = self.x[test], self.y[test]
                acc, loss = method.evaluate(ctx)
            out[k] = (round(acc * test.size), test.size, loss * test.size)
        return out

    def train_many(self, devices: list[int], seeds: list[int], spec: TrainSpec, param_index: list[int],
                   param_rows: list[int | None], control_index: list[int] | None,
                   *param_arrays: np.ndarray, groups: list[int] | None = None,
                   state_index: list[int] | None = None, state_rows: list[int | None] | None = None
                   ) -> tuple[Any, ...]:
        """Several jobs in one call (the Ray executor's batching): results are the rows of one array.

        Job ``k`` starts from ``param_arrays[param_index[k]]`` (or its row ``param_rows[k]``), with
        the server control ``param_arrays[control_index[k]]`` when given (``-1``: none).
        Without ``groups`` each job is exactly :meth:`train`, so batching never changes a result.
        Personalised jobs (``spec.personal``) are :meth:`train_personal` with state
        ``param_arrays[state_index[k]]`` (row ``state_rows[k]``); the call then returns a third
        array, the new states as rows.
        ``groups`` (fast path only): job ``k`` belongs to group ``groups[k]``; the jobs of a group
        are trained together by :meth:`train_group`, as the executor formed the group.
        """
        def start(k: int) -> np.ndarray:
            return _pick(param_arrays[param_index[k]], param_rows[k])

        if spec.personal is not None:
            if state_index is None or state_rows is None:
                raise ValueError("personalised jobs need their devices' states")
            results = [self.train_personal(device, seed, spec, start(k),
                                           None if state_index[k] < 0 else _pick(param_arrays[state_index[k]],
                                                                                 state_rows[k]))
                       for k, (device, seed) in enumerate(zip(devices, seeds))]
            return (np.stack([r[0] for r in results]), [r[1] for r in results],
                    np.stack([r[2] for r in results]))
        out = np.empty((len(devices), self.result_width(spec)), dtype=np.float32)
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
        of one array, in job order, and each job's stats.
        """
        out = np.empty((len(devices), self.result_width(spec)), dtype=np.float32)
        stats: list[dict[str, float]] = [{} for _ in devices]
        if ((self.batched is None and self.vmapped is None) or spec.method is not None or spec.attack is not None
                or spec.model or spec.clip_norm is not None or spec.frozen or spec.align is not None):
            # (the group trainers hold model 0's plain training only, and clip or freeze no gradients; a job
            # method's job runs alone)
            for k, (device, seed) in enumerate(zip(devices, seeds)):
                _, stats[k] = self.train(device, seed, spec, params[k], out=out[k])
            return out, stats
        # each job reads its own labels (a shared dataset with malicious sharers shows their shares flipped to all
        # but themselves), so jobs reading different label arrays never share a (sub-)group
        labels = [self._shared.y_for(spec.shared, device) for device in devices]
        by_key: dict[tuple[int, int], list[int]] = {}
        for k, device in enumerate(devices):
            # the CPU batched trainer runs devices of equal sample count in lockstep; the vmap trainer pads
            size = int(self._rows(device, spec).size) if self.batched is not None else 0
            by_key.setdefault((size, id(labels[k])), []).append(k)
        subgroups: list[list[int]] = list(by_key.values())
        for ks in subgroups:
            if len(ks) == 1 and self.device == "cpu":
                k = ks[0]
                _, stats[k] = self.train(devices[k], seeds[k], spec, params[k], out=out[k])
                continue
            rows = np.empty((len(ks), out.shape[1]), dtype=np.float32)
            trainer: Any = self.batched if self.batched is not None else self.vmapped
            st = trainer.train_group([params[k] for k in ks], self.x, labels[ks[0]],
                                     [self._rows(devices[k], spec) for k in ks], spec, [seeds[k] for k in ks], rows)
            out[ks] = rows
            for j, (k, one) in enumerate(zip(ks, st)):
                stats[k] = flag_nonfinite(rows[j], one)
        return out, stats

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
                          momentum=spec.momentum, weight_decay=spec.weight_decay)
        params = np.asarray(params)[: self.trainer.num_params]  # Meta-SGD's [θ; α]: θ
        self.train(0, 0, short, params)
        if self.batched is not None or self.vmapped is not None:  # the batched kernels' first call, too
            self.train_group([0, 0], [0, 1], short, [params, params])
        return True


class LeaderHost:
    """Hosts the models of one or more leaders (edge servers) and aggregates their groups."""

    def __init__(self, robust: Any = None) -> None:
        self.models: dict[int, np.ndarray] = {}
        self.versions: dict[int, int] = {}
        self._agg: dict[int, Aggregation] = {}
        self.robust = robust  # a hierfl.robust.config.RobustSetup, or None (plain averaging)

    def _at(self, leader: int) -> Aggregation:
        agg = self._agg.get(leader)
        if agg is None:
            agg = self._agg[leader] = Aggregation(None if self.robust is None else self.robust.edge)
        return agg

    def add(self, leader: int, weight: float, vector: np.ndarray, control_coef: float | None = None,
            tag: Any = None) -> None:
        """Fold one arriving update into the leader's running weighted sum (packed ``[y; Δc]`` with a coef)."""
        self._at(leader).add(vector, weight, control_coef, tag)

    def add_many(self, leaders: list[int], weights: list[float], index: list[int], rows: list[int | None],
                 coefs: list[float | None], *arrays: np.ndarray, tags: list[Any] | None = None) -> None:
        """Several :meth:`add` calls in one, in order: update ``k`` is ``arrays[index[k]]`` (row ``rows[k]``)."""
        for k, (leader, w) in enumerate(zip(leaders, weights)):
            self.add(leader, w, _pick(arrays[index[k]], rows[k]), coefs[k], None if tags is None else tags[k])

    def take_reports(self) -> list[dict[str, Any]]:
        """The robust-aggregation reports of every leader since the last call (leader order)."""
        return [r for leader in sorted(self._agg) for r in self._agg[leader].take_reports()]

    def robust_combine(self, leader: int, opt: ServerOptimizerConfig | None, coefs: list[float], plus: list[int],
                       plus_rows: list[int | None], minus: list[int], minus_rows: list[int | None], tags: list[Any],
                       *arrays: np.ndarray) -> np.ndarray:
        """A leader's queue step under its robust rule (``arrays[0]``: the leader's model)."""
        agg = self._at(leader)
        return robust_step(self.robust.edge, opt, agg.opt_state, coefs,
                           [_pick(arrays[p], r) for p, r in zip(plus, plus_rows)],
                           [None if m < 0 else _pick(arrays[m], r) for m, r in zip(minus, minus_rows)], tags,
                           arrays[0], "edge", leader, agg.reports)

    def commit(self, leader: int, opt: ServerOptimizerConfig | None = None, base: np.ndarray | None = None,
               pack_control: bool = False) -> np.ndarray:
        """Finish the aggregation: the weighted average (or ``opt``'s step from ``base``) becomes the leader's model.

        ``pack_control``: return ``[model; Σ κ_i Δc_i]`` (the SCAFFOLD control deltas gathered
        since the last upload, relayed to the cloud) instead of the model alone.
        """
        agg = self._at(leader)
        previous = self.models.get(leader)
        model = agg.finish(opt, base, tier="edge", entity=leader)
        behavior = None if self.robust is None else self.robust.edge_behaviors.get(leader)
        if behavior is not None:  # a compromised edge server: its behaviour acts on the edge round's step
            start = base if base is not None else previous
            if start is not None:
                rng = np.random.default_rng([leader, self.versions.get(leader, 0), 0xED6E])
                model = behavior.transform(model, np.asarray(start, dtype=np.float32), rng)
        self.models[leader] = model
        self.versions[leader] = self.versions.get(leader, 0) + 1
        if pack_control:
            return np.concatenate([model, agg.take_control(model.size)])
        return model

    def get_control(self, leader: int) -> np.ndarray | None:
        """The leader's own control ``c_e`` (FedDC with an edge-scoped control), None before its first round."""
        return self._at(leader).opt_state.control

    def server_step(self, leader: int, opt: ServerOptimizerConfig, coefs: list[float], plus: list[int],
                    plus_rows: list[int | None], minus: list[int], minus_rows: list[int | None],
                    *arrays: np.ndarray) -> np.ndarray:
        """``opt`` steps ``arrays[0]`` (the leader's model) with ``Δ = Σ c·(a − b)`` (an asynchronous leader step)."""
        delta = delta_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)
        return opt.step(arrays[0], delta, self._at(leader).opt_state)

    def combine(self, coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
        """A leader's asynchronous step (queue aggregation, rebase): see :func:`combine_packed`."""
        return combine_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True

    def pid(self) -> int:
        """The hosting process's id (operations and fault-injection tests)."""
        return os.getpid()

    def export_state(self) -> dict[str, Any]:
        """Models, versions and running aggregations (partial sums, optimizer moments), for a checkpoint."""
        return copy.deepcopy({"models": self.models, "versions": self.versions, "agg": self._agg})

    def import_state(self, state: dict[str, Any]) -> bool:
        """Take over :meth:`export_state`'s value: the aggregations go on bit for bit."""
        state = copy.deepcopy(state)
        self.models, self.versions, self._agg = state["models"], state["versions"], state["agg"]
        return True


class ServerWork:
    """The cloud role's torch side: one evaluator per architecture of the run, made on first use (aggregation
    is numpy only, so a cloud that never evaluates, as under the Ray executor, never imports torch: about
    0.2 GB and 1.6 CPU s less), and the server tasks of every server point with what each point keeps
    (:mod:`hierfl.learn.server_tasks`)."""

    def __init__(self, model: ModelSpec, public: tuple[np.ndarray, np.ndarray] | None) -> None:
        _, input_shape, num_classes, threads = model[:4]
        self._spec = (tuple(input_shape), int(num_classes), threads, device_of(model), precision_of(model))
        self._models = models_of(model)
        self._trainers: dict[int, LocalTrainer] = {}
        self._flops: dict[int, float] = {}
        self.public = public
        self.state: dict[tuple[str, int], dict[str, np.ndarray]] = {}

    def trainer_of(self, model: int = 0) -> LocalTrainer:
        """The trainer of the run's architecture ``model`` (0: ``model``; ``models:`` the others)."""
        if model not in self._trainers:
            input_shape, num_classes, threads, device, precision = self._spec
            self._trainers[model] = LocalTrainer(self._models[model], input_shape, num_classes, torch_threads=threads,
                                                 device=resolve_device(device), precision=precision)
        return self._trainers[model]

    def forward_flops(self, model: int = 0) -> float:
        """FLOPs of one sample's forward pass through architecture ``model``."""
        if model not in self._flops:
            from hierfl.learn.local import forward_flops  # noqa: PLC0415 (torch: only server tasks need it)

            self._flops[model] = float(forward_flops(self._models[model], *self._spec[:2]))
        return self._flops[model]

    def run(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
            inputs: list[np.ndarray]) -> tuple[list[np.ndarray], float, dict[str, float], int]:
        """Run the server task ``name`` for the point ``(tier, entity)`` with a generator seeded by ``seed``:
        ``(outputs, flops, stats, bytes the point keeps)``."""
        from hierfl.learn.server_tasks import ServerContext, get_task, state_bytes  # noqa: PLC0415

        task = get_task(name)
        state = self.state.setdefault((tier, int(entity)), {})
        ctx = ServerContext(tier, int(entity), self._spec[0], self._spec[1], self.public, state, self.trainer_of,
                            self.forward_flops)
        result = task(ctx, [np.asarray(x, dtype=np.float32) for x in inputs], dict(params),
                      np.random.default_rng(seed))
        outputs = [np.ascontiguousarray(o, dtype=np.float32) for o in result.outputs]
        return outputs, float(result.flops), {k: float(v) for k, v in result.stats.items()}, state_bytes(state)


class Cloud:
    """The global model, its aggregation and its evaluation on the held-out test set."""

    def __init__(self, init_params: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, model: ModelSpec,
                 robust: Any = None, public: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.model = np.asarray(init_params, dtype=np.float32)
        self.version = 0
        self.robust = robust  # a hierfl.robust.config.RobustSetup, or None (plain averaging)
        self._agg = Aggregation(None if robust is None else robust.cloud)
        self.control = np.zeros_like(self.model)  # SCAFFOLD's server control c (zeros until used)
        self.x_test = x_test
        self.y_test = y_test
        # the evaluators (made on first use) and the server tasks' work (hierfl.learn.server_tasks)
        self.work = ServerWork(model, public)

    def add(self, weight: float, vector: np.ndarray, control_coef: float | None = None, tag: Any = None) -> None:
        """Fold one arriving model into the running weighted sum (packed ``[model; Δc]`` with a coef)."""
        self._agg.add(vector, weight, control_coef, tag)

    def add_many(self, weights: list[float], index: list[int], rows: list[int | None], coefs: list[float | None],
                 *arrays: np.ndarray, tags: list[Any] | None = None) -> None:
        """Several :meth:`add` calls in one, in order: update ``k`` is ``arrays[index[k]]`` (row ``rows[k]``)."""
        for k, w in enumerate(weights):
            self.add(w, _pick(arrays[index[k]], rows[k]), coefs[k], None if tags is None else tags[k])

    def add_many_commit(self, weights: list[float], index: list[int], rows: list[int | None],
                        coefs: list[float | None], opt: ServerOptimizerConfig | None, base: int,
                        *arrays: np.ndarray, tags: list[Any] | None = None) -> np.ndarray:
        """The last fold-ins and the commit in one call (one actor round trip less per round);
        ``base`` indexes ``arrays`` (``-1``: none)."""
        self.add_many(weights, index, rows, coefs, *arrays, tags=tags)
        return self.commit(opt, None if base < 0 else arrays[base])

    def _validation_loss(self, params: np.ndarray) -> float:
        """Loss on the first ``validation`` test samples (Zeno's server-side batch)."""
        k = int(self.robust.validation) if self.robust is not None else 0
        if k <= 0:
            raise ValueError("no validation batch configured")
        return float(self.work.trainer_of(0).evaluate(np.asarray(params, dtype=np.float32), self.x_test[:k], self.y_test[:k])[1])

    def take_reports(self) -> list[dict[str, Any]]:
        """The robust-aggregation reports since the last call."""
        return self._agg.take_reports()

    def robust_combine(self, opt: ServerOptimizerConfig | None, coefs: list[float], plus: list[int],
                       plus_rows: list[int | None], minus: list[int], minus_rows: list[int | None], tags: list[Any],
                       *arrays: np.ndarray) -> np.ndarray:
        """The cloud's buffer / queue step under its robust rule (``arrays[0]``: the global model)."""
        return robust_step(self.robust.cloud, opt, self._agg.opt_state, coefs,
                           [_pick(arrays[p], r) for p, r in zip(plus, plus_rows)],
                           [None if m < 0 else _pick(arrays[m], r) for m, r in zip(minus, minus_rows)], tags,
                           arrays[0], "cloud", 0, self._agg.reports)

    def robust_average(self, tier: str, entity: int, weights: list[float], index: list[int], rows: list[int | None],
                       tags: list[Any], base: int, *arrays: np.ndarray) -> np.ndarray:
        """The ``tier`` rule's aggregate of models ``arrays[index[k]]`` (a FedCH cluster round, formed here as
        :meth:`average` is); ``base`` indexes the round's start model (``-1``: none)."""
        agg = Aggregation(self.robust.rule(tier))
        for k, w in enumerate(weights):
            agg.add(_pick(arrays[index[k]], rows[k]), w, None, tags[k])
        out = agg.finish(None, None if base < 0 else arrays[base], tier=tier, entity=entity)
        self._agg.reports.extend(agg.take_reports())
        return out

    def screen(self, base: np.ndarray, candidate: np.ndarray, tag: Any = None) -> bool:
        """Zeno++ on one asynchronous step ``candidate − base`` (the cloud rule); a report either way."""
        agg = Aggregation(self.robust.cloud)
        agg.add(candidate, 1.0, None, tag)
        agg.finish(None, base, self._validation_loss, tier="cloud", entity=0)
        report = agg.reports[-1]
        self._agg.reports.append(report)
        return bool(report["accepted"])

    def commit(self, opt: ServerOptimizerConfig | None = None, base: np.ndarray | None = None) -> np.ndarray:
        """Finish the aggregation: the weighted average (or ``opt``'s step from ``base``) becomes the global model.

        SCAFFOLD control deltas that came with the updates move the server control:
        ``c ← c + Σ κ_i Δc_i``.
        """
        loss = self._validation_loss if self.robust is not None and self.robust.validation > 0 else None
        self.model = self._agg.finish(opt, base, loss, tier="cloud", entity=0)
        if self._agg.control_sum is not None:
            self.control = (self.control.astype(np.float64) + self._agg.control_sum).astype(np.float32)
            self._agg.control_sum = None
        self.version += 1
        return self.model

    def get_control(self) -> np.ndarray:
        """The server control ``c`` (SCAFFOLD) as it is now."""
        return self.control

    def server_step(self, opt: ServerOptimizerConfig, coefs: list[float], plus: list[int],
                    plus_rows: list[int | None], minus: list[int], minus_rows: list[int | None],
                    *arrays: np.ndarray) -> np.ndarray:
        """``opt`` steps ``arrays[0]`` (the global model) with ``Δ = Σ c·(a − b)`` (an asynchronous cloud step)."""
        delta = delta_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)
        return opt.step(arrays[0], delta, self._agg.opt_state)

    def average(self, weights: list[float], index: list[int], rows: list[int | None],
                *arrays: np.ndarray) -> np.ndarray:
        """A weighted average of models for a protocol (e.g. a FedHiSyn device mixing ring arrivals)."""
        return average_rows(weights, index, rows, *arrays)

    def combine(self, coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
        """The cloud's asynchronous step (FedAsync mix, FedBuff buffer step, AHFL queue): see :func:`combine_packed`."""
        return combine_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)

    def similarity(self, base: int, index: list[int], rows: list[int | None], *arrays: np.ndarray,
                   measure: str = "cosine") -> np.ndarray:
        """Cosine similarity matrix of models ``k`` (``arrays[index[k]]``, row ``rows[k]``) minus
        ``arrays[base]`` (WSCC's updates; ``base < 0``: of the models themselves); ``measure="sq_norm"``:
        the vector of their squared norms instead (a serverless run's consensus distance)."""
        from hierfl.core.wscc import cosine_similarity  # noqa: PLC0415 (only WSCC needs it)

        ref = None if base < 0 else np.asarray(arrays[base], dtype=np.float64)
        vecs = np.stack([np.asarray(_pick(arrays[i], r), dtype=np.float64) for i, r in zip(index, rows)])
        vecs = vecs if ref is None else vecs - ref
        if measure == "sq_norm":
            return np.einsum("ij,ij->i", vecs, vecs)
        return cosine_similarity(vecs)

    def evaluate(self, params: np.ndarray, model: int = 0,
                 test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """(accuracy, loss) of ``params`` on the test set (Meta-SGD's ``[θ; α]``: of θ); ``model``: which of
        the run's architectures ``params`` belongs to (``models:``); ``test_rows``: only the test set's
        ``[start, stop)`` rows (one domain's)."""
        trainer = self.work.trainer_of(model)
        x, y = self.x_test, self.y_test
        if test_rows is not None:
            x, y = x[test_rows[0]:test_rows[1]], y[test_rows[0]:test_rows[1]]
        return trainer.evaluate(np.asarray(params)[: trainer.num_params], x, y)

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int, index: list[int],
                 rows: list[int | None], *arrays: np.ndarray) -> tuple[list[np.ndarray], float, dict[str, float], int]:
        """The server task ``name`` of the point ``(tier, entity)`` on the models ``arrays[index[k]]`` (row
        ``rows[k]``): see :meth:`ServerWork.run`."""
        return self.work.run(name, params, seed, tier, entity, [_pick(arrays[i], r) for i, r in zip(index, rows)])

    def export_state(self) -> dict[str, Any]:
        """Global model, version, running aggregation and SCAFFOLD control, for a checkpoint."""
        return copy.deepcopy({"model": self.model, "version": self.version, "agg": self._agg,
                              "control": self.control, "server_state": self.work.state})

    def import_state(self, state: dict[str, Any]) -> bool:
        """Take over :meth:`export_state`'s value: the aggregation goes on bit for bit."""
        state = copy.deepcopy(state)
        self.model, self.version, self._agg, self.control = (state["model"], state["version"], state["agg"],
                                                             state["control"])
        self.work.state = state.get("server_state", {})
        return True

    def warmup(self) -> bool:
        """Evaluate once so torch's lazy start-up is paid at start-up."""
        trainer = self.work.trainer_of(0)
        trainer.evaluate(self.model[: trainer.num_params], self.x_test[:2], self.y_test[:2])
        return True

    def ready(self) -> bool:
        """Start-up barrier for actors."""
        return True

    def pid(self) -> int:
        """The hosting process's id (operations and fault-injection tests)."""
        return os.getpid()
