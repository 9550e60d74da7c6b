"""HierFAVG: client–edge–cloud hierarchical federated averaging.

Liu, Zhang, Song, Letaief, "Client-Edge-Cloud Hierarchical Federated Learning", ICC 2020
(arXiv 1905.06641); reference code LuminLiu/HierFL. ALGORITHMS.md §5.2: every device of an
edge runs ``κ1`` local SGD steps from the edge model; the edge waits for all its (sampled)
devices and averages them weighted by samples; after every ``κ2`` edge aggregations each
edge sends its model to the cloud, which waits for all edges and averages them weighted by
``n_ℓ`` (the data of all the edge's devices), then broadcasts the result to every edge.

With ``fraction < 1`` an edge samples ``max(⌊frac·|C_ℓ|⌋, 1)`` devices per edge round without
replacement with probability ∝ sample count (as the reference code does). Training
``epochs``/``steps`` are ignored: the local budget is ``kappa1`` steps.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hierfl.config.errors import Problem
from hierfl.core.engine import Event, Priority
from hierfl.protocols.base import PROTOCOLS, Protocol, ProtocolConfig

if TYPE_CHECKING:
    from hierfl.config.schema import Scenario
    from hierfl.emulator import Context

__all__ = ["HierFAVGConfig", "HierFAVG"]


@PROTOCOLS.register
class HierFAVGConfig(ProtocolConfig):
    """``protocol: {name: hierfavg, kappa1: 60, kappa2: 1, fraction: 1.0}``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud", "edge")
    control_variates: ClassVar[bool] = True

    name: Literal["hierfavg"] = "hierfavg"
    kappa1: PositiveInt = Field(default=60, description="local SGD steps per edge aggregation")
    kappa2: PositiveInt = Field(default=1, description="edge aggregations per cloud aggregation")
    fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="fraction of an edge's devices per edge round")

    def check(self, scenario: Scenario) -> list[Problem]:
        """HierFAVG needs edge servers."""
        if scenario.topology.edge_servers < 1:
            return [Problem("topology.edge_servers", "hierfavg needs at least 1 edge server", 0)]
        return []

    def create(self, ctx: Context) -> HierFAVG:
        """A HierFAVG run."""
        return HierFAVG(self, ctx)


class HierFAVG(Protocol):
    """Synchronous edge rounds, synchronous cloud rounds every ``kappa2`` edge rounds."""

    def __init__(self, cfg: HierFAVGConfig, ctx: Context) -> None:
        super().__init__(ctx)
        self.cfg = cfg
        base = ctx.spec
        self.spec = replace(base, epochs=None, steps=cfg.kappa1)  # keeps the trainer's fields
        world = ctx.world
        self.members = {e: world.edge_members(e) for e in range(world.num_edges)}
        self.edges = [e for e, m in self.members.items() if m.size > 0]  # empty edges take no part
        self.edge_weight = {e: float(world.edge_samples(e)) for e in self.edges}
        self.edge_model: dict[int, Any] = {e: ctx.global_model for e in self.edges}
        self.edge_start: dict[int, Any] = {}  # model each edge round started from (edge optimizer's base)
        self.control: Any = ctx.control()      # SCAFFOLD: the cloud's c, relayed by the edges (None otherwise)
        self.edge_round = {e: 0 for e in self.edges}
        self.selected: dict[int, list[int]] = {}
        self.arrived: dict[int, set[int]] = {}
        self.cloud_arrived: set[int] = set()

    def start(self) -> None:
        """Every edge starts its first round from the initial model at t = 0."""
        for e in self.edges:
            self._begin_edge_round(e)

    def _sample(self, edge: int) -> list[int]:
        members = self.members[edge]
        m = max(math.floor(self.cfg.fraction * members.size + 1e-9), 1)
        if m >= members.size:
            return [int(i) for i in members]
        rng = self.ctx.rng("hierfavg.select", edge, self.edge_round[edge])
        n = self.ctx.world.samples[members].astype(np.float64)
        chosen = rng.choice(members, size=m, replace=False, p=n / n.sum())
        return sorted(int(i) for i in chosen)

    def _begin_edge_round(self, edge: int) -> None:
        self.edge_start[edge] = self.edge_model[edge]
        self.selected[edge] = self._sample(edge)
        self.arrived[edge] = set()
        for device in self.selected[edge]:
            self.send_model(device, "device_edge", {"edge": edge})

    def on_train_start(self, event: Event) -> None:
        """The device has its edge's model: start κ1 local steps."""
        self.start_job(event, self.edge_model[event.payload["edge"]], self.spec, self.control)

    def on_train_done(self, event: Event) -> None:
        """Collect the job and upload it to the edge."""
        self.collect_and_upload(event, "device_edge")

    def on_upload_done(self, event: Event) -> None:
        """An update reached its edge; aggregate when the edge round is complete."""
        ctx = self.ctx
        device, edge = event.payload["device"], event.payload["edge"]
        self.arrived[edge].add(device)
        ctx.add_to_edge(edge, self.jobs.pop(device).params, float(ctx.world.samples[device]), ctx.control_coef(device))
        ids = self.selected[edge]
        if len(self.arrived[edge]) < len(ids):
            return
        upload = (self.edge_round[edge] + 1) % self.cfg.kappa2 == 0
        # SCAFFOLD: the upload carries [edge model; Σ κ_i Δc_i of its devices since the last upload]
        self.edge_model[edge] = ctx.commit_edge(edge, participants=ids, base=self.edge_start[edge],
                                                pack_control=upload and ctx.control_variates)
        self.edge_round[edge] += 1
        if upload:
            u = ctx.world.edge_upload_s(edge)
            ctx.transfer("edge_cloud", ("edge", edge), "upload", u)
            ctx.schedule(u, "edge_upload_done", {"edge": edge}, Priority.ARRIVAL)
        elif not ctx.stopping:
            self._begin_edge_round(edge)

    def on_edge_upload_done(self, event: Event) -> None:
        """An edge model reached the cloud; aggregate when every edge has reported."""
        ctx = self.ctx
        edge = event.payload["edge"]
        self.cloud_arrived.add(edge)
        ctx.add_to_cloud(self.edge_model[edge], self.edge_weight[edge], 1.0 if ctx.control_variates else None)
        if len(self.cloud_arrived) < len(self.edges):
            return
        self.cloud_arrived = set()
        ctx.set_global(ctx.commit_cloud(participants=[int(e) for e in self.edges], tier="edge", base=ctx.global_model))
        if ctx.stopping:
            return
        self.control = ctx.control()  # travels down with the global model
        for e in self.edges:
            d = ctx.world.edge_download_s(e)
            ctx.transfer("edge_cloud", ("edge", e), "download", d)
            ctx.schedule(d, "edge_download_done", {"edge": e}, Priority.ARRIVAL)

    def on_edge_download_done(self, event: Event) -> None:
        """The edge has the new global model: start its next round."""
        edge = event.payload["edge"]
        self.edge_model[edge] = self.ctx.global_model
        if not self.ctx.stopping:
            self._begin_edge_round(edge)

    def state(self) -> dict[str, Any]:
        """Edge round counters and in-flight participants."""
        return {"edge_round": dict(self.edge_round), "selected": self.selected,
                "arrived": {e: sorted(a) for e, a in self.arrived.items()}}
