"""The server roles: leaders (edge servers) that aggregate their groups, the cloud with the global model, its
control and evaluation, and the server's own computation (server tasks)."""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np

from hierfl.learn.vmapped import resolve_device
from hierfl.learn.local import LocalTrainer
from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.learn.staging import Transfers

__all__ = ['LeaderHost', 'ServerWork', 'Cloud']


from hierfl.core.message import CONTROLLED, MODEL
from hierfl.runtime.aggregation_role import Aggregation, robust_step
from hierfl.runtime.role_common import ModelSpec, _pick, average_rows, combine_packed, delta_packed, device_of, models_of, precision_of


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
            agg = self._agg[leader] = Aggregation(*(() if self.robust is None else self.robust.context("edge")))
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
                           arrays[0], "edge", leader, agg.reports, agg)

    def commit(self, leader: int, opt: ServerOptimizerConfig | None = None, base: np.ndarray | None = None,
               pack_control: bool = False, resident: bool = False) -> Any:
        """Finish the aggregation: the weighted average (or ``opt``'s step from ``base``) becomes the leader's model.

        ``pack_control``: return ``[model; Σ κ_i Δc_i]`` (the control deltas gathered
        since the last upload, relayed to the cloud) instead of the model alone. ``resident`` (the local
        executor): a plain average summed on the training device stays there
        (:class:`~hierfl.learn.staging.DeviceModel`), where the next edge round and the cloud read it.
        """
        agg = self._at(leader)
        previous = self.models.get(leader)
        behavior = None if self.robust is None else self.robust.edge_behaviors.get(leader)
        model = agg.finish(opt, base, tier="edge", entity=leader,
                           resident=resident and not pack_control and behavior is None)
        if behavior is not None:  # a compromised edge server: its behaviour acts on the edge round's step
            start = base if base is not None else previous
            if start is not None:
                rng = np.random.default_rng([leader, self.versions.get(leader, 0), 0xED6E])
                model = behavior.transform(model, np.asarray(start, dtype=np.float32), rng)
        self.models[leader] = model
        self.versions[leader] = self.versions.get(leader, 0) + 1
        if pack_control:
            return CONTROLLED.join({MODEL: model, "control": agg.take_control(model.size)})
        return model

    def get_control(self, leader: int) -> np.ndarray | None:
        """The leader's own control ``c_e`` (edge-scoped controls), None before its first round."""
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
    (:mod:`hierfl.learn.server_tasks`). Both compute on :attr:`device`, the run's device as this process
    resolves it: the local executor's cloud trains and evaluates where its hosts do; the Ray executor hands
    the cloud a CPU spec (it reserves no GPU), so its tasks run on the CPU there."""

    def __init__(self, model: ModelSpec, public: tuple[np.ndarray, np.ndarray] | None) -> None:
        _, input_shape, num_classes, threads = model[:4]
        self._spec = (tuple(input_shape), int(num_classes), threads, device_of(model), precision_of(model))
        self._models = models_of(model)
        self._trainers: dict[int, LocalTrainer] = {}
        self._flops: dict[int, float] = {}
        self._device: str | None = None
        self.public = public
        self.state: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        # model-sized host<->device crossings of the evaluators and the server tasks (one counter, as a host's)
        self.transfers = Transfers()

    @property
    def device(self) -> str:
        """``runtime.device`` resolved in this process, once (a device host resolves it the same way): the
        device of the evaluators and of every server task (under Ray the cloud gets ``cpu``: it reserves no GPU)."""
        if self._device is None:
            self._device = resolve_device(self._spec[3])
            if self._device.startswith("cuda"):  # a task's own modules too: no TF32, deterministic cuDNN
                from hierfl.learn.precision import cuda_determinism  # noqa: PLC0415 (torch: on a GPU only)

                cuda_determinism()
        return self._device

    def trainer_of(self, model: int = 0) -> LocalTrainer:
        """The trainer of the run's architecture ``model`` (0: ``model``; ``models:`` the others)."""
        if model not in self._trainers:
            input_shape, num_classes, threads, _, precision = self._spec
            trainer = LocalTrainer(self._models[model], input_shape, num_classes, torch_threads=threads,
                                   device=self.device, precision=precision)
            trainer.transfers = self.transfers
            self._trainers[model] = trainer
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
                            self.forward_flops, self.device, self.transfers)
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
        self._agg = Aggregation(*(() if robust is None else robust.context("cloud")))
        self.control = np.zeros_like(self.model)  # the server control c of control variates (zeros until used)
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
                           arrays[0], "cloud", 0, self._agg.reports, self._agg)

    def robust_average(self, tier: str, entity: int, weights: list[float], index: list[int], rows: list[int | None],
                       tags: list[Any], base: int, *arrays: np.ndarray) -> np.ndarray:
        """The ``tier`` rule's aggregate of models ``arrays[index[k]]`` (a cluster round, formed here as
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

        control deltas that came with the updates move the server control:
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
        """The server control ``c`` as it is now."""
        return self.control

    def server_step(self, opt: ServerOptimizerConfig, coefs: list[float], plus: list[int],
                    plus_rows: list[int | None], minus: list[int], minus_rows: list[int | None],
                    *arrays: np.ndarray) -> np.ndarray:
        """``opt`` steps ``arrays[0]`` (the global model) with ``Δ = Σ c·(a − b)`` (an asynchronous cloud step)."""
        delta = delta_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)
        return opt.step(arrays[0], delta, self._agg.opt_state)

    def average(self, weights: list[float], index: list[int], rows: list[int | None],
                *arrays: np.ndarray) -> np.ndarray:
        """A weighted average of models for a protocol (e.g. a device mixing ring arrivals)."""
        return average_rows(weights, index, rows, *arrays)

    def combine(self, coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
        """The cloud's asynchronous step (an asynchronous mix, a buffer step, a queue): see :func:`combine_packed`."""
        return combine_packed(coefs, plus, plus_rows, minus, minus_rows, *arrays)

    def similarity(self, base: int, index: list[int], rows: list[int | None], *arrays: np.ndarray,
                   measure: str = "cosine") -> np.ndarray:
        """Cosine similarity matrix of models ``k`` (``arrays[index[k]]``, row ``rows[k]``) minus
        ``arrays[base]`` (the updates; ``base < 0``: of the models themselves); ``measure="sq_norm"``:
        the vector of their squared norms instead (a serverless run's consensus distance)."""
        from hierfl.core.similarity import cosine_similarity  # noqa: PLC0415 (only a grouping protocol needs it)

        ref = None if base < 0 else np.asarray(arrays[base], dtype=np.float64)
        vecs = np.stack([np.asarray(_pick(arrays[i], r), dtype=np.float64) for i, r in zip(index, rows)])
        vecs = vecs if ref is None else vecs - ref
        if measure == "sq_norm":
            return np.einsum("ij,ij->i", vecs, vecs)
        return cosine_similarity(vecs)

    def evaluate(self, params: np.ndarray, model: int = 0,
                 test_rows: tuple[int, int] | None = None) -> tuple[float, float]:
        """(accuracy, loss) of ``params`` on the test set (of its model part); ``model``: which of
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
        """Global model, version, running aggregation and server control, for a checkpoint."""
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
