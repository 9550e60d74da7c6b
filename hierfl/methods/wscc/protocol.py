"""WSCC: weight-similarity client clustering, one model per cluster.

Tian, Liao, Yu, Blasch, "WSCC: A Weight-Similarity-Based Client Clustering Approach for Non-IID
Federated Learning", IEEE IoT-J 2022 (DOI 10.1109/JIOT.2022.3175149). docs/explanation/algorithms.md §5.9 [D]:

1. warm-up: every online device trains ``warmup_epochs`` (1) epoch from the initial model ``w0``
   and uploads;
2. ``S_ij = cos(u_i, u_j)`` with ``u_i = w_i − w0`` (``use_delta``, default) or ``u_i = w_i``,
   computed by the cloud role (:meth:`~hierfl.env.api.Env.similarity`);
3. affinity propagation on ``S`` (scikit-learn, ``damping`` 0.5, ``preference`` median(S),
   ``max_iter`` 200, ``convergence_iter`` 15, seeded); no convergence or one cluster per client
   → a single cluster (FedAvg), reported in ``clusters.jsonl``;
4. then synchronous rounds: each cluster samples ``fraction`` of its members (``sampling: bernoulli``: each
   online member on its own coin, :mod:`hierfl.protocols.cohort`), which train from the
   cluster's model; the cluster's model becomes the sample-weighted average of their updates
   ("client clustering aggregation"). Optional re-clustering (``recluster:``) on a round's updates
   (needs ``fraction: 1``): ``periodic`` every ϱ rounds (``recluster_every: R`` is shorthand for
   ``{name: periodic, rho: R}``), ``adaptive`` when a cluster's round (its last member's arrival)
   took more than γ × its running median, ``on_event`` after a world change. The decision is made
   when a round begins, because a re-clustering round relays every update to the cloud: a flag
   raised at a round's close makes the next round the re-clustering one.

Every cluster is one aggregator, named ``cluster c`` in ``clusters.jsonl``. The cloud's "global"
model — evaluated on the pooled test set — is the sample-weighted average of the cluster models, one
cloud aggregation per round; with per-device evaluation (``data.local_test_fraction``) each device
is tested with its cluster's model.

**Without edge servers** (``topology.edge_servers: 0``) the clusters are aggregated at the cloud and
every transfer goes device ↔ cloud.

**With edge servers**, each cluster is mapped to an edge aggregator (docs/explanation/algorithms.md §5.9 step 6):
cluster ``c`` → the edge server that is the topology's home (``edge_of``) of most of its members,
the lowest id on a tie. As many clusters as AP finds, so several clusters may share one server (each
keeps its own model there); a server may serve none. The map is recorded in ``clusters.jsonl``
(``edges``) and ``devices.csv`` (each device's cluster's server). Then:

* warm-up: each device downloads ``w0`` from its home edge server (the servers start with it),
  trains and uploads there; the server relays every update to the cloud (edge → cloud), which
  computes ``S`` and clusters;
* the cloud sends each new cluster model to its server (cloud → edge), which from then on holds it;
* a round: the chosen members download their cluster's model from its server and upload to it
  (device ↔ edge, even when it is not their home server); when its members have all arrived (or
  dropped) the server averages them (an edge aggregation) and forwards the cluster model to the
  cloud (edge → cloud); the cloud commits once every cluster that trained has arrived
  (``tier: edge``) and the next round begins;
* a re-clustering round (``recluster``) needs every member's update at the cloud: the servers
  relay the updates instead, the cloud averages them per cluster, re-clusters and sends the new
  cluster models down.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from hierfl.config.base import ReadWith
from hierfl.kernel.engine import Event, Priority
from hierfl.methods.wscc.math import Clustering, affinity_clusters, cluster_servers, similarity_summary
from hierfl.env import Env, Payload, RoundEmpty
from hierfl.env.records import ClustersRecord
from hierfl.policies.recluster import NeverRecluster, RECLUSTER
from hierfl.protocols.base import AggregationPoint, DeviceMsg, PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_cohort, empty_cohort_field, sampling_field
from hierfl.protocols.regroup import world_snapshot

__all__ = ["WSCCConfig", "WSCC", "ClusterMsg"]


@dataclass(frozen=True)
class ClusterMsg(DeviceMsg):
    """A device's download / upload in round ``round`` (0 = the warm-up) for cluster ``cluster`` (-1: warm-up)."""

    round: int
    cluster: int


