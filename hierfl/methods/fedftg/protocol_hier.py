"""FedFTG in a hierarchy: HierFAVG's edge rounds, and the cloud fine-tunes over the edge models.

Zhang et al., "Fine-tuning Global Model via Data-Free Knowledge Distillation for Non-IID Federated
Learning", CVPR 2022 (arXiv 2203.09249), placed at the cloud of a client–edge–cloud hierarchy
(docs/explanation/algorithms.md, FedFTG): the teachers are the models the cloud aggregates — the
edge models — and an edge's label histogram is the sum of its members' (a design default; the paper
is flat).

Edge rounds are HierFAVG's (``kappa1`` local steps, ``kappa2`` edge rounds per cloud round,
``fraction`` of an edge's devices per edge round). A device's first upload to its edge carries its
histogram (``4·C`` bytes); an edge's upload to the cloud carries the edge's histogram when its
member set differs from the one it last reported (re-grouping) or with ``histograms: every_round``.
When the cloud round closes the cloud runs ONE ``fedftg`` server job on the arrived edge models
(weighted by their data, as HierFAVG's cloud average), accounts the cloud aggregation at its end and
broadcasts the fine-tuned model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from hierfl.config.errors import Problem
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS, AggregationPoint
from hierfl.methods.fedftg.protocol import TASK, FinetuneMsg, FTGKnobs
from hierfl.methods.hierfavg.protocol import HierFAVG, HierFAVGConfig

__all__ = ["EdgeFinetuneMsg", "FedFTGHier", "FedFTGHierConfig"]


@dataclass(frozen=True)
class EdgeFinetuneMsg(Payload):
    """Edge server ``edge``'s fine-tuning job of its edge round ``round`` over the devices ``arrived``."""

    edge: int
    round: int
    arrived: tuple[int, ...]


@PROTOCOLS.register
class FedFTGHierConfig(FTGKnobs, HierFAVGConfig):
    """``protocol: {name: fedftg_hier, kappa1: 20, kappa2: 2, iters: 10, ...}``: HierFAVG, and the cloud
    fine-tunes each cloud round's average over the edge models."""

    name: Literal["fedftg_hier"] = "fedftg_hier"  # type: ignore[assignment]
    decides_on_models: ClassVar[str | None] = "fine-tunes the average at the server by distillation"
    supports_infra_faults: ClassVar[bool] = False
    # its devices also send their label histograms to the cloud, which differential privacy at the edge tier
    # would leave unprotected (privacy.dp.tier: edge is refused)
    edge_cohort_sampling: ClassVar[str | None] = None
    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ()
    rule_tiers: ClassVar[tuple[str, ...]] = ()
    subprotocol_tiers: ClassVar[tuple[str, ...]] = ()  # its own round closes do not wait for one
    control_variates: ClassVar[bool] = False
    # its uploads may carry label histograms (sized by the protocol): no channel on the edge tier
    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink")
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→edge", synchronous=True),
        AggregationPoint("straggler.cloud", "edge→cloud", synchronous=True, participants="edge servers",
                         selects=False))

    at: Literal["cloud", "edge"] = Field(
        default="cloud", description="where the fine-tuning runs: cloud (each cloud round, over the edge models; "
                                     "design default) or edge (each edge round, at every edge server over its "
                                     "devices' models; needs GPU edge servers: servers.edge.tier edge_gpu or "
                                     "servers.edge.gflops)")

    def check(self, scenario: Any) -> list[Problem]:
        """HierFAVG's needs (edge servers), a trainer that keeps one shared model, GPU edges for ``at: edge``."""
        problems = HierFAVGConfig.check(self, scenario) + self.trainer_problems(scenario)
        edge = scenario.servers.edge
        if self.at == "edge" and edge.gflops is None and edge.tier != "edge_gpu":
            problems.append(Problem("servers.edge.tier", "fedftg_hier with at: edge trains a generator and the "
                                    "edge model at every edge server, which the specification places on a GPU "
                                    "edge; allowed: edge_gpu (or give servers.edge.gflops)", edge.tier))
        return problems

    def create(self, env: Env) -> FedFTGHier:  # type: ignore[override]
        """A hierarchical FedFTG run."""
        return FedFTGHier(self, env)


