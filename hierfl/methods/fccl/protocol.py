"""FCCL: heterogeneous models that learn from each other on public data and keep what they know.

W. Huang, M. Ye, B. Du, "Learn from Others and Be Yourself in Heterogeneous Federated Learning",
CVPR 2022; the rules follow the authors' code (``WenkeHuang/FCCL``: ``fccl/Idea/Ours/FCCL.py``,
``fccl/Idea/utils_idea.py``), docs/explanation/algorithms.md §8.2. Device work: :mod:`hierfl.methods.fccl.trainer`;
costs and targets: :mod:`hierfl.methods.fccl.math`.

Every device (a *party*) runs its own architecture (``models:``) on data from its own domain.
Before the rounds each party pre-trains on its private data alone; that model is frozen as its
intra-domain teacher ``θ^*`` and is its first snapshot ``θ^{0}``. Every round ``t``:

1. *collaborative phase* over a fresh public subset ``A_t`` (stream ``("public_subset", t)``; its
   indices are never sent), in batches of ``public_batch_size``. With ``exchange: per_batch`` (the
   reference code's lock-step) each batch is a barrier: every party computes its logits ``Z_k`` on
   the batch (and its previous snapshot's, for its own entry of the target) and uploads them
   (``4·B·C`` bytes); the server averages them and sends the mean back; each party forms its target
   ``(Σ_j Z_j − Z_k + Z_k^{self})/K`` and takes one Adam step on the cross-correlation loss. With
   ``per_round`` the logits of the whole ``A_t`` are exchanged once, then every batch is stepped
   against that target;
2. *local phase*: the private epochs with cross-entropy plus ``λ_loc`` times the KL divergences
   from the previous snapshot ``θ^{t−1}`` (inter-domain teacher) and from ``θ^*`` (intra-domain);
3. the result becomes the snapshot ``θ^{t}``; the next round begins when every party is through.

The snapshots live in the device's host (per-device state: counted in ``summary.json``'s
``device_state``, checkpointed, reset with it). The cloud counts one aggregation per round (the
round's last exchange). At a tier of a hierarchy each edge server averages its members' logits and
the cloud weights the edge means by member count: the same mean, every hop carrying ``4·B·C`` bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.methods.fccl.math import FCCLJob, num_batches
from hierfl.core.jobs import Job
from hierfl.core.work import TrainSpec
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import (
    PROTOCOLS,
    AggregationPoint,
    DeviceMsg,
    Protocol,
    ProtocolConfig,
)

__all__ = ["FCCL", "FCCLConfig", "FCCLEdgeMsg", "FCCLMsg"]

_SEED_BOUND = 2 ** 62


@dataclass(frozen=True)
class FCCLMsg(DeviceMsg):
    """A party's step: ``round`` (-1 while pre-training) and public ``batch`` (-1 outside the exchanges)."""

    round: int
    batch: int = -1


@dataclass(frozen=True)
class FCCLEdgeMsg(Payload):
    """An edge server's mean of its members' logits (up) or the parties' mean (down)."""

    edge: int
    round: int
    batch: int