@dataclass(frozen=True)
class ClusterEdge(Payload):
    """Cluster ``cluster``'s model between the cloud and its edge server ``edge`` in round ``round``."""

    round: int
    cluster: int
    edge: int


@dataclass(frozen=True)
class ClusterRetry(Payload):
    """Begin round ``round`` again (nobody was online)."""

    round: int


@PROTOCOLS.register
class WSCCConfig(ProtocolConfig):
    """``protocol: {name: wscc, fraction: 1.0, use_delta: true, damping: 0.5, preference: median}``."""

    name: Literal["wscc"] = "wscc"
    own_train_specs: ClassVar[bool] = True  # (its warm-up jobs run epochs: see ProtocolConfig)
    decides_on_models: ClassVar[str | None] = "clusters devices by the cosine similarity of their trained updates"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cluster", synchronous=True, takes_policy=False,
                         note="a cluster round waits for every sampled member; its clustering reads every "
                              "update, and no straggler policy is implemented for it"),)
    fraction: float = Field(default=1.0, gt=0.0, le=1.0, description="share of each cluster's members per round")
    sampling: SamplingKind = sampling_field("max(⌈fraction·|cluster|⌉, 1) of each cluster's online members, uniformly "
                                            "without replacement", "online member of a cluster (after the warm-up)")
    empty_cohort: EmptyCohort = empty_cohort_field("skip", "that cluster sits the round out, its model unchanged; a "
                                                           "round with nobody in any cluster passes at once")
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    warmup_epochs: int = Field(default=1, ge=1, description="local epochs of the warm-up round (E_warm)")
    use_delta: bool = Field(default=True, description="cosine of updates w_i − w0 (true) or of the weights w_i")
    damping: float = Field(default=0.5, ge=0.5, lt=1.0, description="affinity propagation damping")
    preference: float | Literal["median"] = Field(default="median", description="AP preference (median of S)")
    max_iter: int = Field(default=200, ge=1, description="AP iterations at most")
    convergence_iter: int = Field(default=15, ge=1, description="AP: iterations without change that stop it")
    recluster_every: int | None = Field(
        default=None, ge=1, description="re-cluster every R rounds (null: never); shorthand for "
                                        "recluster: {name: periodic, rho: R}")
    recluster: RECLUSTER.union() = Field(  # type: ignore[valid-type]
        default=NeverRecluster(),
        description="when the clusters are rebuilt from a round's updates: never, periodic (every rho rounds), "
                    "adaptive, on_event")

    @model_validator(mode="before")
    @classmethod
    def _every_is_periodic(cls, data: Any) -> Any:
        """``recluster_every: R`` → ``recluster: {name: periodic, rho: R}`` (a resolved config carries both)."""
        if not isinstance(data, dict) or data.get("recluster_every") is None:
            return data
        every, given = data["recluster_every"], data.get("recluster")
        name = given if isinstance(given, str) else given.get("name") if isinstance(given, dict) else None
        if given is not None and not (name == "periodic" and (isinstance(given, str) or given.get("rho") == every)):
            raise ValueError("give recluster_every or recluster, not both")
        return {**data, "recluster": given if isinstance(given, dict) else {"name": "periodic", "rho": every}}

    @model_validator(mode="after")
    def _recluster_needs_everyone(self) -> WSCCConfig:
        if not self.recluster.make(2, 3).static and self.fraction < 1.0:
            raise ValueError("re-clustering (recluster, recluster_every) needs every member's update: "
                             "fraction must be 1")
        for key in self.recluster.own_keys_set():
            raise ValueError(f"recluster.{key}: WSCC re-clusters by the weight similarity of a round's updates and "
                             "restarts each new cluster from the average of its members' updates; leave it out")
        return self

    def create(self, env: Env) -> WSCC:
        """A WSCC run."""
        return WSCC(self, env)


