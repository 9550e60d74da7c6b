"""RHFL: heterogeneous models that align on public data, robust to noisy private labels.

X. Fang, M. Ye, "Robust Federated Learning with Noisy and Heterogeneous Clients", CVPR 2022; the rules
follow the authors' code (``FangXiuwen/Robust_FL``: ``HHF.py``, ``loss.py``). docs/explanation/algorithms.md §8.3.

Every device (a *party*) runs its own architecture (``models:``) and holds noisy private labels
(``data.label_noise``). Before the rounds each party trains its fresh model on its private data with the
symmetric cross-entropy (SCE, ``a·CE + b·RCE``). Then every round ``t``:

1. *client confidence* (CCR): each party reports ``F_k = (L_k^{t−1} − L_k^t) / L_k^t`` from the mean SCE of
   its model on its private data at the end of its last two private jobs (a 64-byte scalar); the server
   that closes the exchange turns the reports into weights ``W = softmax(1/(K−1) + η·F/ΣF)``
   (:func:`hierfl.methods.rhfl.math.ccr_weights`); round 0: every ``W_k = 1/(K−1)``;
2. *alignment* on the round's public set ``A_t`` (the stream ``("public_subset", t)``), batch by batch
   (``exchange: per_batch``, as the code's lock-step): each party computes its class probabilities
   ``p_k`` on the batch (forward only) and uploads them (``4·B·C`` bytes); the server sums
   ``Σ_j W_j p_j`` (score sums compose through edge servers) and returns to each party ``q_k =
   Σ_{j≠k} W_j p_j`` (``4·B·C`` bytes); the party takes one SGD step on
   ``−Σ_c q_c log softmax(z_k)_c`` — the gradient of the code's ``Σ_{j≠k} W_j·KL(p_j ‖ p_k)``. Its forward
   pass is the one that produced ``p_k``, so the step costs the backward pass only (2 passes per sample).
   ``exchange: per_round``: one exchange of the probabilities on all of ``A_t``, then one epoch toward
   the fixed targets (cheaper, an approximation);
3. *local learning*: ``E = max(⌊|A_t| / n_k⌋, 1)`` epochs of SCE on the noisy private data, followed by the
   CCR pass (one forward pass per private sample) whose mean loss is the next round's report.

A party moves on as soon as its own messages allow: there is no round barrier beyond the exchange of each
batch. Virtual time of a batch: ``max_k (B·F_k / f_k + up_k) + down_k + B·2F_k / f_k``; of the local
phase ``E_k·n_k·3F_k / f_k + n_k·F_k / f_k``.

At a tier of a hierarchy: with ``ccr_scope: global`` the cloud closes every exchange; an edge server sums
its members' ``W_j p_j`` and sends the sum up (a weighted mean and its weight), the cloud returns the
total, and the edge forms each member's ``q_k``: every hop carries ``4·B·C`` bytes, and the cloud sends
each edge its members' weights once a round. ``ccr_scope: edge`` closes everything at the edge servers:
each runs RHFL among its own members, with weights from their reports only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import ConfigError, Problem
from hierfl.core.jobs import Endpoint, Job
from hierfl.methods.rhfl.math import SCESpec, confidence_weights, first_round_weights, loss_decrease
from hierfl.core.work import PublicTask, TrainSpec
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["BatchMsg", "RHFL", "RHFLConfig", "ServerMsg"]

_SEED_BOUND = 2 ** 62
SCALAR_BYTES = 64  # a scalar report is a minimum-size message


@dataclass(frozen=True)
class BatchMsg(DeviceMsg):
    """A party's step: ``round`` (-1 during pre-training) and public ``batch`` (-1 outside the alignment)."""

    round: int
    batch: int = -1


@dataclass(frozen=True)
class ServerMsg(Payload):
    """An edge server's partial sum (up), the total or the weights (down), for ``round`` and ``batch``."""

    edge: int
    round: int
    batch: int = -1