@PROTOCOLS.register
class FCCLConfig(ProtocolConfig):
    """``protocol: {name: fccl, exchange: per_batch, ...}``; needs ``data.public`` (labels unused)."""

    name: Literal["fccl"] = "fccl"
    # what its own loops on the module cannot honour (hierfl.assemble.loops)
    module_loops: ClassVar[Mapping[str, str]] = {
        "dropout": "its collaborative and local phases run loops of their own"}
    # the collaborative phase's knobs mean nothing to the reference without collaboration,
    # which sweeps derive from a collaborating base: a warning, not a refusal
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        key: ReadWith("collaborate", (True,), warn=True)
        for key in ("lambda_col", "self_target", "exchange", "public_size", "public_batch_size")}
    exchanges: ClassVar[str] = "outputs"
    uses_public_data: ClassVar[bool] = True
    supports_churn: ClassVar[bool] = False
    decides_on_models: ClassVar[str | None] = "exchanges the models' logits"
    # every phase steps Adam at protocol.lr (and protocol.weight_decay), never the training section's SGD
    unread_training: ClassVar[tuple[str, ...]] = ("lr", "momentum", "weight_decay", "optimizer", "nesterov", "betas",
                                                  "eps", "lr_schedule", "clip_norm", "optimizer_state")
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud (logits)", synchronous=True, takes_policy=False,
                         note="every exchange is a barrier over all parties' logits; no straggler policy is "
                              "implemented for it"),)

    lambda_col: NonNegativeFloat = Field(
        default=0.0051, description="weight of the off-diagonal terms of the cross-correlation loss, which push "
                                    "different class dimensions apart (authors' code: 0.0051)")
    self_target: Literal["previous", "current"] = Field(
        default="previous", description="a party's own entry in its collaboration target: the logits of its "
                                        "previous-round snapshot (previous, the CVPR code) or its current logits "
                                        "(current, the later FCCL+ code: the target is the plain mean)")
    exchange: Literal["per_batch", "per_round"] = Field(
        default="per_batch", description="per_batch: one exchange, a barrier, per public batch (design default, "
                                         "as the reference code's lock-step); per_round: the logits of the whole "
                                         "public subset exchanged once per round, every batch then stepped "
                                         "against them (a cheaper approximation)")
    lr: PositiveFloat = Field(default=1e-3, description="Adam's learning rate in both phases (authors' code: 1e-3; "
                                                        "a fresh optimiser per public batch); training.lr, "
                                                        "momentum and weight_decay are not read, and refused if set")
    weight_decay: NonNegativeFloat = Field(
        default=0.0, description="Adam's weight decay in the local phase (CVPR code: 0; the FCCL+ code uses 1e-5)")
    lambda_loc: NonNegativeFloat = Field(
        default=1.0, description="weight of each distillation term of the local loss (the code's 1; the paper "
                                 "writes L_CE + λ (L_inter + L_intra), per the project's paper notes)")
    inter_teacher: Literal["previous", "collaborated"] = Field(
        default="previous", description="the local phase's inter-domain teacher: the previous round's snapshot "
                                        "(previous, the code) or the model as this round's collaborative phase "
                                        "left it (collaborated; design knob)")
    public_size: PositiveInt = Field(
        default=5000, description="samples of the round's public subset A_t, re-drawn every round (authors' "
                                  "code: 5000); the default is capped at the public split's size, any other value above it is refused")
    public_batch_size: PositiveInt = Field(
        default=512, description="public batch size B_p (CVPR code: 512; FCCL+: 256); no batch may hold a "
                                 "single sample (the standardisation over the batch needs two); the default is "
                                 "capped at the subset's size, any other value above it is refused")
    local_epochs: PositiveInt | None = Field(
        default=None, description="epochs of the local phase on the private data, batch training.batch_size; "
                                  "null = the training section's length, training.epochs or training.local_steps "
                                  "(design default; the code sets the epochs per party)")
    pretrain_epochs: PositiveInt = Field(default=40, description="epochs of the pre-training on the private data "
                                                                 "(CVPR code: 40; FCCL+: 50)")
    pretrain_batch_size: PositiveInt = Field(default=256, description="batch size of the pre-training (code: 256)")
    charge_setup_phases: bool = Field(
        default=True, description="charge the pre-training (and a download_once of the public data) in virtual "
                                  "time before round 1 (design default); false: it runs in zero virtual time")

    collaborate: bool = Field(
        default=True, description="false: the reference without collaboration (design default true): after "
                                  "pre-training every party only runs its local phase, round after round, and "
                                  "nothing is exchanged (with lambda_loc: 0, plain training alone); needs "
                                  "stop.virtual_time_s; lambda_col, self_target, exchange, public_size and "
                                  "public_batch_size are then unused, and a warning names any set")

    def check(self, scenario: Any) -> list[Problem]:
        """Public data at the devices, no one-sample public batch, the plain local trainer."""
        problems: list[Problem] = []
        if not self.collaborate and scenario.stop.virtual_time_s is None:
            problems.append(Problem("stop.virtual_time_s", "fccl with collaborate: false makes no cloud "
                                    "aggregation, so stop.rounds never ends it; set stop.virtual_time_s"))
        pub = scenario.data.public
        if pub is None:
            problems.append(Problem("data.public", "fccl aligns logits on public data: set data.public (size, "
                                    "placement; labels are not used)"))
        else:
            if pub.placement == "server_only":
                problems.append(Problem("data.public.placement", "fccl's parties compute logits on the public "
                                        "data, so they must hold it; allowed: preinstalled, download_once",
                                        pub.placement))
            if self.non_default("public_size") and self.public_size > pub.size:
                problems.append(Problem("protocol.public_size", f"larger than the public split (data.public.size = "
                                        f"{pub.size}), so it would be capped; allowed: 1..{pub.size}",
                                        self.public_size, refused=True))
            size = min(self.public_size, pub.size)
            if self.non_default("public_batch_size") and self.public_batch_size > size and self.collaborate:
                problems.append(Problem("protocol.public_batch_size", f"larger than the round's public subset ({size} "
                                        f"samples), so it would be capped; allowed: 2..{size}",
                                        self.public_batch_size, refused=True))
            elif size % self.public_batch_size == 1 or size < 2:
                problems.append(Problem("protocol.public_batch_size", f"the public subset of {size} samples leaves "
                                        "a batch of one sample, whose logits cannot be standardised over the batch; "
                                        "choose a batch size that leaves at least two", self.public_batch_size))
        trainer = scenario.training.trainer.name
        if trainer != "sgd":
            problems.append(Problem("training.trainer", "fccl's jobs are its own (pre-training, logits, "
                                    "collaboration, local phase with Adam); allowed: sgd", trainer))
        return problems

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """Every party's logits at the cloud (flat), or every edge server's mean of its members'."""
        return {"cloud": edges if edges else devices, "edge": None}

    def create(self, env: Env) -> FCCL:
        """An FCCL run."""
        return FCCL(self, env)


