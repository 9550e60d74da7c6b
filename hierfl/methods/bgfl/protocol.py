"""BGFL: blockchain-based two-stage federated learning with non-IID data.

Z. Lian, Q. Zeng, W. Wang, T. R. Gadekallu, C. Su, "Blockchain-Based Two-Stage Federated Learning With
Non-IID Data in IoMT System", IEEE Trans. Computational Social Systems 10(4), 2023 (DOI
10.1109/TCSS.2022.3216802). Only the abstract could be read; every rule below beyond "a shared dataset
through a chain, then FL with a Jensen–Shannon client selection" is a design default (a knob).
docs/explanation/algorithms.md §5.15.

A *scope* is one chain with its members: the whole population with its chain at the cloud
(``chain_scope: global``), or each edge server's cluster with a chain at its edge server (``edge``).

**Stage 1** (per scope, from t = 0):

1. every member uploads its label histogram (``4·C`` bytes) to the chain host;
2. with all of them, the host scores each member by ``JS₂(h_i ‖ pooled)`` and picks the committee: the
   ``⌈committee_fraction·|M|⌉`` lowest scores; the histograms and scores go on the chain
   (``|M|·(4C + 4)`` bytes); the host asks each committee member for its share (a 64-byte message);
3. a sharer uploads its share (a class-stratified ``α``-fraction of its samples, ``sample_bytes`` each);
   the host writes it to the chain as it arrives;
4. when the last share (and the histogram record) is confirmed, ``D_g`` is complete: every member asks
   for it (64 bytes) and downloads the shares it lacks; its jobs from then on train on ``D_i ∪ D_g``.

**Stage 2** (per scope, when all its members hold ``D_g``): synchronous rounds. The host selects ``m``
members by their scores ``s_i = JS₂(h_i ∪ D_g ‖ h(D_g))`` (``selection``), sends them the model, they
train and upload, and the host averages weighted by ``|D_i ∪ D_g|``. The round's record (the hashes
of the updates and of the new model, or the updates themselves) is written to the chain, and the
round ends when it is confirmed. With edge scopes, a confirmed edge model then goes to the cloud,
which averages the edge models (weighted by their participants' samples) and sends the result back
to every edge server: each begins its next round when it arrives. Virtual time of a flat round::

    max_i (download_i + compute_i + upload_i) + wait for block + k_conf blocks + propagation
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from hierfl.config.errors import Problem
from hierfl.core.chain import ChainParams, pow_block_mean_s
from hierfl.core.labeldist import js_scores, select_by_score
from hierfl.core.shared import SharedData, share_counts
from hierfl.core.work import TrainSpec, transfer_time_s
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig
from hierfl.protocols.ledger import Ledger

__all__ = ["BGFL", "BGFLConfig", "ScopeMsg", "StageMsg"]

_SEED_BOUND = 2 ** 62
_SMALL_MSG_BYTES = 64  # a request or notice: the minimum-size message


@dataclass(frozen=True)
class StageMsg(DeviceMsg):
    """A device's message in its scope: ``round`` = -1 during stage 1."""

    round: int


@dataclass(frozen=True)
class ScopeMsg(Payload):
    """A scope's step: ``scope`` (0 when global, else the edge server) in ``round``."""

    scope: int
    round: int