class WSCC(Protocol):
    """Warm-up, affinity-propagation clustering, then FedAvg within every cluster."""

    def __init__(self, cfg: WSCCConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.round = 0
        self.cluster_of = np.zeros(env.world.num_devices, dtype=np.int64)
        self.members: list[list[int]] = [list(range(env.world.num_devices))]
        self.models: list[Any] = []
        self.round_models: list[Any] = []
        self.expected: set[int] = set()
        self.updates: dict[int, Any] = {}
        self.clustered = False
        # edge servers (topology.edge_servers > 0): clusters are aggregated there (module docstring)
        self.hier = env.world.num_edges > 0
        self.link = "device_edge" if self.hier else "device_cloud"
        self.cluster_edge: list[int] = []    # cluster → its edge server
        self.at_edge: set[int] = set()       # clusters whose current model is at their server
        self.plan: dict[int, list[int]] = {}  # this round: cluster → its chosen members
        self.closed: set[int] = set()        # clusters whose server has aggregated this round (or had nothing)
        self.rising: set[int] = set()        # cluster models on their way edge → cloud
        # re-clustering (recluster:): decided when a round begins (a re-clustering round relays every update)
        self.every = cfg.recluster.every_rounds()
        self.policy = cfg.recluster.make(1, env.world.num_devices)  # remade for each clustering's K
        self.seen = world_snapshot(env) if self.policy.watches_world else None
        self.pending = False                  # a flag fired at a round's close: the next round re-clusters
        self.relay_round = False              # this round re-clusters
        self.began_at = 0.0
        self.arrived_at: dict[int, float] = {}  # device → when its update arrived this round (adaptive)

    # -- rounds ---------------------------------------------------------------------------------
    def start(self) -> None:
        """The warm-up round at t = 0."""
        self._begin()

    def _begin(self) -> None:
        env = self.env
        self.updates = {}
        self.arrived_at = {}
        self.began_at = env.now
        self.relay_round = self.clustered and self._recluster_due()
        online = set(env.live.available())
        if not online:
            when = env.live.next_up()
            if math.isfinite(when):
                env.at(when, "cluster_retry", ClusterRetry(self.round), Priority.CONTROL)
            return
        plan: list[tuple[int, int]] = []
        if not self.clustered:
            plan = [(d, -1) for d in sorted(online)]
            self.round_models = [env.global_model]
        else:
            self.round_models = list(self.models)
            for c, members in enumerate(self.members):
                up = [d for d in members if d in online]
                if not up:
                    continue
                if self.cfg.sampling == "bernoulli":  # each online member's own coin
                    chosen = coin_cohort(env, ("wscc.select", self.round, c), np.asarray(up), self.cfg.fraction,
                                         self.cfg.empty_cohort)
                else:
                    k = min(len(up), max(math.ceil(self.cfg.fraction * len(members) - 1e-9), 1))
                    chosen = env.rng("wscc.select", self.round, c).choice(np.asarray(up), size=k, replace=False)
                plan.extend((int(d), c) for d in sorted(chosen))
            if not plan:  # every cluster's coins came up tails (empty_cohort: skip): the next round begins at once
                env.telemetry.record(RoundEmpty({"round": self.round, "sampling": "bernoulli"}))
                self.round += 1
                env.at(env.now, "cluster_retry", ClusterRetry(self.round), Priority.CONTROL)
                return
        self.expected = {d for d, _ in plan}
        self.plan, self.closed, self.rising = {}, set(), set()
        for device, c in plan:
            self.plan.setdefault(c, []).append(device)
        for c, devices in self.plan.items():
            if self.hier and c >= 0 and c not in self.at_edge:  # the cloud holds the new cluster model
                e = self.cluster_edge[c]
                env.send(("cloud", 0), ("edge", e), "cluster_model_done", ClusterEdge(self.round, c, e), "download")
                continue
            for device in devices:
                self.send_model(device, self.link, ClusterMsg(device, self.round, c))

    def server_of(self, device: int, link: str, payload: Any) -> tuple[str, int]:
        """With edge servers: the cluster's server (warm-up: the device's home server)."""
        if link == "device_edge" and payload.cluster >= 0:
            return ("edge", self.cluster_edge[payload.cluster])
        return super().server_of(device, link, payload)

    def on_cluster_model_done(self, event: Event) -> None:
        """A cluster model reached its edge server: its chosen members download it from there."""
        c = event.payload.cluster
        self.at_edge.add(c)
        for device in self.plan.get(c, []):
            if device in self.expected:
                self.send_model(device, self.link, ClusterMsg(device, self.round, c))

    def on_cluster_retry(self, event: Event) -> None:
        """Somebody came back online: begin the round now."""
        if not self.env.stopping:
            self._begin()

    def on_train_start(self, event: Event) -> None:
        """Train from the cluster's model (warm-up: from w0 for ``warmup_epochs`` epochs)."""
        msg: ClusterMsg = event.payload
        if msg.cluster < 0:
            spec = dataclasses.replace(self.env.spec, epochs=self.cfg.warmup_epochs, steps=None)
            self.start_job(event, self.round_models[0], spec)
        else:
            self.start_job(event, self.round_models[msg.cluster])

    def on_train_done(self, event: Event) -> None:
        """Upload the update (to the cloud, or to the cluster's edge server)."""
        self.collect_and_upload(event, self.link)

    def _recluster_due(self) -> bool:
        """Whether the round beginning now re-clusters: every ϱ rounds (``periodic``), after a flag
        (``adaptive``) or a watched world change (``on_event``)."""
        if self.every is not None:
            return self.round % self.every == 0
        if self.pending:
            return True
        if self.seen is not None:
            return self.policy.world_changed(self.seen.changes(world_snapshot(self.env)))
        return False

    def _relaying(self) -> bool:
        """Whether this round's updates go on to the cloud one by one (warm-up and re-clustering rounds)."""
        return not self.clustered or self.relay_round

    def _rounds_closed(self) -> None:
        """Tell the trigger each cluster's round time (round start → its last member's arrival)."""
        if self.policy.static:
            return
        for c, devices in sorted(self.plan.items()):
            times = [self.arrived_at[d] for d in devices if d in self.arrived_at]
            if c >= 0 and times:
                flag = self.policy.round_closed(c, max(times) - self.began_at)
                self.pending = self.policy.aggregation_applied(c, flag) or self.pending

    def on_upload_done(self, event: Event) -> None:
        """Keep the update; the round closes when every expected device has arrived or dropped. With edge
        servers the update is at a server: relayed to the cloud, or kept for the cluster's aggregation."""
        msg: ClusterMsg = event.payload
        if self.hier and self._relaying():
            server = self.server_of(msg.device, self.link, msg)
            self.env.send(server, ("cloud", 0), "relay_done", msg, "relay")
            return
        self.updates[msg.device] = self.jobs.pop(msg.device).params
        self.arrived_at[msg.device] = self.env.now
        self._maybe_close()

    def on_relay_done(self, event: Event) -> None:
        """A relayed update reached the cloud."""
        device = event.payload.device
        self.updates[device] = self.jobs.pop(device).params
        self.arrived_at[device] = self.env.now
        self._maybe_close()

    def on_cluster_upload_done(self, event: Event) -> None:
        """A cluster model reached the cloud from its edge server."""
        self.rising.discard(event.payload.cluster)
        self._maybe_close()

    def on_device_lost(self, event: Event) -> None:
        """A device dropped out: the round no longer waits for it."""
        self.expected.discard(event.payload.device)
        self.jobs.pop(event.payload.device, None)
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self.hier and not self._relaying():
            self._close_at_edges()
            return
        if not self.expected.issubset(self.updates):
            return
        env = self.env
        if not self.clustered:
            self._cluster("warmup", env.global_model if self.cfg.use_delta else None)
            self.clustered = True
        else:
            self._rounds_closed()
            for c, members in enumerate(self.members):
                got = [d for d in members if d in self.updates]
                if got:
                    self.models[c] = env.tier("cloud").average([self.updates[d] for d in got],
                                                               [float(env.world.samples[d]) for d in got])
                    self.at_edge.discard(c)  # (a relay round) the new model is at the cloud: sent down next round
            if self.relay_round and len(self.updates) > 1:
                self._recluster()
        self._commit()

    def _close_at_edges(self) -> None:
        """Edge servers aggregate each cluster whose members are all in (or dropped) and send its model up;
        the cloud commits when every cluster of the round is closed and its model has arrived."""
        env = self.env
        for c, devices in sorted(self.plan.items()):
            if c in self.closed or not all(d in self.updates or d not in self.expected for d in devices):
                continue
            self.closed.add(c)
            got = [d for d in devices if d in self.updates]
            if not got:  # every chosen member dropped: the cluster model stays as it was
                continue
            e = self.cluster_edge[c]
            server = env.tier("edge", e)
            self.models[c] = server.average([self.updates[d] for d in got], [float(env.world.samples[d]) for d in got])
            server.aggregated(got, {"participants": got, "cluster": c}, {"cluster": c})
            self.rising.add(c)
            env.send(("edge", e), ("cloud", 0), "cluster_upload_done", ClusterEdge(self.round, c, e), "upload")
        if len(self.closed) == len(self.plan) and not self.rising:
            self._rounds_closed()
            self._commit(tier="edge")

    def _cluster(self, reason: str, base: Any) -> None:
        """Affinity propagation on this round's updates (minus ``base``, the warm-up's w0)."""
        devices = sorted(self.updates)
        self._cluster_from(self.env.tier("cloud").similarity([self.updates[d] for d in devices], base), devices, reason)

    def _recluster(self) -> None:
        """Re-cluster on this round's deltas from the models their clusters started the round with."""
        env = self.env
        devices = sorted(self.updates)
        cloud = env.tier("cloud")
        deltas = [cloud.combine([(1.0, self.updates[d], self.round_models[int(self.cluster_of[d])])]) for d in devices]
        trigger = {"reason": self.policy.reason, **self.policy.state()}  # what fired, before the policy is remade
        env.telemetry.instant(("cloud", 0), "recluster", env.now, **trigger)
        self._cluster_from(env.tier("cloud").similarity(deltas, None), devices, "recluster", trigger)

    def _cluster_from(self, sim: np.ndarray, devices: list[int], reason: str,
                      trigger: dict[str, Any] | None = None) -> None:
        """AP on ``sim`` over ``devices``; devices without an update join the largest cluster; each
        cluster's model is the sample-weighted average of its members' updates; a clusters.jsonl line."""
        env, cfg = self.env, self.cfg
        seed = int(env.rng("wscc.ap", self.round).integers(2 ** 31 - 1))
        result: Clustering = affinity_clusters(sim, cfg.damping, cfg.preference, cfg.max_iter,
                                               cfg.convergence_iter, seed)
        members = [[devices[i] for i in group] for group in result.members]
        missing = sorted(set(range(env.world.num_devices)) - set(devices))
        largest = max(range(len(members)), key=lambda c: (len(members[c]), -c))
        members[largest] = sorted(members[largest] + missing)
        self.members = members
        # a new clustering: the trigger starts afresh for its K clusters
        self.policy = cfg.recluster.make(len(members), env.world.num_devices)
        self.pending = False
        if self.seen is not None:
            self.seen = world_snapshot(env)
        self.models = []
        self.at_edge = set()  # the new cluster models are at the cloud
        tail: dict[str, Any] = {}
        if self.hier:  # cluster → the home server of most of its members (lowest id on a tie)
            self.cluster_edge = cluster_servers(members, env.world.edge_of, env.world.num_edges)
            tail["edges"] = list(self.cluster_edge)
        for c, group in enumerate(members):
            self.cluster_of[group] = c
            got = [d for d in group if d in self.updates]  # every cluster has an AP member with an update
            self.models.append(env.tier("cloud").average([self.updates[d] for d in got],
                                                         [float(env.world.samples[d]) for d in got]))
        env.telemetry.clusters(ClustersRecord(
            env.now, reason, "wscc", [list(map(int, g)) for g in members], [f"cluster {c}" for c in range(len(members))],
            tail={"exemplars": [devices[i] for i in result.exemplars], "fallback": result.fallback,
                  "use_delta": cfg.use_delta or reason == "recluster", "similarity": similarity_summary(sim, result.labels),
                  **tail, **({"trigger": trigger} if trigger else {})}))
        if self.hier:  # devices.csv: each device's server is its cluster's
            env.telemetry.devices(np.array([self.cluster_edge[int(c)] for c in self.cluster_of], dtype=np.int64))

    def _commit(self, tier: str = "device") -> None:
        """The cloud's model: the sample-weighted average of the cluster models (one cloud aggregation).
        ``tier="edge"``: the updates were aggregated (and counted) at the edge servers."""
        env = self.env
        cloud = env.tier("cloud")
        for c, group in enumerate(self.members):
            cloud.add(self.models[c], float(sum(int(env.world.samples[d]) for d in group)))
        env.set_global(cloud.commit(sorted(self.updates), source=tier))
        self.round += 1
        if not env.stopping:
            self._begin()

    # -- what the driver asks ---------------------------------------------------------------------
    def device_models(self) -> dict[int, Any] | None:
        """Each device's cluster model (after the warm-up)."""
        if not self.clustered:
            return None
        return {d: self.models[int(self.cluster_of[d])] for d in range(self.env.world.num_devices)}