class FCCL(Protocol):
    """Pre-training, then synchronous rounds of logits exchanges (collaboration) and a local phase."""

    def __init__(self, cfg: FCCLConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        public = env.world.public
        if public is None:  # the load-time check refuses this; a direct use of the class gets a clear error
            raise ValueError("fccl needs the public split (data.public)")
        self.public = public
        self.n = env.world.num_devices
        self.classes = int(env.world.num_classes)
        size = min(cfg.public_size, public.size)
        per_batch = cfg.exchange == "per_batch"
        self.batches = num_batches(size, cfg.public_batch_size) if per_batch else 1
        self.base = FCCLJob("logits", rows=public.rows, subset_size=size, batch_size=cfg.public_batch_size,
                            per_batch=per_batch, self_target=cfg.self_target, inter_teacher=cfg.inter_teacher,
                            parties=self.n, lambda_col=cfg.lambda_col, lr=cfg.lr, weight_decay=cfg.weight_decay,
                            lambda_loc=cfg.lambda_loc)
        base = env.spec
        # the local phase: local_epochs, or the training section's length (its epochs or local_steps)
        length = {"epochs": cfg.local_epochs, "steps": None} if cfg.local_epochs else {"epochs": base.epochs,
                                                                                        "steps": base.steps}
        self.local_spec = TrainSpec(**length, batch_size=base.batch_size, method=dataclasses.replace(self.base,
                                                                                                    kind="local"))
        edge_of = env.world.edge_of
        self.members: dict[int, list[int]] = {}
        if env.world.num_edges:
            for d in range(self.n):
                self.members.setdefault(int(edge_of[d]), []).append(d)
        self.round = 0
        self.model: dict[int, Any] = {}           # each party's model θ_k (its snapshots stay on its device)
        self.ready: set[int] = set()              # parties through the current step
        self.batch_of: dict[int, int] = {}        # each party's public batch in the round
        self.arrived: dict[tuple[str, int], dict[int, Any]] = {}  # logits (or edge means) at a server
        self.edge_means: dict[int, Any] = {}      # an edge's mean of its members' logits, on its way up
        self.mean: Any = None                     # the current exchange's mean, on its way down
        self.seed = 0                             # the round's A_t seed

    # -- pre-training ------------------------------------------------------------------------------
    def start(self) -> None:
        """Every party pre-trains at t = 0 (after downloading the public data if it is download_once)."""
        for d in range(self.n):
            if self.public.placement == "download_once" and self.cfg.charge_setup_phases:
                self.env.send(("cloud", 0), ("device", d), "public_ready", FCCLMsg(d, -1), "download_public",
                              size=self.public.download_bytes)
            else:
                self._pretrain(d)

    def on_public_ready(self, event: Event) -> None:
        """A party holds the public data."""
        self._pretrain(event.payload.device)

    def _job(self, device: int, model: Any, spec: TrainSpec, done: str, batch: int = -1, setup: bool = False,
             control: Any = None) -> None:
        end = self.env.now if setup and not self.cfg.charge_setup_phases else None
        job, _ = self.env.start_job(device, model, FCCLMsg(device, self.round if not setup else -1, batch), spec,
                                    control, done=done, end=end)
        self.jobs[device] = job

    def _collect(self, event: Event) -> Job:
        job = self.jobs.pop(event.payload.device)
        self.env.finish_training(job)
        return job

    def _pretrain(self, device: int) -> None:
        seed = int(self.env.rng("fccl.init", device).integers(_SEED_BOUND))  # each party its own initialisation
        job = dataclasses.replace(self.base, kind="pretrain", init_seed=seed)
        spec = TrainSpec(epochs=self.cfg.pretrain_epochs, batch_size=self.cfg.pretrain_batch_size, method=job)
        self._job(device, self.env.global_model, spec, "pretrain_done", setup=True)

    def on_pretrain_done(self, event: Event) -> None:
        """A party's pre-trained model (kept on its device as θ^* and θ^0); round 0 begins with every party's."""
        job = self._collect(event)
        self.model[job.device] = job.params
        self._party_ready(job.device)

    def _party_ready(self, device: int) -> None:
        self.ready.add(device)
        if len(self.ready) == self.n and not self.env.stopping:
            self._begin_round()

    # -- collaborative phase ---------------------------------------------------------------------------
    def _begin_round(self) -> None:
        self.ready = set()
        if not self.cfg.collaborate:  # the reference without collaboration: the local phase only
            for d in range(self.n):
                self._job(d, self.model[d], self.local_spec, "local_done")
            return
        # both ends derive A_t and its batches from the same stream: no index is ever sent
        self.seed = int(self.env.rng("public_subset", self.round).integers(_SEED_BOUND))
        for d in range(self.n):
            self.batch_of[d] = 0
            self._logits(d)

    def _exchange_job(self, kind: str, batch: int) -> FCCLJob:
        return dataclasses.replace(self.base, kind=kind, subset_seed=self.seed,
                                   batch=batch if self.cfg.exchange == "per_batch" else None)

    def _logits(self, device: int) -> None:
        batch = self.batch_of[device]
        spec = TrainSpec(epochs=1, batch_size=None, method=self._exchange_job("logits", batch))
        self._job(device, self.model[device], spec, "logits_done", batch)

    def _bytes(self, batch: int) -> int:
        """One logits message: float32, batch (or A_t) × C."""
        return 4 * self._exchange_job("logits", batch).samples() * self.classes

    def _server(self, device: int) -> tuple[str, int]:
        return ("edge", int(self.env.world.edge_of[device])) if self.members else ("cloud", 0)

    def on_logits_done(self, event: Event) -> None:
        """A party's logits: upload them (to its edge server, or to the cloud when flat)."""
        job = self._collect(event)
        self.jobs[job.device] = job  # kept until the logits arrive (they are the job's result)
        self.env.send(("device", job.device), self._server(job.device), "logits_arrived", event.payload,
                      "upload_logits", size=self._bytes(event.payload.batch))

    def _fold(self, tier: str, entity: int, inputs: dict[int, Any], weights: dict[int, float], source: str,
              batch: int) -> Any:
        """The weighted mean of ``inputs`` at a server; the round's last exchange is its counted aggregation."""
        keys = sorted(inputs)
        point = self.env.tier(tier, entity)
        if batch < self.batches - 1:
            return point.average([inputs[k] for k in keys], [weights[k] for k in keys])
        for k in keys:
            point.add(inputs[k], weights[k])
        return point.commit(keys, source=source)

    def on_logits_arrived(self, event: Event) -> None:
        """Logits reached their server; with all of them, the mean goes down (flat) or up (edge)."""
        env = self.env
        msg = event.payload
        logits = self.jobs.pop(msg.device).params
        server = self._server(msg.device)
        got = self.arrived.setdefault(server, {})
        got[msg.device] = logits
        if server[0] == "cloud":
            if len(got) == self.n:
                self.mean = self._fold("cloud", 0, self.arrived.pop(server), dict.fromkeys(got, 1.0), "device", msg.batch)
                self._send_down(msg.batch)
            return
        edge = server[1]
        if len(got) == len(self.members[edge]):
            mean = self._fold("edge", edge, self.arrived.pop(server), dict.fromkeys(got, 1.0), "device", msg.batch)
            self.edge_means[edge] = mean  # on its way to the cloud
            env.send(("edge", edge), ("cloud", 0), "edge_logits_arrived", FCCLEdgeMsg(edge, self.round, msg.batch),
                     "upload_logits", size=self._bytes(msg.batch))

    def on_edge_logits_arrived(self, event: Event) -> None:
        """An edge's mean reached the cloud; with every edge's, weighted by members, the parties' mean."""
        edge = event.payload.edge
        got = self.arrived.setdefault(("cloud", 0), {})
        got[edge] = self.edge_means.pop(edge)
        if len(got) < len(self.members) or self.env.stopping:
            return
        weights = {e: float(len(self.members[e])) for e in got}
        self.mean = self._fold("cloud", 0, self.arrived.pop(("cloud", 0)), weights, "edge", event.payload.batch)
        self._send_down(event.payload.batch)

    def _send_down(self, batch: int) -> None:
        env = self.env
        if env.stopping:
            return
        size = self._bytes(batch)
        if not self.members:
            for d in range(self.n):
                env.send(("cloud", 0), ("device", d), "mean_arrived", FCCLMsg(d, self.round, batch), "download_logits",
                         size=size)
            return
        for edge in sorted(self.members):
            env.send(("cloud", 0), ("edge", edge), "edge_mean_arrived", FCCLEdgeMsg(edge, self.round, batch),
                     "download_logits", size=size)

    def on_edge_mean_arrived(self, event: Event) -> None:
        """The mean reached an edge server: forward it to its members."""
        msg = event.payload
        for d in self.members[msg.edge]:
            self.env.send(("edge", msg.edge), ("device", d), "mean_arrived", FCCLMsg(d, self.round, msg.batch),
                          "download_logits", size=self._bytes(msg.batch))

    def on_mean_arrived(self, event: Event) -> None:
        """Collaboration: Adam steps on the cross-correlation loss toward the target formed from the mean."""
        msg = event.payload
        spec = TrainSpec(epochs=1, batch_size=None, method=self._exchange_job("collab", msg.batch))
        self._job(msg.device, self.model[msg.device], spec, "collab_done", msg.batch, control=self.mean)

    def on_collab_done(self, event: Event) -> None:
        """The party's next public batch, or its local phase after the last."""
        job = self._collect(event)
        d = job.device
        self.model[d] = job.params
        if self.batch_of[d] + 1 < self.batches:
            self.batch_of[d] += 1
            self._logits(d)
            return
        self._job(d, job.params, self.local_spec, "local_done")

    # -- local phase -------------------------------------------------------------------------------------
    def on_local_done(self, event: Event) -> None:
        """The party's round is over (its result is its next snapshot); the next begins with every party's."""
        job = self._collect(event)
        self.model[job.device] = job.params
        if len(self.ready) + 1 == self.n:
            self.round += 1
        self._party_ready(job.device)

    # -- evaluation ----------------------------------------------------------------------------------------
    def party_models(self) -> dict[int, Any] | None:
        """Each party's own model (the accuracy reported is their mean); none before pre-training ends."""
        return dict(self.model) if len(self.model) == self.n else {}