@PROTOCOLS.register
class RHFLConfig(ProtocolConfig):
    """``protocol: {name: rhfl, eta: 0.5, sce_a: 0.1, sce_b: 1.0, ...}``; needs ``data.public``."""

    name: Literal["rhfl"] = "rhfl"
    # what its own loops on the module cannot honour (hierfl.assemble.loops)
    module_loops: ClassVar[Mapping[str, str]] = {
        "dropout": "its alignment and private training run loops of their own"}
    # the exchange's knobs mean nothing to the reference without collaboration, which sweeps derive from a
    # collaborating base: a warning, not a refusal (align_size still sets the default private epochs)
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        key: ReadWith("collaborate", (True,), warn=True)
        for key in ("eta", "exchange", "public_batch_size", "align_lr", "ccr_guard")}
    exchanges: ClassVar[str] = "outputs"
    uses_public_data: ClassVar[bool] = True
    supports_churn: ClassVar[bool] = False
    decides_on_models: ClassVar[str | None] = "exchanges the models' class probabilities"
    # every job is its own (SCE training, alignment): none keeps an optimizer state across jobs
    unread_training: ClassVar[tuple[str, ...]] = ("optimizer_state",)
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→server (class probabilities)", synchronous=True, takes_policy=False,
                         note="each exchange sums every party's weighted probabilities on one public batch; no "
                              "straggler policy is implemented for it"),)

    eta: NonNegativeFloat = Field(
        default=0.5, description="client confidence re-weighting strength η (authors' code: 0.5, its `beta`); "
                                 "0 disables the re-weighting (every party's weight 1/K after round 0)")
    sce_a: NonNegativeFloat = Field(
        default=0.1, description="weight a of the cross-entropy in the local symmetric cross-entropy a·CE + b·RCE "
                                 "(authors' code: 0.1); sce_a: 1, sce_b: 0 trains with plain CE. Client confidence is always measured "
                                 "with the code's SCE (a = 0.1, b = 1.0), whatever the local loss")
    sce_b: NonNegativeFloat = Field(
        default=1.0, description="weight b of the reverse cross-entropy in the local loss (authors' code: 1.0)")
    exchange: Literal["per_batch", "per_round"] = Field(
        default="per_batch", description="per_batch: one exchange of probabilities per public batch, a barrier "
                                         "each (the code's lock-step; design default); per_round: one exchange on "
                                         "the whole public set per round, then an epoch toward fixed targets "
                                         "(cheaper approximation)")
    ccr_scope: Literal["global", "edge"] = Field(
        default="global", description="where the exchanges close and the confidence weights are computed: global "
                                      "(the cloud, over every party; edge servers relay sums; design default) or "
                                      "edge (each edge server runs RHFL among its members; needs edge servers)")
    align_size: PositiveInt | None = Field(
        default=None, description="public samples aligned on per round, drawn from the stream public_subset; null "
                                  "= the whole public split, reshuffled every round (authors' code); a value above the split's size is "
                                  "refused")
    public_batch_size: PositiveInt = Field(
        default=256, description="public batch size of the alignment (authors' code: 256); the default is capped "
                                 "at the samples aligned on per round, any other value above them is refused")
    align_lr: PositiveFloat | None = Field(
        default=None, description="SGD learning rate of the alignment steps; null = training.lr (design default: "
                                  "the code takes an Adam step at 1e-3, this emulator's trainer is SGD)")
    local_epochs: PositiveInt | None = Field(
        default=None, description="private SCE epochs per round; null = max(floor(|A_t| / n_k), 1) per party "
                                  "(authors' code)")
    pretrain_epochs: PositiveInt = Field(
        default=40, description="private SCE epochs of each party's fresh model before round 0 (authors' code: 40)")
    charge_setup_phases: bool = Field(
        default=True, description="charge the pre-training (and a download_once of the public data) in virtual "
                                  "time before round 0 (design default); false: it runs in zero virtual time")
    ccr_guard: PositiveFloat = Field(
        default=1e-12, description="when |Σ_j F_j| is below this, the confidence term is dropped (every a_k = "
                                   "1/(K−1)) instead of dividing by about zero (design default; the code divides)")
    collaborate: bool = Field(
        default=True, description="false: the no-collaboration reference (design default true): after pre-training "
                                  "every party only trains on its private data with SCE, round after round; eta, "
                                  "exchange, public_batch_size, align_lr and ccr_guard are then unused, and a warning "
                                  "names any set")

    def check(self, scenario: Any) -> list[Problem]:
        """Public data at the devices, at least 2 parties, the plain trainer; a time budget where no cloud
        aggregation happens (with ccr_scope global, each exchange the cloud closes counts for stop.rounds)."""
        problems: list[Problem] = []
        pub = scenario.data.public
        if pub is None:
            problems.append(Problem("data.public", "rhfl aligns the parties on public data: set data.public "
                                    "(size, placement)"))
        else:
            if pub.placement == "server_only":
                problems.append(Problem("data.public.placement", "rhfl's parties compute probabilities on the "
                                        "public data, so they must hold it; allowed: preinstalled, download_once",
                                        pub.placement))
            aligned = pub.size if self.align_size is None else min(self.align_size, pub.size)
            if (self.collaborate and self.exchange == "per_batch" and self.non_default("public_batch_size")
                    and self.public_batch_size > aligned):
                problems.append(Problem("protocol.public_batch_size", f"larger than the public samples aligned on "
                                        f"per round ({aligned}), so it would be capped; allowed: 1..{aligned}",
                                        self.public_batch_size, refused=True))
            if self.align_size is not None and self.align_size > pub.size:
                problems.append(Problem("protocol.align_size", f"larger than the public split (data.public.size = "
                                        f"{pub.size}), so it would be capped; allowed: 1..{pub.size}, or null (the "
                                        "whole split)", self.align_size, refused=True))
        if self.sce_a + self.sce_b <= 0:
            problems.append(Problem("protocol.sce_b", "sce_a + sce_b must be > 0 (both terms off leaves no local "
                                    "loss)", self.sce_b))
        if scenario.devices.count < 2:
            problems.append(Problem("devices.count", "rhfl aligns each party with the others: it needs at least 2 "
                                    "devices", scenario.devices.count))
        edges = scenario.topology.edge_servers or 0
        if self.ccr_scope == "edge" and edges < 1:
            problems.append(Problem("protocol.ccr_scope", "ccr_scope edge closes the exchanges at edge servers, but "
                                    "topology.edge_servers is 0; allowed: global, or add edge servers", self.ccr_scope))
        if scenario.stop.virtual_time_s is None and (self.ccr_scope == "edge" or not self.collaborate):
            problems.append(Problem("stop.virtual_time_s", "rhfl with ccr_scope edge or collaborate false makes no "
                                    "cloud aggregation, so stop.rounds never ends it; set stop.virtual_time_s"))
        trainer = scenario.training.trainer.name
        if trainer != "sgd":
            problems.append(Problem("training.trainer", "rhfl's jobs are its own (SCE training, probabilities, "
                                    "alignment) on the plain local trainer; allowed: sgd", trainer))
        return problems

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """Every party's probabilities at the closing server, or every edge server's sum at the cloud."""
        if self.ccr_scope == "edge":
            return {"cloud": None, "edge": None}
        return {"cloud": edges if edges else devices, "edge": None}

    def create(self, env: Env) -> RHFL:
        """An RHFL run."""
        return RHFL(self, env)


