"""The Ray executor's leader and cloud aggregation (``executor.servers``): the roles' calls on their actors.

Inputs travel as object references (job slots' rows of a batch, or model refs) and results come back as
refs; fold-ins of arriving updates are buffered in the outbox (:mod:`hierfl.runtime.ray_batches`) and
sent as one call.
"""

from __future__ import annotations

from typing import Any

import ray

from hierfl.learn.serveropt import ServerOptimizerConfig
from hierfl.runtime.driver_cloud import get
from hierfl.runtime.executor_api import Servers, Term
from hierfl.runtime.ray_batches import Batches, model_ref, tags_kw, term_positions, unique_refs

__all__ = ["RayServers"]


class RayServers(Servers):
    """The leader and cloud aggregation in their actors; inputs travel as refs, results come back as refs."""

    def __init__(self, batches: Batches, robust: bool) -> None:
        self._b = batches
        self.leaders, self.cloud = batches.leaders, batches.cloud
        self._robust = robust

    def add_edge(self, edge: int, weight: float, update: Any, control_coef: float | None = None,
                 tag: Any = None) -> None:
        """Buffer the fold-in at the leader actor (sent in order with the others)."""
        self._b.fold_edge(edge, weight, update, control_coef, tag)

    def commit_edge(self, edge: int, opt: ServerOptimizerConfig | None = None, base: Any = None,
                    pack_control: bool = False) -> Any:
        """Ref of the new leader model."""
        assert self.leaders is not None
        self._b.need(base)
        self._b.flush()
        if opt is None and not pack_control and not self._robust:
            return self.leaders.commit.remote(edge)
        return self.leaders.commit.remote(edge, opt, None if base is None else model_ref(base), pack_control)

    def add_cloud(self, weight: float, update: Any, control_coef: float | None = None, tag: Any = None) -> None:
        """Buffer the fold-in at the cloud actor (sent in order with the others)."""
        self._b.fold_cloud(weight, update, control_coef, tag)

    def commit_cloud(self, opt: ServerOptimizerConfig | None = None, base: Any = None) -> Any:
        """Ref of the new global model (pending fold-ins travel with the commit)."""
        self._b.need(base)
        adds, tags = self._b.take_cloud_adds()
        self._b.flush()
        # plain averaging needs no base (a robust rule may: norm clipping, Zeno, the records)
        base_ref = None if base is None or (opt is None and not self._robust) else model_ref(base)
        if not adds:
            return self.cloud.commit.remote(opt, base_ref)
        handles = [h for _, h, _ in adds]
        index, rows, refs = unique_refs(handles + ([base_ref] if base_ref is not None else []))
        base_pos = -1
        if base_ref is not None:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.add_many_commit.remote([w for w, _, _ in adds], index, rows, [c for _, _, c in adds],
                                                 opt, base_pos, *refs, **tags_kw(tags))

    def robust_reports(self, tier: str) -> list[dict[str, Any]]:
        """The reports of ``tier``'s role (waits for its commits: actor calls run in order)."""
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            return []
        return list(get(role.take_reports.remote()))

    def screen(self, base: Any, candidate: Any, tag: Any = None) -> bool:
        """Zeno++ in the cloud actor (waits for its answer)."""
        self._b.need(base, candidate)
        self._b.flush()
        return bool(get(self.cloud.screen.remote(model_ref(base), model_ref(candidate), tag)))

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any,
                       tags: list[Any]) -> Any:
        """Ref of the ``tier`` rule's aggregate of ``models``, computed in the cloud actor."""
        self._b.need(*models, base)
        self._b.flush_jobs()
        extra = [] if base is None else [model_ref(base)]
        index, rows, refs = unique_refs(list(models) + extra)
        base_pos = -1
        if extra:
            base_pos, index, rows = index[-1], index[:-1], rows[:-1]
        return self.cloud.robust_average.remote(tier, entity, list(weights), index, rows, tags, base_pos, *refs)

    def robust_combine(self, tier: str, entity: int, opt: ServerOptimizerConfig | None, base: Any,
                       terms: list[Term], tags: list[Any]) -> Any:
        """Ref of ``base`` stepped by the ``tier`` rule's aggregate of the deltas, computed in the actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.robust_combine.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, tags,
                                                      *refs)
        return self.cloud.robust_combine.remote(opt, coefs, plus, plus_rows, minus, minus_rows, tags, *refs)

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Ref of the weighted average, computed in the cloud actor (models may be job Slots)."""
        self._b.need(*models)
        self._b.flush_jobs_for(self.cloud, list(models))
        index, rows, refs = unique_refs(list(models))
        return self.cloud.average.remote(list(weights), index, rows, *refs)

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """Ref of ``Σ c·(a − b)`` computed in the leader or cloud actor (inputs resolved there, as refs)."""
        self._b.need(*[h for _, p, m in terms for h in (p, m)])
        role = self.leaders if tier == "edge" else self.cloud
        if role is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        handles = [h for _, p, m in terms for h in (p, m) if h is not None]
        # binds the buffered jobs it reads to their batch rows (flush_jobs_for), and sends the buffered
        # fold-ins first: they keep their order before this call in each role
        self._b.flush_jobs_for(role, handles)
        self._b.flush(jobs=False)
        index, rows, refs = unique_refs(handles)
        plus, minus, plus_rows, minus_rows = term_positions(terms, index, rows)
        return role.combine.remote([c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, *refs)

    def server_step(self, tier: str, entity: int, opt: ServerOptimizerConfig, base: Any, terms: list[Term]) -> Any:
        """Ref of ``opt``'s step from ``base`` with ``Δ = Σ c·(a − b)``, computed in the leader or cloud actor."""
        coefs, plus, plus_rows, minus, minus_rows, refs = self._step_args(tier, base, terms)
        if tier == "edge":
            return self.leaders.server_step.remote(entity, opt, coefs, plus, plus_rows, minus, minus_rows, *refs)
        return self.cloud.server_step.remote(opt, coefs, plus, plus_rows, minus, minus_rows, *refs)

    def _step_args(self, tier: str, base: Any, terms: list[Term]) -> tuple[Any, ...]:
        """What a role's step from ``base`` with ``Δ = Σ c·(a − b)`` is called with: the coefficients,
        the positions and rows of the terms' vectors, and the unique refs (the base first: arrays[0])."""
        self._b.need(base, *[h for _, p, m in terms for h in (p, m)])
        self._b.flush()
        handles = [model_ref(base)] + [h for _, p, m in terms for h in (p, m) if h is not None]
        index, rows, refs = unique_refs(handles)
        plus, minus, plus_rows, minus_rows = term_positions(terms, index[1:], rows[1:])
        if tier == "edge" and self.leaders is None:
            raise RuntimeError("no leader actor: the scenario has no edge servers")
        return [c for c, _, _ in terms], plus, plus_rows, minus, minus_rows, refs

    def control(self, edge: int | None = None) -> Any:
        """Ref of the cloud's control ``c`` (or ``edge``'s ``c_e``) after every call sent so far (actor calls
        run in order)."""
        self._b.flush()
        if edge is None:
            return self.cloud.get_control.remote()
        assert self.leaders is not None
        return self.leaders.get_control.remote(edge)

    def run_task(self, name: str, params: dict[str, Any], seed: int, tier: str, entity: int,
                 inputs: list[Any]) -> tuple[list[Any], float, dict[str, float], int]:
        """Computed in the cloud actor; the outputs are put into the object store (a server task is rare:
        one per round at most, so its result may cross to the driver and back)."""
        self._b.need(*inputs)
        self._b.flush_jobs()
        index, rows, refs = unique_refs(list(inputs))
        outputs, flops, stats, kept = get(self.cloud.run_task.remote(name, dict(params), seed, tier, entity,
                                                                         index, rows, *refs))
        return [ray.put(o) for o in outputs], flops, stats, kept
