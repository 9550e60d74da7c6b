"""FedMD: heterogeneous models that collaborate through a consensus of class scores on public data.

D. Li, J. Wang, "FedMD: Heterogenous Federated Learning via Model Distillation", NeurIPS 2019
workshop on federated learning, arXiv 1910.03581; the rules follow the authors' code
(``FedMD.py::collaborative_training``). docs/explanation/algorithms.md §8.1.

Every device (a *party*) runs its own architecture (``models:``). Before the rounds, a transfer
learning phase: each party trains its freshly initialised model on the labelled public data, then
on its private data. Then every round ``t``:

1. *alignment set*: a fresh label-stratified subset ``A_t`` of the public data, drawn by both ends
   from the stream ``("public_subset", t)`` (its indices are never sent);
2. *communicate*: each party computes its class scores (logits) on ``A_t`` — a forward-only job —
   and uploads them (``4·|A_t|·C`` bytes);
3. *aggregate*: the cloud averages the scores uniformly into the consensus (one cloud aggregation)
   and sends it back to every party (``4·|A_t|·C`` bytes);
4. *digest*: each party trains toward the consensus on ``A_t`` with the mean absolute error of its
   logits (``kd_loss(kind="mae_logits")``);
5. *revisit*: each party trains on its private data.

The next round begins when every party has revisited. Virtual time of a round::

    max_i (scores_i + upload_i) + max_i (download_i + digest_i + revisit_i)

with ``scores_i = |A_t|·F_i / f_i`` (one forward pass), ``digest_i = E_d·|A_t|·3F_i / f_i`` and
``revisit_i = E_r·n_i·3F_i / f_i``. Accuracy in the evaluation lines is the mean over the parties of
their own models' test accuracy.

At a tier of a hierarchy (edge servers) the consensus is a mean, so it composes: each edge server
averages its members' scores (an edge aggregation), sends the mean up, and the cloud weights the
edge means by member count — the global consensus up to rounding; the consensus travels back the
same way. Every hop carries ``4·|A_t|·C`` bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.core.jobs import Job
from hierfl.core.work import PublicTask, TrainSpec
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["EdgeMsg", "FedMD", "FedMDConfig", "PhaseMsg"]

_SEED_BOUND = 2 ** 62


@dataclass(frozen=True)
class PhaseMsg(DeviceMsg):
    """A party's step: ``round`` (-1 during the transfer-learning phase)."""

    round: int


@dataclass(frozen=True)
class EdgeMsg(Payload):
    """An edge server's partial consensus (up) or the consensus (down) in round ``round``."""

    edge: int
    round: int


