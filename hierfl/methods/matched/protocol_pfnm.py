"""PFNM: one-shot matched averaging of MLPs through a Beta–Bernoulli-process model of neurons.

M. Yurochkin, M. Agarwal, S. Ghosh, K. Greenewald, T. N. Hoang, Y. Khazaeni, "Bayesian Nonparametric
Federated Learning of Neural Networks", ICML 2019, arXiv 1905.12022; the rules follow the authors' code
(``matching/pfnm.py``: ``layer_group_descent``). docs/explanation/algorithms.md, "PFNM and FedMA".

Round ``t`` at a matching point (the cloud when flat, each edge server in a hierarchy):

1. every member trains its network locally (``training``; round 0 from its own initialisation, later
   rounds — the code's extra communication rounds — from its matched sub-network, cut by the server from
   its last assignments, or from the whole global network: ``later_rounds``) and uploads all its weights;
2. with every member's, the server matches the hidden layers from the last down to the first
   (:func:`hierfl.methods.matched.math.match_mlp`, class shares from the members' label histograms) — a server
   job charged by its operation count (:func:`hierfl.methods.matched.math.assignment_ops` per assignment);
3. flat, the matched model is the global model (one cloud aggregation); with edge servers the cloud
   matches the edges' models the same way (:mod:`hierfl.methods.matched.protocol`).

Virtual time of a flat round: ``max_i (train_i + upload_i) + match_ops / f_server + max_i download_i``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from hierfl.config.base import ReadWith
from hierfl.env import Env
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS
from hierfl.methods.matched.protocol import (
    MatchedConfig,
    MatchedProtocol,
    MatchMsg,
    PointMsg,
    _widths,
)

__all__ = ["PFNM", "PFNMConfig"]


@PROTOCOLS.register
class PFNMConfig(MatchedConfig):
    """``protocol: {name: pfnm, gamma: 7, sigma2: 1, sigma0_2: 1, iters: 5, local_width: [..]}``; one
    round is one-shot PFNM, more rounds (``stop.rounds``) are the code's extra communication rounds."""

    name: Literal["pfnm"] = "pfnm"
    decides_on_models: ClassVar[str | None] = "the matched widths depend on the trained weights"
    # the matching's prior and sweeps mean nothing to the coordinate-wise average
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        key: ReadWith("rule", ("match",)) for key in ("gamma", "sigma2", "sigma0_2", "iters")}

    rule: Literal["match", "average"] = Field(
        default="match", description="match: PFNM's matching; average: the same rounds with the networks averaged "
                                     "coordinate by coordinate, weighted by samples (the baseline the matching is "
                                     "compared with; design default match); gamma, sigma2, sigma0_2 and iters "
                                     "are read only by match, so setting one under average is refused")

    later_rounds: Literal["global", "submodel"] = Field(
        default="submodel", description="what a device starts a later round from: submodel (the global weights "
                                        "its own neurons were matched to, in its own order and width, as the "
                                        "authors' pfnm_communication.py) or global (the whole global network, "
                                        "design alternative)")

    def create(self, env: Env) -> PFNM:
        """A PFNM run."""
        return PFNM(self, env)


class PFNM(MatchedProtocol):
    """Local training, upload, one matching per point, the cloud's model; repeated for ``stop.rounds``."""

    def __init__(self, cfg: PFNMConfig, env: Env) -> None:
        super().__init__(cfg, env)
        self.cfg: PFNMConfig = cfg

    def cloud_params(self, edges: list[int]) -> dict[str, Any]:
        """The cloud combines the edge models by the same rule (``average``: weighted by the edges' samples)."""
        world = self.env.world
        return {"rule": self.cfg.rule, "weights": [int(world.edge_samples(e)) for e in edges]}

    def _device_round(self, device: int) -> None:
        job, _ = self.env.start_job(device, self.model[device], MatchMsg(device, self.round), done="local_done")
        self.jobs[device] = job

    def on_local_done(self, event: Event) -> None:
        """The device trained: upload its whole network to its server."""
        d = event.payload.device
        job = self.jobs.pop(d)
        self.env.finish_training(job)
        self.model[d] = job.params
        self.env.send(("device", d), self.point_of(d), "model_arrived", event.payload, "upload",
                      size=self.model_bytes(self.widths[d]))

    def on_model_arrived(self, event: Event) -> None:
        """A member's network reached its server; with every member's, the server matches them."""
        d = event.payload.device
        point = self.point_of(d)
        arrived = self.arrived[point]
        arrived[d] = self.model[d]
        members = self.points[point]
        if len(arrived) < len(members):
            return
        self.arrived[point] = {}
        self.env.tier(*point).run("pfnm_match", [arrived[m] for m in members], "match_done",
                                  payload=PointMsg(*point, self.round),
                                  params={**self.knobs(), "widths": [list(self.widths[m]) for m in members],
                                          "counts": self.point_counts(members), "clients": members,
                                          "rule": self.cfg.rule,
                                          "weights": [int(self.env.world.samples[m]) for m in members]})

    def on_match_done(self, event: Event) -> None:
        """The point's matched model."""
        done = event.payload
        msg: PointMsg = done.payload
        self.point_model((msg.tier, msg.entity), done.outputs[0], _widths(done.stats))