@PROTOCOLS.register
class BGFLConfig(ProtocolConfig):
    """``protocol: {name: bgfl, alpha: 0.05, selection: js_lowest, chain_scope: edge, ...}`` (every key a
    design default: the paper's body could not be read)."""

    name: Literal["bgfl"] = "bgfl"
    supports_churn: ClassVar[bool] = False
    needs_label_counts: ClassVar[bool] = True
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→chain host", synchronous=True, takes_policy=False,
                         note="a round's record goes on the chain once every selected member's update is in; "
                              "no straggler policy is implemented for it"),)
    rule_tiers: ClassVar[tuple[str, ...]] = ()

    alpha: float = Field(default=0.05, ge=0.0, le=1.0,
                         description="fraction of its samples each committee member shares into D_g (design default "
                                     "0.05; 0: no sharing)")
    share_rule: Literal["stratified"] = Field(
        default="stratified", description="which samples a sharer gives: a class-stratified random alpha-fraction "
                                          "(design default; the paper's 'most representative samples' rule is "
                                          "not known)")
    committee_fraction: float = Field(
        default=0.1, gt=0.0, le=1.0, description="fraction of a scope's members on its sharing committee, those "
                                                 "whose label histograms are closest (JS) to the scope's pooled one "
                                                 "(design default 0.1, at least one member)")
    reference: Literal["shared", "pooled"] = Field(
        default="shared", description="the distribution the stage-2 scores compare with: shared (D_g's label "
                                      "histogram, design default) or pooled (every member's labels); shared "
                                      "falls back to pooled when D_g is empty")
    selection: Literal["js_lowest", "js_highest", "random", "js_weighted"] = Field(
        default="js_lowest", description="which members a round selects by their score s_i = JS(h_i with D_g, "
                                         "reference): js_lowest (design default), js_highest, random, or "
                                         "js_weighted (probability proportional to 1 - s_i)")
    fraction: float = Field(default=0.1, gt=0.0, le=1.0,
                            description="fraction of a scope's members selected per round, at least one (design "
                                        "default 0.1)")
    block_time_s: PositiveFloat = Field(default=10.0, description="mean block time in seconds (design default 10); "
                                                                  "ignored when difficulty_bits and hash_rate_hps "
                                                                  "are given")
    difficulty_bits: NonNegativeFloat | None = Field(
        default=None, description="proof-of-work difficulty in bits: with hash_rate_hps, the mean block time is "
                                  "2^difficulty_bits / hash_rate_hps (design default: unset, block_time_s)")
    hash_rate_hps: PositiveFloat | None = Field(
        default=None, description="the committee's total hash rate in hashes per second (with difficulty_bits)")
    block_interval: Literal["exponential", "fixed"] = Field(
        default="exponential", description="block intervals: exponential (proof of work, stream pow_mining, design "
                                           "default) or fixed (a block exactly every mean block time)")
    block_bytes: PositiveInt = Field(default=1_000_000, description="block capacity in bytes (design default 1e6)")
    k_conf: NonNegativeInt = Field(default=1, description="confirmation depth: further blocks after the one that "
                                                          "holds a submission (design default 1)")
    propagation_s: NonNegativeFloat | None = Field(
        default=None, description="seconds for a block to reach the committee; null: max over the committee of "
                                  "block_bytes over a member's downlink plus its latency (design default)")
    hash_bytes: PositiveInt = Field(default=32, description="bytes of one model hash in a round's record (design "
                                                           "default 32, SHA-256)")
    round_record: Literal["hashes", "updates", "none"] = Field(
        default="hashes", description="what a stage-2 round writes to the chain: hashes of its updates and new "
                                      "model (design default), the updates and model themselves, or nothing (the "
                                      "design notes' form: only stage 1 uses the chain)")
    chain_scope: Literal["edge", "global"] = Field(
        default="edge", description="edge: a chain and a D_g per edge server, rounds within each cluster and a "
                                    "cloud average of the edge models (design default; needs edge servers); "
                                    "global: one chain at the cloud over every device (a flat topology)")
    malicious_sharers: float = Field(
        default=0.0, ge=0.0, le=1.0, description="fraction of each committee whose shares carry flipped labels "
                                                 "(C - 1 - y), drawn from the stream bgfl.malicious: the threat the "
                                                 "paper is motivated by (design default 0: off)")
    charge_setup_phases: bool = Field(
        default=True, description="charge stage 1 (histograms, shares, blocks, downloads) in virtual time (design "
                                  "default); false: stage 1 takes no virtual time")

    def check(self, scenario: Any) -> list[Problem]:
        """Edge scope needs edge servers, global scope a flat topology; the plain SGD trainer; both PoW keys."""
        problems: list[Problem] = []
        edges = scenario.topology.edge_servers or 0
        if self.chain_scope == "edge" and edges < 1:
            problems.append(Problem("protocol.chain_scope", "bgfl with chain_scope edge hosts a chain at each edge "
                                    "server, and the topology has none; allowed: global (flat), or add edge servers",
                                    self.chain_scope))
        if self.chain_scope == "global" and edges > 0:
            problems.append(Problem("protocol.chain_scope", f"bgfl with chain_scope global runs flat (one chain at "
                                    f"the cloud), and the topology has {edges} edge servers; allowed: edge",
                                    self.chain_scope))
        if (self.difficulty_bits is None) != (self.hash_rate_hps is None):
            problems.append(Problem("protocol.hash_rate_hps" if self.hash_rate_hps is None else
                                    "protocol.difficulty_bits", "give difficulty_bits and hash_rate_hps together "
                                    "(or neither: block_time_s)"))
        if self.malicious_sharers > 0 and scenario.runtime.fast_path:
            problems.append(Problem("runtime.fast_path", "bgfl with malicious_sharers trains its devices on different "
                                    "labels, which grouped training cannot; allowed: false", True))
        trainer = scenario.training.trainer.name
        if trainer not in ("sgd", "none"):
            problems.append(Problem("training.trainer", "bgfl trains on D_i and the shared set with the plain local "
                                    "trainer; allowed: sgd, none (timing only)", trainer))
        return problems

    def mean_block_s(self) -> float:
        """The mean block time: ``2^difficulty / hash_rate``, or ``block_time_s``."""
        if self.difficulty_bits is not None and self.hash_rate_hps is not None:
            return pow_block_mean_s(self.difficulty_bits, self.hash_rate_hps)
        return self.block_time_s

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """The edge servers at the cloud (edge scope), or ``⌈fraction·N⌉`` devices (global)."""
        if edges:
            return {"cloud": edges, "edge": max(1, math.ceil(self.fraction * (devices // edges) - 1e-9))}
        return {"cloud": max(1, math.ceil(self.fraction * devices - 1e-9)), "edge": None}

    def create(self, env: Env) -> BGFL:
        """A BGFL run."""
        return BGFL(self, env)


@dataclass
class Scope:
    """One chain and its members: stage-1 progress, the shared set, and the current round."""

    index: int
    host: tuple[str, int]
    members: list[int]
    ledger: Ledger
    hists: set[int] = field(default_factory=set)       # members whose histogram reached the host
    committee: list[int] = field(default_factory=list)
    counts: dict[int, np.ndarray] = field(default_factory=dict)  # a sharer's share, per class
    shares_in: int = 0                                  # shares written to the chain so far
    ready_at: float = 0.0                               # when D_g (and the histogram record) is confirmed
    holding: set[int] = field(default_factory=set)      # members that hold D_g
    spec: TrainSpec | None = None
    scores: np.ndarray | None = None                    # s_i of each member, in member order
    round: int = 0
    selected: list[int] = field(default_factory=list)
    arrived: set[int] = field(default_factory=set)
    base: Any = None                                    # the model the round started from
    weight: float = 0.0                                 # Σ of the round's participants' weights


class BGFL(Protocol):
    """Stage 1 builds a shared set through each scope's chain; stage 2 runs rounds whose records go on it."""

    def __init__(self, cfg: BGFLConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        world = env.world
        counts = getattr(world, "label_counts", None)
        if counts is None:
            raise ValueError("bgfl needs the devices' class histograms (World.label_counts)")
        self.hist = np.asarray(counts, dtype=np.int64)
        self.classes = int(self.hist.shape[1])
        self.sample_bytes = int(getattr(world, "sample_bytes", 0)) or 4
        self.hist_bytes = 4 * self.classes
        self.edge_scope = cfg.chain_scope == "edge"
        self.scopes: list[Scope] = []
        self.scope_of = np.zeros(world.num_devices, dtype=np.int64)
        groups = ([(("edge", e), [int(d) for d in world.edge_members(e)]) for e in range(world.num_edges)]
                  if self.edge_scope else [(("cloud", 0), list(range(world.num_devices)))])
        for k, (host, members) in enumerate(groups):
            params = ChainParams(cfg.mean_block_s(), cfg.block_bytes, cfg.k_conf, cfg.propagation_s or 0.0)
            self.scopes.append(Scope(k, host, members, Ledger(env, host, k, params, cfg.block_interval)))
            self.scope_of[members] = k
        self.cloud_round = 0
        self.edges_in: set[int] = set()
        self.edge_models: dict[int, Any] = {}

    def _propagation(self, committee: list[int]) -> float:
        """A full block's way to the farthest committee member: ``max_j (block_bytes/B_j + ℓ_j)`` over the
        members' downlinks, unless ``propagation_s`` is given."""
        if self.cfg.propagation_s is not None:
            return float(self.cfg.propagation_s)
        world = self.env.world
        return max((transfer_time_s(self.cfg.block_bytes, float(world.downlink_mbps[d]), world.link_latency_ms(d))
                    for d in committee), default=0.0)

    # -- stage 1: histograms, committee, shares, the shared set ------------------------------------------
    def start(self) -> None:
        """Every member sends its label histogram to its chain host at t = 0 (or stage 1 is free)."""
        for scope in self.scopes:
            if not scope.members:
                continue
            if not self.cfg.charge_setup_phases:
                self._choose_committee(scope)
                self._shared_complete(scope)
                self._begin_round(scope)
                continue
            for d in scope.members:
                scope.ledger.upload(d, "hist_arrived", StageMsg(d, -1), self.hist_bytes, "upload_histogram")

    def on_hist_arrived(self, event: Event) -> None:
        """A histogram reached the host; with all of them, the committee is chosen and recorded on the chain."""
        scope = self.scopes[self.scope_of[event.payload.device]]
        scope.hists.add(event.payload.device)
        if len(scope.hists) < len(scope.members):
            return
        self._choose_committee(scope)
        record = scope.ledger.submit(len(scope.members) * (self.hist_bytes + 4), "histograms",
                                     committee=list(scope.committee))
        scope.ready_at = record.confirmed_at
        sharers = [d for d in scope.committee if int(scope.counts[d].sum())]
        if not sharers:  # nothing to share: stage 2 starts once the selection is on the chain
            self.env.at(scope.ready_at, "shared_ready", ScopeMsg(scope.index, -1))
            return
        for d in sharers:
            self.env.send(scope.host, ("device", d), "share_asked", StageMsg(d, -1), "ask_share",
                          size=_SMALL_MSG_BYTES)

    def _choose_committee(self, scope: Scope) -> None:
        members = scope.members
        pooled = self.hist[members].sum(axis=0)
        scores = js_scores(self.hist[members], pooled)
        size = max(1, math.ceil(self.cfg.committee_fraction * len(members) - 1e-9))
        scope.committee = select_by_score(members, scores, size, "js_lowest", self.env.rng("bgfl.committee", scope.index))
        scope.counts = {d: share_counts(self.hist[d], self.cfg.alpha) for d in scope.committee}
        scope.ledger.seat_committee(self._propagation(scope.committee))

    def on_share_asked(self, event: Event) -> None:
        """A committee member uploads its share to the chain host."""
        d = event.payload.device
        scope = self.scopes[self.scope_of[d]]
        size = int(scope.counts[d].sum()) * self.sample_bytes
        scope.ledger.upload(d, "share_arrived", event.payload, size, "upload_share")

    def on_share_arrived(self, event: Event) -> None:
        """A share reached the host: written to the chain; with the last one, D_g is complete once confirmed."""
        d = event.payload.device
        scope = self.scopes[self.scope_of[d]]
        receipt = scope.ledger.submit(int(scope.counts[d].sum()) * self.sample_bytes, "share", device=d)
        scope.ready_at = max(scope.ready_at, receipt.confirmed_at)
        scope.shares_in += 1
        if scope.shares_in == sum(1 for c in scope.counts.values() if int(c.sum())):
            self.env.at(scope.ready_at, "shared_ready", ScopeMsg(scope.index, -1))

    def on_shared_ready(self, event: Event) -> None:
        """D_g is confirmed: every member asks for it (the request verifies it) and downloads what it lacks."""
        scope = self.scopes[event.payload.scope]
        self._shared_complete(scope)
        for d in scope.members:
            self.env.send(("device", d), scope.host, "shared_asked", StageMsg(d, -1), "ask_shared",
                          size=_SMALL_MSG_BYTES)

    def on_shared_asked(self, event: Event) -> None:
        """The host serves a member's request: the shares it lacks (or nothing, when there are none)."""
        d = event.payload.device
        scope = self.scopes[self.scope_of[d]]
        extra = 0 if scope.spec is None or scope.spec.shared is None else scope.spec.shared.extra_for(d)
        if extra:
            scope.ledger.download(d, "shared_arrived", event.payload, extra * self.sample_bytes, "download_shared")
        else:
            self._holds(scope, d)

    def on_shared_arrived(self, event: Event) -> None:
        """A member holds D_g."""
        d = event.payload.device
        self._holds(self.scopes[self.scope_of[d]], d)

    def _holds(self, scope: Scope, device: int) -> None:
        scope.holding.add(device)
        if len(scope.holding) == len(scope.members) and not self.env.stopping:
            self._begin_round(scope)

    def _shared_complete(self, scope: Scope) -> None:
        """The scope's shared set as jobs see it, and every member's stage-2 score."""
        sharers = sorted(d for d in scope.committee if int(scope.counts[d].sum()))
        shared = None
        if sharers:
            seed = int(self.env.rng("bgfl.share", scope.index).integers(_SEED_BOUND))
            bad = math.floor(self.cfg.malicious_sharers * len(sharers) + 0.5)
            flipped = sorted(int(d) for d in self.env.rng("bgfl.malicious", scope.index).choice(sharers, bad, replace=False))
            shared = SharedData(tuple(sharers), tuple(tuple(int(x) for x in scope.counts[d]) for d in sharers), seed,
                                tuple(flipped))
        scope.spec = dataclasses.replace(self.env.spec, shared=shared)
        members = scope.members
        dg = np.zeros(self.classes, dtype=np.int64) if shared is None else shared.histogram(self.classes)
        merged = self.hist[members] + dg[None, :]
        for k, d in enumerate(members):  # a sharer's own share is in its data already (with its true labels)
            if shared is not None and d in shared.sharers:
                merged[k] -= scope.counts[d][::-1] if d in shared.flipped else scope.counts[d]
        reference = dg if self.cfg.reference == "shared" and int(dg.sum()) else self.hist[members].sum(axis=0)
        scope.scores = js_scores(merged, reference)

    def weight(self, scope: Scope, device: int) -> float:
        """``|D_i ∪ D_g|``: the member's samples plus the shares it lacks."""
        assert scope.spec is not None
        extra = 0 if scope.spec.shared is None else scope.spec.shared.extra_for(device)
        return float(int(self.env.world.samples[device]) + extra)

    # -- stage 2: rounds whose records go on the chain -------------------------------------------------
    def _begin_round(self, scope: Scope) -> None:
        env = self.env
        assert scope.scores is not None
        m = max(1, math.ceil(self.cfg.fraction * len(scope.members) - 1e-9))
        scope.selected = select_by_score(scope.members, scope.scores, m, self.cfg.selection,
                                         env.rng("bgfl.select", scope.index, scope.round))
        scope.arrived, scope.weight = set(), 0.0
        scope.base = env.global_model
        for d in scope.selected:
            env.send(scope.host, ("device", d), "train_start", StageMsg(d, scope.round), "download")

    def on_train_start(self, event: Event) -> None:
        """The member has the model: it trains on D_i ∪ D_g."""
        scope = self.scopes[self.scope_of[event.payload.device]]
        self.start_job(event, scope.base, scope.spec)

    def on_train_done(self, event: Event) -> None:
        """The job is over: upload the update to the chain host."""
        d = event.payload.device
        self.env.finish_training(self.jobs[d])
        self.env.send(("device", d), self.scopes[self.scope_of[d]].host, "upload_done", event.payload, "upload")

    def on_upload_done(self, event: Event) -> None:
        """An update reached the host; with every selected member's, the host aggregates and writes the record."""
        env = self.env
        d = event.payload.device
        scope = self.scopes[self.scope_of[d]]
        w = self.weight(scope, d)
        tier = env.tier(*scope.host)
        tier.add(self.jobs.pop(d).params, w)
        scope.arrived.add(d)
        scope.weight += w
        if len(scope.arrived) < len(scope.selected):
            return
        model = tier.commit(sorted(scope.arrived), base=scope.base)
        if not self.edge_scope:
            env.set_global(model)
        else:
            self.edge_models[scope.index] = model
        size = {"hashes": (len(scope.selected) + 1) * self.cfg.hash_bytes,
                "updates": (len(scope.selected) + 1) * int(env.world.model_bytes), "none": 0}[self.cfg.round_record]
        done = env.now
        if size:
            done = scope.ledger.submit(size, "round", round=scope.round).confirmed_at
        env.at(done, "round_confirmed", ScopeMsg(scope.index, scope.round))

    def on_round_confirmed(self, event: Event) -> None:
        """The round's record is confirmed: the next round (flat), or the edge model goes to the cloud."""
        scope = self.scopes[event.payload.scope]
        scope.round += 1
        if self.env.stopping:
            return
        if not self.edge_scope:
            self._begin_round(scope)
            return
        self.env.send(scope.host, ("cloud", 0), "edge_arrived", event.payload, "upload")

    def on_edge_arrived(self, event: Event) -> None:
        """An edge model reached the cloud; with every edge's, the cloud averages them and sends the result back."""
        env = self.env
        scope = self.scopes[event.payload.scope]
        env.tier("cloud").add(self.edge_models.pop(scope.index), scope.weight)
        self.edges_in.add(scope.index)
        if len(self.edges_in) < sum(1 for s in self.scopes if s.members):
            return
        env.set_global(env.tier("cloud").commit(sorted(self.edges_in), source="edge"))
        self.edges_in = set()
        self.cloud_round += 1
        if env.stopping:
            return
        for s in self.scopes:
            if s.members:
                env.send(("cloud", 0), s.host, "edge_model_arrived", ScopeMsg(s.index, s.round), "download")

    def on_edge_model_arrived(self, event: Event) -> None:
        """The cloud's model reached an edge server: its next round."""
        self._begin_round(self.scopes[event.payload.scope])