class FedFTGHier(HierFAVG):
    """HierFAVG whose cloud rounds end with one fine-tuning server job over the edge models."""

    def __init__(self, cfg: FedFTGHierConfig, env: Env) -> None:
        super().__init__(cfg, env)
        self.ftg = cfg
        counts = env.world.label_counts
        if counts is None:
            raise ValueError("fedftg_hier needs every device's label histogram (world.label_counts)")
        self.counts = counts
        self.hist_bytes = 4 * int(env.world.num_classes)
        self.reported: set[int] = set()                    # devices whose histogram their edge holds
        self.edge_reported: dict[int, frozenset[int]] = {}  # edge → the members whose sum the cloud holds
        self.arrived_edges: dict[int, tuple[Any, float]] = {}  # this cloud round's edge models and weights
        self.closing: list[int] = []
        self.device_models: dict[int, dict[int, tuple[Any, float]]] = {}  # at: edge: each edge round's teachers

    def on_train_done(self, event: Event) -> None:
        """Collect the job; upload to the edge (with the histogram the first time, or every round)."""
        env = self.env
        device = event.payload.device
        env.finish_training(self.jobs[device])
        size = env.world.model_bytes
        if self.ftg.histograms == "every_round" or device not in self.reported:
            size += self.hist_bytes
            self.reported.add(device)
        env.send(("device", device), self.server_of(device, "device_edge", event.payload), "upload_done",
                 event.payload, "upload", size=size)

    def on_upload_done(self, event: Event) -> None:
        """At ``at: edge``, keep the device's model as a teacher of its edge with its weight; HierFAVG's arrival."""
        if self.ftg.at == "edge":
            device, edge = event.payload.device, event.payload.edge
            base = float(self.env.world.samples[device]) if self.ftg.weighting == "samples" else 1.0
            self.device_models.setdefault(edge, {})[device] = (self.jobs[device].params,
                                                              self.barrier[edge].weight(device, base))
        super().on_upload_done(event)

    def _close_edge_round(self, edge: int, arrived: list[int]) -> None:
        models = self.device_models.pop(edge, {})
        env = self.env
        if self.ftg.at != "edge" or not arrived or env.stopping:
            super()._close_edge_round(edge, arrived)
            return
        order = sorted(arrived)
        counts = [[int(c) for c in self.counts[d]] for d in order]
        params = self.ftg.task_params(env, self.edge_round[edge], [models[d][1] for d in order], counts, (edge,))
        env.tier("edge", edge).run(TASK, [models[d][0] for d in order], "edge_finetune_done",
                                   EdgeFinetuneMsg(edge, self.edge_round[edge], tuple(order)), params)

    def on_edge_finetune_done(self, event: Event) -> None:
        """An edge's job is over: its edge round closes now (HierFAVG's close: the aggregation accounted, the
        upload or the next edge round), with the fine-tuned model as the edge model."""
        msg = event.payload.payload
        super()._close_edge_round(msg.edge, list(msg.arrived))
        # the close committed the plain average; the fine-tuned model replaces it before anyone reads it
        # (an upload is read at its arrival, a device's download when the device starts), also as the
        # start of the edge round the close may have begun
        average, tuned = self.edge_model[msg.edge], event.payload.outputs[0]
        self.edge_model[msg.edge] = tuned
        if self.edge_start.get(msg.edge) is average:
            self.edge_start[msg.edge] = tuned

    def _upload_size(self, edge: int) -> int | None:
        if self.ftg.at == "edge":  # the cloud does not fine-tune: it needs no histogram
            return None
        members = frozenset(int(d) for d in self.members[edge])
        if self.ftg.histograms == "every_round" or self.edge_reported.get(edge) != members:
            self.edge_reported[edge] = members
            return self.env.world.model_bytes + self.hist_bytes
        return None

    def on_edge_upload_done(self, event: Event) -> None:
        """Keep the edge model as a teacher with the weight the cloud gives it, then HierFAVG's arrival."""
        edge = event.payload.edge
        assert self.cloud_barrier is not None
        self.arrived_edges[edge] = (self.edge_model[edge], self.cloud_barrier.weight(edge, self.edge_weight[edge]))
        super().on_edge_upload_done(event)

    def _close_cloud_round(self, arrived: list[int]) -> None:
        env = self.env
        if self.ftg.at == "edge" or not arrived or env.stopping:  # HierFAVG's close (at: edge, nothing, no time)
            self.arrived_edges = {}
            super()._close_cloud_round(arrived)
            return
        order = sorted(arrived)
        self.closing = order
        counts = [[int(c) for c in np.asarray(self.counts[self.members[e]]).sum(axis=0)] for e in order]
        params = self.ftg.task_params(env, self.cloud_round, [self.arrived_edges[e][1] for e in order], counts)
        inputs = [self.arrived_edges[e][0] for e in order]
        self.arrived_edges = {}
        env.tier("cloud").run(TASK, inputs, "finetune_done", FinetuneMsg(self.cloud_round), params)

    def on_finetune_done(self, event: Event) -> None:
        """The job is over: the cloud aggregation is complete, the fine-tuned model goes down to the edges."""
        env = self.env
        env.tier("cloud").commit(self.closing, base=env.global_model, source="edge")  # accounting (the job averaged)
        env.set_global(event.payload.outputs[0])
        self.cloud_round += 1
        if env.stopping:
            return
        self._next_cloud_round()