@PROTOCOLS.register
class FedMDConfig(ProtocolConfig):
    """``protocol: {name: fedmd, align_size: 5000, revisit_epochs: 4, ...}``; needs ``data.public``."""

    name: Literal["fedmd"] = "fedmd"
    # the consensus and digest knobs mean nothing to the reference without collaboration,
    # which sweeps derive from a collaborating base: a warning, not a refusal
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        key: ReadWith("collaborate", (True,), warn=True)
        for key in ("align_size", "stratified", "digest_epochs", "digest_batch_size", "digest_lr")}
    exchanges: ClassVar[str] = "outputs"
    uses_public_data: ClassVar[bool] = True
    supports_churn: ClassVar[bool] = False
    decides_on_models: ClassVar[str | None] = "exchanges the models' class scores"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud (class scores)", synchronous=True, takes_policy=False,
                         note="the consensus averages every party's scores on the round's public subset; no "
                              "straggler policy is implemented for it"),)

    align_size: PositiveInt = Field(
        default=5000, description="size of the round's alignment set A_t, re-drawn every round (authors' code: "
                                  "5000); the default is capped at the public split's size, any other value above it is refused")
    stratified: bool = Field(default=True, description="draw A_t stratified by label (authors' code: yes)")
    digest_epochs: PositiveInt = Field(default=1, description="epochs of the digest on A_t (authors' code: 1)")
    digest_batch_size: PositiveInt = Field(default=256, description="batch size of the digest (authors' code: 256)")
    digest_lr: PositiveFloat | None = Field(
        default=None, description="SGD learning rate of the digest; null = training.lr (design default: the authors' "
                                  "code uses Adam at 1e-3, this emulator's local trainer is SGD)")
    revisit_epochs: PositiveInt = Field(
        default=4, description="epochs on the private data after the digest, batch revisit_batch_size (authors' "
                               "code: 4 for CIFAR, 2 for FEMNIST)")
    revisit_batch_size: PositiveInt | None = Field(
        default=None, description="batch size of the revisit epochs; null = training.batch_size (the authors' code "
                                  "revisits at its own batch size, e.g. 32, apart from the transfer phase's)")
    transfer_public_epochs: PositiveInt = Field(
        default=20, description="transfer learning: epochs on the labelled public data (authors' code: up to 20, "
                                "with early stopping, which is not emulated)")
    transfer_batch_size: PositiveInt = Field(
        default=128, description="batch size of the public transfer-learning epochs (authors' code: 128)")
    transfer_private_epochs: PositiveInt = Field(
        default=25, description="transfer learning: epochs on the private data, batch training.batch_size "
                                "(authors' code: up to 25, with early stopping, which is not emulated)")
    charge_setup_phases: bool = Field(
        default=True, description="charge the transfer-learning phase (and a download_once of the public data) in "
                                  "virtual time before round 1 (design default); false: the phase runs in zero "
                                  "virtual time")
    collaborate: bool = Field(
        default=True, description="false: the no-collaboration reference the paper compares against (design "
                                  "default true): after transfer learning every party only revisits its private "
                                  "data, round after round, and nothing is exchanged; needs stop.virtual_time_s; "
                                  "align_size, stratified and the digest_* keys are then unused, and a warning names any "
                                  "set")
    consensus_scope: Literal["global"] = Field(
        default="global", description="where the consensus is averaged: global (every party; with edge servers, "
                                      "each edge averages its members' scores and the cloud weights the edge means "
                                      "by member count: the same mean, design default); a consensus per edge "
                                      "server is not implemented")

    def check(self, scenario: Any) -> list[Problem]:
        """Public data at the devices, labelled; the plain SGD trainer."""
        problems: list[Problem] = []
        pub = scenario.data.public
        if pub is None:
            problems.append(Problem("data.public", "fedmd exchanges class scores on public data: set data.public "
                                    "(size, labelled, placement)"))
        else:
            if not pub.labelled:
                problems.append(Problem("data.public.labelled", "fedmd's transfer-learning phase trains on the "
                                        "public labels; allowed: true", pub.labelled))
            if self.non_default("align_size") and self.align_size > pub.size:
                problems.append(Problem("protocol.align_size", f"larger than the public split (data.public.size = "
                                        f"{pub.size}), so it would be capped; allowed: 1..{pub.size}",
                                        self.align_size, refused=True))
            if pub.placement == "server_only":
                problems.append(Problem("data.public.placement", "fedmd's parties compute scores on the public "
                                        "data, so they must hold it; allowed: preinstalled, download_once",
                                        pub.placement))
        if not self.collaborate and scenario.stop.virtual_time_s is None:
            problems.append(Problem("stop.virtual_time_s", "fedmd with collaborate: false makes no cloud "
                                    "aggregation, so stop.rounds never ends it; set stop.virtual_time_s"))
        trainer = scenario.training.trainer.name
        if trainer != "sgd":
            problems.append(Problem("training.trainer", "fedmd's jobs are its own (scores, digest, revisit) on the "
                                    "plain local trainer; allowed: sgd", trainer))
        return problems

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """Every party's scores at the cloud (flat), or every edge server's mean of its members' scores."""
        return {"cloud": edges if edges else devices, "edge": None}

    def create(self, env: Env) -> FedMD:
        """A FedMD run."""
        return FedMD(self, env)