@dataclass
class _Server:
    """What one server of the exchange holds: its parties (or, at the cloud over edges, its edges), the
    confidence weights per round, the probabilities of the batch being exchanged."""

    members: list[int]                                       # parties below it
    weights: dict[int, dict[int, float]] = field(default_factory=dict)    # round → party → W
    reports: dict[int, dict[int, float]] = field(default_factory=dict)    # round → party → F (closer only)
    probs: dict[tuple[int, int], dict[int, Any]] = field(default_factory=dict)  # (round, batch) → party → p
    sums: dict[tuple[int, int], dict[int, tuple[Any, float]]] = field(default_factory=dict)  # (round, batch) →
    # edge → its weighted mean and weight (the cloud over edge servers)


class RHFL(Protocol):
    """Pre-training, then rounds of confidence weights → per-batch alignment → local SCE epochs."""

    def __init__(self, cfg: RHFLConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        public = env.world.public
        if public is None:  # the load-time check refuses this; a direct use of the class gets a clear error
            raise ValueError("rhfl needs the public split (data.public)")
        self.public = public
        world = env.world
        self.n = world.num_devices
        self.num_classes = int(world.num_classes)
        self.align = public.size if cfg.align_size is None else min(cfg.align_size, public.size)
        batch = self.align if cfg.exchange == "per_round" else min(cfg.public_batch_size, self.align)
        self.windows = [(s, min(s + batch, self.align)) for s in range(0, self.align, batch)]
        edge_of = world.edge_of
        self.edge_members: dict[int, list[int]] = {}
        if world.num_edges:
            for d in range(self.n):
                self.edge_members.setdefault(int(edge_of[d]), []).append(d)
        # the servers that close the exchanges: the cloud over every party, or each edge over its members
        self.closer: dict[int, Endpoint] = {}
        self.servers: dict[Endpoint, _Server] = {}
        if cfg.ccr_scope == "edge":
            for e, members in self.edge_members.items():
                self.servers[("edge", e)] = _Server(members)
                for d in members:
                    self.closer[d] = ("edge", e)
        else:
            self.servers[("cloud", 0)] = _Server(list(range(self.n)))
            for e, members in self.edge_members.items():  # relays: they weight and sum their members' p
                self.servers[("edge", e)] = _Server(members)
            for d in range(self.n):
                self.closer[d] = ("cloud", 0)
        lonely = [f"{kind} {i}" for (kind, i), server in sorted(self.servers.items())
                  if self.closer.get(server.members[0]) == (kind, i) and len(server.members) < 2]
        if lonely:  # (known once the devices are grouped: refused as a scenario problem, with its key)
            raise ConfigError([Problem("protocol.ccr_scope", f"{', '.join(lonely)} would close an exchange over a "
                                       "single party, and RHFL aligns each party with the others; allowed: global, "
                                       "or fewer edge servers (topology.edge_servers)", cfg.ccr_scope)])
        self.model: dict[int, Any] = {}       # each party's latest model
        self.loss: dict[int, list[float]] = {d: [] for d in range(self.n)}  # its last two reported losses
        self.round = [-1] * self.n
        self.batch = [-1] * self.n
        self.private_epochs = [cfg.local_epochs or max(self.align // max(int(world.samples[d]), 1), 1)
                               for d in range(self.n)]
        self.subset_seed: dict[int, int] = {}
        self.bytes_per_sample = 4 * self.num_classes  # float32 probabilities
        # values in flight, keyed by what carries them (the messages themselves are typed payloads)
        self._report_value: dict[tuple[int, int], float] = {}            # (party, round) → F_k
        self._kept: dict[tuple[int, int, int], dict[int, Any]] = {}      # (edge, round, batch) → members' p
        self._up: dict[tuple[int, int, int], tuple[Any, float]] = {}      # (edge, round, batch) → its mean, weight
        self._total: dict[tuple[int, int], tuple[Any, float]] = {}       # (round, batch) → cloud mean, weight
        self._relayed: dict[tuple[int, int], int] = {}                    # (round, batch) → edges served
        self._target: dict[int, Any] = {}                                  # party → its target on the way

    # -- helpers ------------------------------------------------------------------------------------
    def _hop(self, device: int) -> Endpoint:
        """The server a party talks to: its edge server, or the cloud when flat."""
        return ("edge", int(self.env.world.edge_of[device])) if self.edge_members else ("cloud", 0)

    def _job(self, device: int, model: Any, spec: TrainSpec, done: str, msg: BatchMsg, setup: bool = False,
             control: Any = None) -> None:
        end = self.env.now if setup and not self.cfg.charge_setup_phases else None
        job, _ = self.env.start_job(device, model, msg, spec, control, done=done, end=end)
        self.jobs[device] = job

    def _collect(self, event: Event) -> tuple[Job, dict[str, float]]:
        job = self.jobs.pop(event.payload.device)
        return job, self.env.finish_training(job)

    def _sce_spec(self, device: int, epochs: int, report: bool, init_seed: int | None = None) -> TrainSpec:
        sce = SCESpec(self.cfg.sce_a, self.cfg.sce_b, report=report, init_seed=init_seed)
        return dataclasses.replace(self.env.spec, epochs=epochs, steps=None, method=sce)

    def _task(self, round_: int, batch: int, kind: str) -> PublicTask:
        seed = self.subset_seed.get(round_)
        if seed is None:  # both ends draw A_t and its order from the same stream: its indices never travel
            seed = self.subset_seed[round_] = int(self.env.rng("public_subset", round_).integers(_SEED_BOUND))
            self.subset_seed.pop(round_ - 2, None)  # (no party lags more than a round behind another)
        per_batch = self.cfg.exchange == "per_batch"
        return PublicTask(kind, self.public.rows, self.align, seed, stratified=False, loss="soft_ce",
                          window=self.windows[batch] if per_batch else None, teacher_is_prob=True,
                          reuse_forward=per_batch and kind == "align")

    def batch_bytes(self, batch: int) -> int:
        """Bytes of one probability or target message of public batch ``batch``: 4 per sample and class."""
        start, stop = self.windows[batch]
        return self.bytes_per_sample * (stop - start)

    def _record_loss(self, device: int, stats: dict[str, float]) -> None:
        if "ccr_loss" not in stats:
            raise ValueError(f"t={self.env.now:.6g}s device {device}: rhfl's private job returned no loss report "
                             "(training.trainer must run the jobs: sgd)")
        self.loss[device] = (self.loss[device] + [float(stats["ccr_loss"])])[-2:]

    # -- pre-training ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Every party starts its pre-training at t = 0 (after downloading the public data if its placement
        is download_once)."""
        for d in range(self.n):
            if self.public.placement == "download_once" and self.cfg.charge_setup_phases:
                self.env.send(("cloud", 0), ("device", d), "public_ready", BatchMsg(d, -1), "download_public",
                              size=self.public.download_bytes)
            else:
                self._pretrain(d)

    def on_public_ready(self, event: Event) -> None:
        """A party has the public data."""
        self._pretrain(event.payload.device)

    def _pretrain(self, device: int) -> None:
        seed = int(self.env.rng("rhfl.init", device).integers(_SEED_BOUND))  # each party its own initialisation
        spec = self._sce_spec(device, self.cfg.pretrain_epochs, report=self.cfg.collaborate, init_seed=seed)
        self._job(device, self.env.global_model, spec, "local_done", BatchMsg(device, -1), setup=True)

    # -- rounds ---------------------------------------------------------------------------------------
    def on_local_done(self, event: Event) -> None:
        """A party's private epochs are over (its pre-training, or a round's local learning): its next round."""
        job, stats = self._collect(event)
        d = job.device
        self.model[d] = job.params
        if self.env.stopping:
            return
        self.round[d] += 1
        if not self.cfg.collaborate:  # the reference without collaboration: private epochs only
            self._job(d, self.model[d], self._sce_spec(d, self.private_epochs[d], report=False), "local_done",
                      BatchMsg(d, self.round[d]))
            return
        self._record_loss(d, stats)
        r = self.round[d]
        if r >= 1:  # report the loss decrease (round 0's weights are fixed)
            prev, cur = self.loss[d]  # the device keeps its previous loss and reports F_k only
            self._report_value[(d, r)] = float(loss_decrease(np.array([prev]), np.array([cur]))[0])
            self.env.send(("device", d), self._hop(d), "report_arrived", BatchMsg(d, r), "upload_report",
                          size=SCALAR_BYTES)
        self._next_batch(d, 0)

    def _next_batch(self, device: int, batch: int) -> None:
        self.batch[device] = batch
        r = self.round[device]
        spec = TrainSpec(epochs=1, batch_size=None, method=self._task(r, batch, "probs"))
        self._job(device, self.model[device], spec, "probs_done", BatchMsg(device, r, batch))

    def on_report_arrived(self, event: Event) -> None:
        """A party's report reached its server: a relay forwards it, the closing server keeps it."""
        d, r = event.payload.device, event.payload.round
        here = self._hop(d)
        if here != self.closer[d]:
            self.env.send(here, self.closer[d], "report_at_closer", event.payload, "upload_report", size=SCALAR_BYTES)
            return
        self._report(d, r)

    def on_report_at_closer(self, event: Event) -> None:
        """A relayed report reached the cloud."""
        self._report(event.payload.device, event.payload.round)

    def _report(self, device: int, round_: int) -> None:
        endpoint = self.closer[device]
        server = self.servers[endpoint]
        got = server.reports.setdefault(round_, {})
        got[device] = self._report_value.pop((device, round_))
        if len(got) < len(server.members):
            return
        del server.reports[round_]
        for old in [k for k in server.weights if k < round_ - 1]:  # (older rounds are closed everywhere)
            del server.weights[old]
        members = server.members
        f = np.array([got[d] for d in members], dtype=np.float64)
        w = confidence_weights(f, self.cfg.eta, self.cfg.ccr_guard)
        weights = {d: float(x) for d, x in zip(members, w)}
        server.weights[round_] = weights
        self.env.telemetry.instant(endpoint, "ccr_weights", self.env.now, round=round_,
                                   weights=[round(x, 6) for x in w.tolist()])
        if endpoint == ("cloud", 0):
            for e in sorted(self.edge_members):  # the relays need their members' weights to sum
                size = max(SCALAR_BYTES, 4 * len(self.edge_members[e]))
                self.env.send(endpoint, ("edge", e), "weights_arrived", ServerMsg(e, round_), "download_weights",
                              size=size)
        self._try_close(endpoint, round_)

    def on_weights_arrived(self, event: Event) -> None:
        """The cloud's weights of a round reached an edge server (its members' share)."""
        e, r = event.payload.edge, event.payload.round
        cloud = self.servers[("cloud", 0)]
        edge = self.servers[("edge", e)]
        edge.weights[r] = {d: cloud.weights[r][d] for d in self.edge_members[e]}
        for old in [k for k in edge.weights if k < r - 1]:
            del edge.weights[old]
        self._try_close(("edge", e), r)

    def _weights(self, endpoint: Endpoint, round_: int) -> dict[int, float] | None:
        server = self.servers[endpoint]
        if round_ == 0:  # fixed in round 0: 1/(K−1), K the parties of the closing server's exchange
            k = len(self.servers[self.closer[server.members[0]]].members)
            w = float(first_round_weights(k)[0])
            return {d: w for d in server.members}
        return server.weights.get(round_)

    def on_probs_done(self, event: Event) -> None:
        """A party's probabilities on the batch are computed: upload them to its server."""
        job, _ = self._collect(event)
        self.jobs[job.device] = job  # kept until the probabilities arrive (they are the job's result)
        self.env.send(("device", job.device), self._hop(job.device), "probs_arrived", event.payload,
                      "upload_probs", size=self.batch_bytes(event.payload.batch))

    def on_probs_arrived(self, event: Event) -> None:
        """Probabilities reached the party's server; it closes or relays the batch once it has all of them."""
        d, r, b = event.payload.device, event.payload.round, event.payload.batch
        endpoint = self._hop(d)
        self.servers[endpoint].probs.setdefault((r, b), {})[d] = self.jobs.pop(d).params
        self._try_close(endpoint, r)

    def _try_close(self, endpoint: Endpoint, round_: int) -> None:
        """Close (or relay) every batch of ``round_`` whose inputs and weights are all at ``endpoint``."""
        server = self.servers[endpoint]
        weights = self._weights(endpoint, round_)
        if weights is None:
            return
        for key in sorted(k for k in server.probs if k[0] == round_):
            got = server.probs[key]
            if len(got) < len(server.members):
                continue
            del server.probs[key]
            agg = self.env.tier(*endpoint)
            for d in server.members:
                agg.add(got[d], weights[d])
            mean = agg.commit(list(server.members))
            total = sum(weights[d] for d in server.members)
            if self.closer[server.members[0]] == endpoint:
                self._targets(endpoint, key, mean, total, got, weights)
            else:  # a relay: its weighted mean and weight go up
                e = endpoint[1]
                self._up[(e, key[0], key[1])] = (mean, total)
                self._kept[(e, key[0], key[1])] = got  # each member's own p, for its target later
                self.env.send(endpoint, ("cloud", 0), "sum_arrived", ServerMsg(e, key[0], key[1]), "upload_probs",
                              size=self.batch_bytes(key[1]))

    def on_sum_arrived(self, event: Event) -> None:
        """An edge server's weighted mean reached the cloud; with every edge's, the total goes down."""
        e, r, b = event.payload.edge, event.payload.round, event.payload.batch
        cloud = self.servers[("cloud", 0)]
        got = cloud.sums.setdefault((r, b), {})
        got[e] = self._up.pop((e, r, b))
        if len(got) < len(self.edge_members):
            return
        del cloud.sums[(r, b)]
        agg = self.env.tier("cloud")
        for edge in sorted(got):
            agg.add(got[edge][0], got[edge][1])
        mean = agg.commit(sorted(got), source="edge")
        total = sum(got[edge][1] for edge in sorted(got))
        self._total[(r, b)] = (mean, total)
        for edge in sorted(self.edge_members):
            self.env.send(("cloud", 0), ("edge", edge), "total_arrived", ServerMsg(edge, r, b), "download_targets",
                          size=self.batch_bytes(b))

    def on_total_arrived(self, event: Event) -> None:
        """The total reached an edge server: it forms each member's target."""
        e, r, b = event.payload.edge, event.payload.round, event.payload.batch
        mean, total = self._total[(r, b)]
        self._relayed[(r, b)] = self._relayed.get((r, b), 0) + 1
        if self._relayed[(r, b)] == len(self.edge_members):
            del self._total[(r, b)], self._relayed[(r, b)]
        weights = self._weights(("edge", e), r)
        assert weights is not None  # (the edge summed this batch with them)
        self._targets(("edge", e), (r, b), mean, total, self._kept.pop((e, r, b)), weights)

    def _targets(self, endpoint: Endpoint, key: tuple[int, int], mean: Any, total: float, probs: dict[int, Any],
                 weights: dict[int, float]) -> None:
        """Each party's target ``q_k = Σ_j W_j p_j − W_k p_k`` (``total · mean − W_k p_k``), sent down to it."""
        r, b = key
        agg = self.env.tier(*endpoint)
        for d in self.servers[endpoint].members:
            target = agg.combine([(total, mean, None), (-weights[d], probs[d], None)])
            self._target[d] = target
            self.env.send(endpoint, ("device", d), "target_arrived", BatchMsg(d, r, b), "download_targets",
                          size=self.batch_bytes(b))

    def on_target_arrived(self, event: Event) -> None:
        """Align: a step (per batch) or an epoch (per round) toward the target."""
        d, r, b = event.payload.device, event.payload.round, event.payload.batch
        lr = self.cfg.align_lr if self.cfg.align_lr is not None else self.env.spec.lr
        task = self._task(r, b, "align")
        if self.cfg.exchange == "per_batch":  # one step on the whole batch
            spec = TrainSpec(epochs=1, batch_size=None, lr=lr, method=task)
        else:
            spec = TrainSpec(epochs=1, batch_size=self.cfg.public_batch_size, lr=lr, method=task)
        self._job(d, self.model[d], spec, "align_done", event.payload, control=self._target.pop(d))

    def on_align_done(self, event: Event) -> None:
        """The party's next batch, or its local learning after the last."""
        job, _ = self._collect(event)
        d = job.device
        self.model[d] = job.params
        if self.env.stopping:
            return
        if self.batch[d] + 1 < len(self.windows):
            self._next_batch(d, self.batch[d] + 1)
            return
        self.batch[d] = -1
        self._job(d, self.model[d], self._sce_spec(d, self.private_epochs[d], report=True), "local_done",
                  BatchMsg(d, self.round[d]))

    # -- evaluation -----------------------------------------------------------------------------------
    def party_models(self) -> dict[int, Any] | None:
        """Each party's own model (the accuracy reported is their mean); none before pre-training ends."""
        return dict(self.model) if len(self.model) == self.n else {}
