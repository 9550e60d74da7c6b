"""pFedLA: layer-wise personalised aggregation with per-client hypernetworks at the server.

X. Ma, J. Zhang, S. Guo, W. Xu, "Layer-wised Model Aggregation for Personalized Federated Learning",
CVPR 2022 (arXiv 2205.03993). No official code exists: the rules follow an unofficial implementation
and the hypernetwork update's sign the official pFedHN code (docs/explanation/algorithms.md, pFedLA;
the math is :mod:`hierfl.methods.pfedla.trainer`).

The aggregation point (the cloud when devices talk to it directly, else each edge server for its
own members) keeps, for each of its ``N`` clients, the latest trained model ``θ_i`` and a
hypernetwork ``HN_i`` in its server state. Every client loops on its own (per-client asynchronous,
as the reference loop already treats one client at a time):

1. at ``t = 0`` every client downloads the initial model (all clients start from the same one, so
   every personalised model of the first round is that model);
2. it trains the scenario's local job on its data and uploads its result (``4·(P − P_kept)`` bytes);
3. on arrival the server runs **one server job**, ``pfedla``: the hypernetwork ``HN_i`` steps on the
   returned change, ``θ_i`` is stored and client ``i``'s next personalised model
   ``θ̄_i^l = Σ_j â_i^{l,j} θ_j^l`` is formed from the store. The job is charged
   ``6·N·P + 4·F_hn`` FLOPs on the server's tier and queued behind that server's earlier jobs;
4. at the job's end the personalised model goes back to client ``i`` (``4·(P − P_kept)`` bytes),
   which trains again.

Each server job is accounted as one asynchronous aggregation at its tier. With ``cloud: average``
(edge servers only) every edge server, after as many updates as it has members, sends the mean of its
stored models to the cloud, whose global model becomes the member-weighted mean of the edges' latest
means (a cloud aggregation); nothing flows back down. Evaluation: every device is tested with its
latest personalised model on its own test split (``data.local_test_fraction``); the evaluation
lines' accuracy is the mean of those models on the shared test set, or with ``cloud: average`` the
cloud's model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from hierfl.config.errors import Problem
from hierfl.methods.pfedla.math import layer_groups
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event, Priority
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["EdgeMeanMsg", "PFedLA", "PFedLAConfig"]

_SEED_BOUND = 2 ** 62
TASK = "pfedla"          # the server task of hierfl.methods.pfedla.server (one per client return)
MEAN_TASK = "pfedla_mean"  # an edge server's mean of its stored models (cloud: average)
INIT_TASK = "pfedla_init"  # a server's store of per-client initial models (init: per_client)


@dataclass(frozen=True)
class EdgeMeanMsg(Payload):
    """A server's message about its store: an edge's mean on its way to the cloud (``cloud: average``), or
    the store of initial models ready (``init: per_client``); ``edge``: the server (0 = the cloud, flat)."""

    edge: int


@PROTOCOLS.register
class PFedLAConfig(ProtocolConfig):
    """``protocol: {name: pfedla, hn_lr: 5.0e-3, embed_dim: 100, hidden_dim: 100, k_keep: 0}``."""

    aggregation_style: ClassVar[str] = "updates"
    supports_churn: ClassVar[bool] = False
    decides_on_models: ClassVar[str | None] = ("its server jobs transform the trained models (and with k_keep > 0 "
                                               "the hypernetworks choose which layers travel)")
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→server", synchronous=False,
                         note="the server updates each client's hypernetwork and personalised model the moment its "
                              "upload arrives"),)

    name: Literal["pfedla"] = "pfedla"
    hn_lr: PositiveFloat = Field(
        default=5e-3, description="η_hn: SGD learning rate of the hypernetworks (third-party code's default, V3)")
    embed_dim: PositiveInt = Field(
        default=100, description="d_e: size of each client's embedding (third-party code's default, V3)")
    hidden_dim: PositiveInt = Field(
        default=100, description="h: width of the hypernetwork's three hidden layers (third-party code's default, V3)")
    k_keep: NonNegativeInt = Field(
        default=0, description="HeurpFedLA: the k layers with the largest self-weight keep the client's own layer "
                               "and are neither sent nor uploaded; 0 = pFedLA (third-party code's default, V3)")
    vjp_sign: Literal["old_minus_new", "new_minus_old"] = Field(
        default="old_minus_new", description="output gradient of the hypernetwork update: sent − trained (pFedHN's "
                                             "official sign, design default) or trained − sent (the third-party "
                                             "pFedLA codes)")
    granularity: Literal["layer", "tensor"] = Field(
        default="layer", description="aggregation unit with its own weights: layer (a module's weight and bias "
                                     "together, like the third-party code's blocks; V3) or tensor (every "
                                     "parameter tensor)")
    init: Literal["same", "per_client"] = Field(
        default="same", description="initial client models: same (every client starts from the run's initial "
                                    "model, design default) or per_client (each from its own seed, stream "
                                    "pfedla.init, as the older third-party code draws them; a pfedla_init server "
                                    "job at t = 0 forms the store)")
    cloud: Literal["none", "average"] = Field(
        default="none", description="with edge servers: none (independent personalised federations, design "
                                    "default) or average (each edge sends the mean of its stored models after as "
                                    "many updates as it has members; the cloud's model is their member-weighted "
                                    "mean)")

    eval_model: Literal["personalised", "trained"] = Field(
        default="personalised", description="the model each device is tested with: its latest personalised model "
                                            "θ̄_i (what the third-party code tests, design default) or its latest "
                                            "trained model θ_i")
    cloud_every: PositiveInt | None = Field(
        default=None, description="cloud: average: an edge sends its mean after this many updates; null = as many "
                                  "as the edge has devices (design default)")

    def check(self, scenario: Any) -> list[Problem]:
        """The plain local trainer; cloud: average needs edge servers; a run without cloud aggregations
        must be bounded in virtual time."""
        problems: list[Problem] = []
        trainer = scenario.training.trainer.name
        if trainer != "sgd":
            problems.append(Problem("training.trainer", "pfedla's devices run plain local training from the "
                                    "personalised model they receive; allowed: sgd", trainer))
        edges = (scenario.topology.edge_servers or 0) > 0
        if self.cloud == "average" and not edges:
            problems.append(Problem("protocol.cloud", "average combines edge servers' models: it needs edge "
                                    "servers (topology.edge_servers); allowed without them: none", self.cloud))
        if self.cloud_every is not None and self.cloud != "average":
            problems.append(Problem("protocol.cloud_every", "only cloud: average sends edge means to the cloud; "
                                    "allowed with cloud: none: null", self.cloud_every))
        if edges and self.cloud == "none" and scenario.stop.virtual_time_s is None:
            problems.append(Problem("stop.virtual_time_s", "pfedla inside edge servers with cloud: none makes no "
                                    "cloud aggregation, so stop.rounds never ends it; set stop.virtual_time_s"))
        return problems

    def model_problems(self, layout: Callable[[], list[tuple[str, tuple[int, ...]]]]) -> list[Problem]:
        """HeurpFedLA keeps at most every layer of the model."""
        if self.k_keep == 0:
            return []
        layers = len(layer_groups(layout(), self.granularity))
        if self.k_keep <= layers:
            return []
        return [Problem("protocol.k_keep", f"the model has {layers} aggregation units ({self.granularity}s); "
                        f"allowed: 0..{layers}", self.k_keep)]

    def create(self, env: Env) -> PFedLA:
        """A pFedLA run."""
        return PFedLA(self, env)


class PFedLA(Protocol):
    """Per-client asynchronous loops around a server that personalises every model (module docstring)."""

    def __init__(self, cfg: PFedLAConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        world = env.world
        n = world.num_devices
        self.hier = world.num_edges > 0
        if self.hier:
            self.members = {e: [int(d) for d in world.edge_members(e)] for e in range(world.num_edges)}
            self.members = {e: m for e, m in self.members.items() if m}
        else:
            self.members = {0: list(range(n))}
        self.server_of_device: dict[int, int] = {}
        self.slot: dict[int, int] = {}  # device → its index among its server's clients
        for s, group in self.members.items():
            for k, d in enumerate(group):
                self.server_of_device[d] = s
                self.slot[d] = k
        # hn_init: every client's hypernetwork starts from its own stream (seed, "hn_init", server, slot)
        self.seeds = {s: [int(env.rng("hn_init", s, k).integers(_SEED_BOUND)) for k in range(len(group))]
                      for s, group in self.members.items()}
        self.personal: dict[int, Any] = {}   # device → its latest personalised model θ̄_i (what it trains from)
        self.kept: dict[int, int] = {}       # device → floats of the layers it keeps this round (HeurpFedLA)
        self.trained: dict[int, Any] = {}    # device → its latest trained model θ_i (eval_model: trained)
        self.version = {s: 0 for s in self.members}
        self.since_mean = {s: 0 for s in self.members}   # updates since the edge's last mean (cloud: average)
        self.edge_means: dict[int, Any] = {}             # the cloud's latest mean from each edge
        self.in_flight_means: dict[int, Any] = {}
        self.cloud_version = 0

    # -- helpers ------------------------------------------------------------------------------------
    def _server(self, device: int) -> tuple[str, int]:
        return ("edge", self.server_of_device[device]) if self.hier else ("cloud", 0)

    def _bytes(self, device: int) -> int:
        return int(self.env.world.model_bytes) - 4 * self.kept.get(device, 0)

    def _params(self, device: int) -> dict[str, Any]:
        s = self.server_of_device[device]
        cfg = self.cfg
        return {"client": self.slot[device], "clients": len(self.members[s]), "seeds": self.seeds[s],
                "hn_lr": cfg.hn_lr, "embed_dim": cfg.embed_dim, "hidden_dim": cfg.hidden_dim, "k_keep": cfg.k_keep,
                "vjp_sign": cfg.vjp_sign, "granularity": cfg.granularity}

    # -- the client loop ----------------------------------------------------------------------------
    def start(self) -> None:
        """Every client downloads its initial model at t = 0 (init: per_client: once its server has drawn
        them, in a pfedla_init job)."""
        env = self.env
        if self.cfg.init == "per_client":
            for s, group in self.members.items():
                seeds = [int(env.rng("pfedla.init", s, k).integers(_SEED_BOUND)) for k in range(len(group))]
                params = {**self._params(group[0]), "model_seeds": seeds}
                tier, entity = self._server(group[0])
                env.tier(tier, entity).run(INIT_TASK, [], "store_ready", payload=EdgeMeanMsg(s), params=params)
            return
        for d in range(env.world.num_devices):
            self.personal[d] = env.global_model
            self._download(d)

    def on_store_ready(self, event: Event) -> None:
        """A server drew its clients' initial models: each downloads its own."""
        done = event.payload
        for k, d in enumerate(self.members[done.payload.edge]):
            self.personal[d] = done.outputs[k]
            self._download(d)

    def _download(self, device: int) -> None:
        self.env.send(self._server(device), ("device", device), "train_start", DeviceMsg(device), "download",
                      Priority.START, size=self._bytes(device))

    def on_train_start(self, event: Event) -> None:
        """The client has its personalised model: train it."""
        self.start_job(event, self.personal[event.payload.device])

    def on_train_done(self, event: Event) -> None:
        """Upload the trained model (its kept layers stay on the device)."""
        device = event.payload.device
        self.env.finish_training(self.jobs[device])
        self.env.send(("device", device), self._server(device), "upload_done", event.payload, "upload",
                      size=self._bytes(device))

    def on_upload_done(self, event: Event) -> None:
        """The server's job for this client: update HN_i, store θ_i, form the next θ̄_i."""
        device = event.payload.device
        trained = self.jobs.pop(device).params
        self.trained[device] = trained
        tier, entity = self._server(device)
        self.env.tier(tier, entity).run(TASK, [trained, self.personal[device]], "personalised",
                                        payload=DeviceMsg(device), params=self._params(device))

    def on_personalised(self, event: Event) -> None:
        """Client ``i``'s personalised model is formed: account it, send it down."""
        done = event.payload
        device = done.payload.device
        s = self.server_of_device[device]
        tier, entity = self._server(device)
        self.personal[device] = done.outputs[0]
        self.kept[device] = int(done.stats.get("kept_params", 0))
        self.version[s] += 1
        self.env.tier(tier, entity).applied([device], [1.0], [0], self.version[s], 0)
        if self.cfg.cloud == "average":
            self._maybe_mean(s)
        if not self.env.stopping:
            self._download(device)

    # -- cloud: average ------------------------------------------------------------------------------
    def _maybe_mean(self, edge: int) -> None:
        self.since_mean[edge] += 1
        every = self.cfg.cloud_every if self.cfg.cloud_every is not None else len(self.members[edge])
        if self.since_mean[edge] < every:
            return
        self.since_mean[edge] = 0
        self.env.tier("edge", edge).run(MEAN_TASK, [self.env.global_model], "edge_mean_ready", payload=EdgeMeanMsg(edge))

    def on_edge_mean_ready(self, event: Event) -> None:
        """An edge server's mean of its stored models is formed: send it to the cloud."""
        done = event.payload
        edge = done.payload.edge
        self.in_flight_means[edge] = done.outputs[0]
        self.env.send(("edge", edge), ("cloud", 0), "edge_mean_arrived", EdgeMeanMsg(edge), "upload")

    def on_edge_mean_arrived(self, event: Event) -> None:
        """The cloud's model: the member-weighted mean of every edge's latest mean (one cloud aggregation)."""
        env = self.env
        edge = event.payload.edge
        self.edge_means[edge] = self.in_flight_means.pop(edge)
        edges = sorted(self.edge_means)
        weights = [float(len(self.members[e])) for e in edges]
        env.set_global(env.tier("cloud").average([self.edge_means[e] for e in edges], weights))
        self.cloud_version += 1
        env.tier("cloud").applied([edge], [weights[edges.index(edge)]], [0], self.cloud_version, 0, source="edge")

    # -- evaluation ---------------------------------------------------------------------------------
    def _own(self) -> dict[int, Any]:
        if self.cfg.eval_model == "trained":  # before its first return a device holds its initial model
            return {d: self.trained.get(d, m) for d, m in self.personal.items()}
        return dict(self.personal)

    def device_models(self) -> dict[int, Any] | None:
        """Each device's own model (``eval_model``), tested on its own split."""
        return self._own()

    def party_models(self) -> dict[int, Any] | None:
        """Without a cloud model the accuracy reported is the devices' own models' mean on the test set."""
        return None if self.cfg.cloud == "average" else self._own()