class FedMD(Protocol):
    """Transfer learning, then synchronous rounds of scores → consensus → digest → revisit."""

    def __init__(self, cfg: FedMDConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        public = env.world.public
        if public is None:  # the load-time check refuses this; a direct use of the class gets a clear error
            raise ValueError("fedmd needs the public split (data.public)")
        self.public = public
        self.n = env.world.num_devices
        self.align = min(cfg.align_size, public.size)
        self.score_bytes = 4 * self.align * int(env.world.num_classes)  # float32 scores, |A_t| × C
        base = env.spec
        self.revisit_spec = dataclasses.replace(base, epochs=cfg.revisit_epochs, steps=None)
        if cfg.revisit_batch_size is not None:  # (null: training.batch_size, the spec as it was)
            self.revisit_spec = dataclasses.replace(self.revisit_spec, batch_size=cfg.revisit_batch_size)
        self.private_spec = dataclasses.replace(base, epochs=cfg.transfer_private_epochs, steps=None)
        # with edge servers, each edge averages its members' scores and the cloud the edge means, weighted
        # by member count (a mean of means: the same consensus, score sums compose); flat: the cloud alone
        edge_of = env.world.edge_of
        self.members: dict[int, list[int]] = {}
        if env.world.num_edges:
            for d in range(self.n):
                self.members.setdefault(int(edge_of[d]), []).append(d)
        self.edge_arrived: dict[int, set[int]] = {e: set() for e in self.members}
        self.edge_means: dict[int, Any] = {}  # an edge's mean of its members' scores, on its way to the cloud
        self.round = 0
        self.model: dict[int, Any] = {}     # each party's latest model (after its revisit)
        self.ready: set[int] = set()        # parties through the current step
        self.consensus: Any = None
        self._round_specs: tuple[TrainSpec, TrainSpec] | None = None

    # -- transfer learning -----------------------------------------------------------------------
    def start(self) -> None:
        """Every party starts its transfer learning at t = 0 (after downloading the public data if its
        placement is download_once)."""
        env = self.env
        for d in range(self.n):
            if self.public.placement == "download_once" and self.cfg.charge_setup_phases:
                env.send(("cloud", 0), ("device", d), "public_ready", PhaseMsg(d, -1), "download_public",
                         size=self.public.download_bytes)
            else:
                self._transfer_public(d)

    def on_public_ready(self, event: Event) -> None:
        """A party has the public data."""
        self._transfer_public(event.payload.device)

    def _job(self, device: int, model: Any, spec: TrainSpec, done: str, round_: int, setup: bool = False,
             control: Any = None) -> None:
        end = self.env.now if setup and not self.cfg.charge_setup_phases else None
        job, _ = self.env.start_job(device, model, PhaseMsg(device, round_), spec, control, done=done, end=end)
        self.jobs[device] = job

    def _collect(self, event: Event) -> Job:
        job = self.jobs.pop(event.payload.device)
        self.env.finish_training(job)
        return job

    def _transfer_public(self, device: int) -> None:
        pub = self.public
        seed = int(self.env.rng("fedmd.init", device).integers(_SEED_BOUND))  # each party its own initialisation
        task = PublicTask("pretrain", pub.rows, pub.size, init_seed=seed)
        spec = TrainSpec(epochs=self.cfg.transfer_public_epochs, batch_size=self.cfg.transfer_batch_size,
                         lr=self.env.spec.lr, method=task)
        self._job(device, self.env.global_model, spec, "transfer_public_done", -1, setup=True)

    def on_transfer_public_done(self, event: Event) -> None:
        """Public epochs done: the private transfer-learning epochs."""
        job = self._collect(event)
        self._job(job.device, job.params, self.private_spec, "transfer_private_done", -1, setup=True)

    def on_transfer_private_done(self, event: Event) -> None:
        """A party finished transfer learning; round 0 begins when every party has."""
        job = self._collect(event)
        self.model[job.device] = job.params
        self._step_done(job.device)

    def _step_done(self, device: int) -> None:
        self.ready.add(device)
        if len(self.ready) == self.n and not self.env.stopping:
            self._begin_round()

    # -- rounds -------------------------------------------------------------------------------------
    def _begin_round(self) -> None:
        env, pub, cfg = self.env, self.public, self.cfg
        self.ready = set()
        if not cfg.collaborate:  # the reference without collaboration: private epochs only
            for d in range(self.n):
                self._job(d, self.model[d], self.revisit_spec, "revisit_done", self.round)
            return
        # both ends draw A_t from the same stream: its indices are never sent
        seed = int(env.rng("public_subset", self.round).integers(_SEED_BOUND))
        scores = PublicTask("scores", pub.rows, self.align, seed, cfg.stratified)
        digest = dataclasses.replace(scores, kind="digest", loss="mae_logits")
        self._round_specs = (TrainSpec(epochs=1, batch_size=None, method=scores),
                             TrainSpec(epochs=cfg.digest_epochs, batch_size=cfg.digest_batch_size,
                                       lr=cfg.digest_lr if cfg.digest_lr is not None else env.spec.lr, method=digest))
        for d in range(self.n):
            self._job(d, self.model[d], self._round_specs[0], "scores_done", self.round)

    def _server(self, device: int) -> tuple[str, int]:
        return ("edge", int(self.env.world.edge_of[device])) if self.members else ("cloud", 0)

    def on_scores_done(self, event: Event) -> None:
        """A party's scores are computed: upload them (to its edge server, or to the cloud when flat)."""
        job = self._collect(event)
        self.jobs[job.device] = job  # kept until the scores arrive (they are the job's result)
        self.env.send(("device", job.device), self._server(job.device), "scores_arrived", event.payload,
                      "upload_scores", size=self.score_bytes)

    def on_scores_arrived(self, event: Event) -> None:
        """Scores reached their server. Flat: with every party's, the consensus is their uniform mean. With
        edge servers: with every member's, the edge sends their mean up, to be weighted by member count."""
        env = self.env
        device = event.payload.device
        scores = self.jobs.pop(device).params
        if not self.members:
            env.tier("cloud").add(scores, 1.0)
            self.ready.add(device)
            if len(self.ready) == self.n:
                self._consensus(sorted(self.ready), "device")
            return
        edge = int(env.world.edge_of[device])
        env.tier("edge", edge).add(scores, 1.0)
        arrived = self.edge_arrived[edge]
        arrived.add(device)
        if len(arrived) == len(self.members[edge]):
            mean = env.tier("edge", edge).commit(sorted(arrived))
            arrived.clear()
            self.edge_means[edge] = mean
            env.send(("edge", edge), ("cloud", 0), "edge_scores_arrived", EdgeMsg(edge, self.round), "upload_scores",
                     size=self.score_bytes)

    def on_edge_scores_arrived(self, event: Event) -> None:
        """An edge server's mean reached the cloud, weighted by its members; with every edge's, the consensus."""
        edge = event.payload.edge
        self.env.tier("cloud").add(self.edge_means.pop(edge), float(len(self.members[edge])))
        self.ready.add(edge)
        if len(self.ready) == len(self.members):
            self._consensus(sorted(self.ready), "edge")

    def _consensus(self, sources: list[int], source: str) -> None:
        env = self.env
        self.consensus = env.tier("cloud").commit(sources, source=source)
        self.ready = set()
        if env.stopping:
            return
        if not self.members:
            for d in range(self.n):
                env.send(("cloud", 0), ("device", d), "consensus_arrived", PhaseMsg(d, self.round),
                         "download_consensus", size=self.score_bytes)
            return
        for edge in sorted(self.members):
            env.send(("cloud", 0), ("edge", edge), "edge_consensus_arrived", EdgeMsg(edge, self.round),
                     "download_consensus", size=self.score_bytes)

    def on_edge_consensus_arrived(self, event: Event) -> None:
        """The consensus reached an edge server: forward it to its members."""
        edge = event.payload.edge
        for d in self.members[edge]:
            self.env.send(("edge", edge), ("device", d), "consensus_arrived", PhaseMsg(d, self.round),
                          "download_consensus", size=self.score_bytes)

    def on_consensus_arrived(self, event: Event) -> None:
        """Digest: train toward the consensus on A_t."""
        assert self._round_specs is not None
        device = event.payload.device
        self._job(device, self.model[device], self._round_specs[1], "digest_done", self.round,
                  control=self.consensus)

    def on_digest_done(self, event: Event) -> None:
        """Revisit: train on the private data."""
        job = self._collect(event)
        self._job(job.device, job.params, self.revisit_spec, "revisit_done", self.round)

    def on_revisit_done(self, event: Event) -> None:
        """The party's round is over; the next begins when every party's is."""
        job = self._collect(event)
        self.model[job.device] = job.params
        if len(self.ready) + 1 == self.n:
            self.round += 1
        self._step_done(job.device)

    # -- evaluation -----------------------------------------------------------------------------------
    def party_models(self) -> dict[int, Any] | None:
        """Each party's own model (the accuracy reported is their mean); none before transfer learning ends."""
        return dict(self.model) if len(self.model) == self.n else {}
