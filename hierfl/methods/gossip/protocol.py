"""Serverless learning on a device graph: D-PSGD, AD-PSGD and peer-to-peer learning on graphs.

* X. Lian, C. Zhang, H. Zhang, C.-J. Hsieh, W. Zhang, J. Liu, "Can Decentralized Algorithms
  Outperform Centralized Algorithms? A Case Study for Decentralized Parallel Stochastic Gradient
  Descent", NeurIPS 2017 (arXiv 1705.09056) — D-PSGD, ``protocol: dpsgd``;
* X. Lian, W. Zhang, C. Zhang, J. Liu, "Asynchronous Decentralized Parallel Stochastic Gradient
  Descent", ICML 2018 (arXiv 1710.06952) — AD-PSGD, ``protocol: adpsgd``;
* A. Lalitha, O. C. Kilinc, T. Javidi, F. Koushanfar, "Peer-to-peer Federated Learning on Graphs",
  arXiv 1901.11173 (2019) — ``protocol: p2p`` with point beliefs (local training, then consensus
  averaging of the neighbours' models; the paper's neural-network approximation is known from its
  abstract only, so the rule is a design default).

docs/explanation/algorithms.md §5.11 and docs/explanation/decentralised.md state the rules.
Every device is a node of ``topology.device_graph`` and holds its own model; there is no server in
the data path. Mixing weights are Metropolis–Hastings on the live subgraph
(:func:`hierfl.core.graphs.metropolis_row`), so a node that leaves drops out of its neighbours' mixing.

``sync_neighbourhood`` (D-PSGD, p2p's default), per node i and its step counter s_i::

    train a job from x_i (the step's start model) → y_i
    send m_i to every live neighbour (``update: dpsgd``: m_i = x_i; ``combine_trained``: m_i = y_i)
    wait for one message from every neighbour that was live when the job ended (no global barrier)
    dpsgd:            x_i ← Σ_j W_ij m_j + W_ii x_i + (y_i − x_i)
    combine_trained:  x_i ← W_ii y_i + Σ_j W_ij m_j
    s_i ← s_i + 1, train again

``sync_global`` adds a barrier: a node that has its messages waits until every live node has, and
all mix together (in id order).

``async_pairwise`` (AD-PSGD, gossip), per node i, independently::

    train a job from x_i; on its end x_i ← x_i + (y_i − start)   (the gradient may be stale)
    pick a live neighbour j uniformly (stream ``gossip_partner``); queue the request (FIFO)
    when neither i nor j is in an exchange: both send their model (m_i, m_j) at once, and when both
      have arrived each sets x_k ← x_k + ½ (m_other − m_k)   (= (m_i + m_j)/2 when x_k did not move)
    i trains again once its exchange is over; j keeps training meanwhile

An evaluation (``evaluation.every_s``) tests the average of all nodes' models at no cost (an
observer, not a server), and each node's own model where devices hold test data.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt

from hierfl.config.errors import Problem
from hierfl.core.graphs import metropolis_row
from hierfl.env import Env
from hierfl.env.events import Timer
from hierfl.kernel.engine import Event, Priority
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig
from hierfl.protocols.pairwise import Exchange, PairwiseExchanges

if TYPE_CHECKING:
    from hierfl.core.work import TrainSpec
    from hierfl.scenario.schema import Scenario

__all__ = ["ADPSGDConfig", "DPSGDConfig", "Gossip", "GossipConfig", "P2PConfig"]


@dataclass(frozen=True)
class NodeMsg(DeviceMsg):
    """Node ``device``'s job of step ``step``, or its return after a time offline."""

    step: int


@dataclass(frozen=True)
class Hop(DeviceMsg):
    """A model from ``sender`` to ``device`` (message ``hop``; ``step``: the sender's step; ``exchange``:
    the pairwise exchange it belongs to, -1 for a neighbourhood message)."""

    sender: int
    step: int
    hop: int
    sent: float
    exchange: int = -1


class GossipConfig(ProtocolConfig):
    """Keys every serverless protocol takes."""

    aggregation_style: ClassVar[str] = "models"
    serverless: ClassVar[bool] = True
    # no server: a node mixes its neighbours' models as they come (the modes say when); no round closes
    # on a straggler policy
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "neighbours→device (mixing)", synchronous=False,
                         note="each node mixes when its own neighbours' messages arrive (or in a pairwise exchange); "
                              "no round waits for a set of participants a policy could cut"),)
    mode: Literal["sync_neighbourhood", "sync_global", "async_pairwise"] = "sync_neighbourhood"
    weights: Literal["metropolis"] = Field(
        default="metropolis", description="mixing weights: Metropolis–Hastings on the live subgraph, "
                                          "W_ij = 1/(1 + max(d_i, d_j)) (design default)")
    update: Literal["dpsgd", "combine_trained"] = "dpsgd"
    local_steps: PositiveInt | None = 1
    local_epochs: PositiveInt | None = None
    node_eval: bool = Field(
        default=True, description="at each evaluation, also test every node's own model on the test set "
                                  "(node_accuracy_mean/min/max; N test passes, free in virtual time; design default)")

    def check(self, scenario: Scenario) -> list[Problem]:
        """A device graph is needed; exactly one of local_steps / local_epochs."""
        problems = []
        if scenario.topology.device_graph is None:
            problems.append(Problem("topology.device_graph", f"{self.name} runs on a device-to-device graph; "
                                    "allowed: ring, torus, random_geometric, erdos_renyi, k_regular, small_world, "
                                    "edges"))
        if scenario.stop.virtual_time_s is None:
            problems.append(Problem("stop.virtual_time_s", f"{self.name} has no server, so no rounds: stop.rounds "
                                    "cannot end the run; set stop.virtual_time_s"))
        if (self.local_steps is None) == (self.local_epochs is None):
            problems.append(Problem("protocol.local_steps", "set exactly one of protocol.local_steps and "
                                    "protocol.local_epochs (the other null)", self.local_steps))
        return problems

    def job_spec(self, base: TrainSpec) -> TrainSpec:
        """One node's local work between two exchanges."""
        if self.local_steps is not None:
            return replace(base, steps=self.local_steps, epochs=None)
        return replace(base, epochs=self.local_epochs, steps=None)

    def create(self, env: Env) -> Gossip:
        """A serverless run on the device graph."""
        return Gossip(self, env)


@PROTOCOLS.register
class DPSGDConfig(GossipConfig):
    """``protocol: {name: dpsgd, local_steps: 1}`` — synchronous neighbourhood averaging."""

    needs_graph_edges: ClassVar[bool] = True

    name: Literal["dpsgd"] = "dpsgd"
    mode: Literal["sync_neighbourhood", "sync_global"] = Field(
        default="sync_neighbourhood", description="sync_neighbourhood: each node waits for its neighbours' messages "
                                                  "of the same step (no global barrier, design default); sync_global: "
                                                  "besides, all nodes mix together once every live node is ready")
    update: Literal["dpsgd", "combine_trained"] = Field(
        default="dpsgd", description="dpsgd: neighbours' pre-training models averaged plus the node's own update "
                                     "(Lian et al.); combine_trained: the trained models averaged (design default "
                                     "of p2p)")
    local_steps: PositiveInt | None = Field(default=1, description="local SGD steps between two exchanges "
                                            "(design default 1)")
    local_epochs: PositiveInt | None = Field(default=None, description="local epochs between two exchanges "
                                             "instead of steps (null: use local_steps)")


@PROTOCOLS.register
class ADPSGDConfig(GossipConfig):
    """``protocol: {name: adpsgd, local_steps: 1}`` — asynchronous pairwise gossip."""

    needs_graph_edges: ClassVar[bool] = True

    name: Literal["adpsgd"] = "adpsgd"
    mode: Literal["async_pairwise"] = Field(
        default="async_pairwise", description="after each job a node averages with one random live neighbour")
    update: Literal["dpsgd"] = Field(default="dpsgd", description="the pair averages, then each adds its own "
                                     "(possibly stale) update")
    local_steps: PositiveInt | None = Field(default=1, description="local SGD steps between two exchanges "
                                            "(design default 1)")
    local_epochs: PositiveInt | None = Field(default=None, description="local epochs between two exchanges "
                                             "instead of steps (null: use local_steps)")


@PROTOCOLS.register
class P2PConfig(GossipConfig):
    """``protocol: {name: p2p, belief: point, mode: sync_neighbourhood}`` — peer-to-peer learning on graphs."""

    name: Literal["p2p"] = "p2p"
    belief: Literal["point"] = Field(
        default="point", description="a node's belief: point = a point mass at its model, so the local Bayesian "
                                     "step is local training and the consensus step averages models (design "
                                     "default; the Gaussian form is not implemented)")
    mode: Literal["sync_neighbourhood", "sync_global", "async_pairwise"] = Field(
        default="sync_neighbourhood", description="sync_neighbourhood: wait for every neighbour's belief of the "
                                                  "same step (design default); sync_global: and for every live node; "
                                                  "async_pairwise: pairwise gossip")
    update: Literal["dpsgd", "combine_trained"] = Field(
        default="combine_trained", description="combine_trained: the neighbours' trained beliefs are averaged "
                                               "(design default); dpsgd: as D-PSGD. With async_pairwise a node always "
                                               "applies its update, then averages with its partner")
    local_steps: PositiveInt | None = Field(default=None, description="local SGD steps between two exchanges "
                                            "(null: use local_epochs)")
    local_epochs: PositiveInt | None = Field(default=1, description="local epochs between two exchanges "
                                             "(design default 1)")


class Gossip(Protocol):
    """Nodes that train and mix with their graph neighbours (see the module docstring)."""

    def __init__(self, cfg: GossipConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        graph = env.world.device_graph
        if graph is None:
            raise ValueError(f"{cfg.name} needs topology.device_graph")
        self.graph = graph
        n = env.world.num_devices
        self.spec = cfg.job_spec(env.spec)
        self.sync = cfg.mode != "async_pairwise"
        self.barrier = cfg.mode == "sync_global"
        self.ready: set[int] = set()                # sync_global: nodes that have all their messages
        self.model: dict[int, Any] = {}             # x_i: each node's model now
        self.started: dict[int, Any] = {}           # the model its running job started from
        self.step = np.zeros(n, dtype=np.int64)     # per-node step counters (no global round)
        self.out: set[int] = set()                  # nodes known to be offline (rejoin pending)
        self._hop_seq = 0
        self._hops: dict[int, tuple[Any, int, int]] = {}  # (model, sender, receiver) in flight, by hop id
        self._hops_of: dict[int, set[int]] = {}     # node → the hops to or from it in flight (churn cleanup)
        # sync_neighbourhood: what each node waits for, and what arrived (FIFO per neighbour)
        self.trained: dict[int, Any] = {}
        self.waiting: dict[int, set[int]] = {}
        self.mailbox: list[dict[int, deque[Any]]] = [{} for _ in range(n)]
        # async_pairwise: requests (FIFO), one lock per node, exchanges in progress
        self.pairs = PairwiseExchanges()
        # with churn: the online state of the nodes that wait idle for their neighbours, so that one going
        # offline meanwhile (with nothing in flight, so no device_lost) releases the neighbours waiting for it
        self.watch = env.live.online_index(()) if env.live.churn else None
        self._watch_timer: Event | None = None
        self.mixings = 0                            # neighbourhood mixes (sync) so far

    # -- liveness and weights --------------------------------------------------------------------------
    def live(self, node: int) -> bool:
        """Whether ``node`` takes part now (online and not waiting to rejoin)."""
        return node not in self.out and self.env.live.is_up(node)

    def live_neighbours(self, node: int) -> list[int]:
        """``node``'s neighbours that take part now, in id order."""
        return [j for j in self.graph.neighbours[node] if self.live(j)]

    def weights(self, node: int, senders: list[int]) -> tuple[list[float], float]:
        """Metropolis–Hastings weights of ``senders`` on the live subgraph, and ``node``'s self weight
        (a live neighbour that sent nothing this step leaves its weight on the node itself)."""
        deg = len(self.live_neighbours(node))
        w, _ = metropolis_row(deg, [len(self.live_neighbours(j)) for j in senders])
        return w, 1.0 - sum(w)

    # -- the node loop ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Every node starts from the initial model at t = 0 (an offline one when it comes online)."""
        for node in range(self.env.world.num_devices):
            self.model[node] = self.env.global_model
            self._train(node)

    def _train(self, node: int) -> None:
        env = self.env
        if env.stopping:
            return
        if not env.live.is_up(node):
            self._leave(node)
            return
        self.started[node] = self.model[node]
        job, _ = env.start_job(node, self.model[node], NodeMsg(node, int(self.step[node])), self.spec,
                               done="step_done")
        self.jobs[node] = job

    def on_step_done(self, event: Event) -> None:
        """A node's local work is over: send (sync) or ask a neighbour for an exchange (async)."""
        env = self.env
        node = event.payload.device
        job = self.jobs.pop(node)
        env.finish_training(job)
        if self.sync:
            self._send_all(node, job.params)
            return
        start = self.started.pop(node)
        if self.model[node] is start:
            self.model[node] = job.params
        else:  # an exchange moved the model meanwhile: apply the (stale) update to it
            self.model[node] = env.tier("device", node).combine([(1.0, self.model[node], None),
                                                                 (1.0, job.params, start)])
        self.step[node] += 1
        partners = self.live_neighbours(node)
        if not partners:
            self._train(node)  # nobody to talk to: keep learning alone
            return
        pick = env.rng("gossip_partner", node, int(self.step[node])).integers(len(partners))
        self.pairs.ask(node, partners[int(pick)])
        env.telemetry.instant(("device", node), "gossip_request", env.now, peer=partners[int(pick)])
        self._serve()

    # -- sync_neighbourhood ----------------------------------------------------------------------------
    def _send_all(self, node: int, trained: Any) -> None:
        self.trained[node] = trained
        message = trained if self.cfg.update == "combine_trained" else self.started[node]
        peers = self.live_neighbours(node)
        for peer in peers:
            self._send(node, peer, message, "gossip_arrival")
        self.waiting[node] = set(peers)
        box = self.mailbox[node]
        for j in [j for j in box if j not in self.waiting[node]]:
            del box[j]  # sent before it left: a neighbour that rejoins starts afresh
        self._try_mix(node)
        if node in self.waiting and self.watch is not None:
            self.watch.advance(self.env.now)
            self.watch.add(node)
            self._arm()

    def _arm(self) -> None:
        """One timer at the next online-state change of a waiting node."""
        assert self.watch is not None
        t = self.watch.next_change()
        pending = self._watch_timer
        if pending is not None and pending.time <= t:
            return
        if pending is not None:
            self.env.cancel(pending)
        self._watch_timer = self.env.at(t, "idle_change", Timer(), Priority.CONTROL) if np.isfinite(t) else None

    def on_idle_change(self, event: Event) -> None:
        """A waiting node changed state: one that went offline leaves the mixing."""
        assert self.watch is not None
        self._watch_timer = None
        for node, online in self.watch.advance(self.env.now):
            if not online and node in self.waiting:
                self._leave(node)
        self._arm()

    def _send(self, src: int, dst: int, model: Any, event: str, exchange: int = -1) -> int:
        hop = self._hop_seq
        self._hop_seq += 1
        self._hops[hop] = (model, src, dst)
        self._hops_of.setdefault(src, set()).add(hop)
        self._hops_of.setdefault(dst, set()).add(hop)
        return self.env.send(("device", src), ("device", dst), event,
                             Hop(dst, src, int(self.step[src]), hop, self.env.now, exchange),
                             "gossip_send", peer=dst)

    def _landed(self, p: Hop) -> Any:
        """The model a hop carried (it is no longer in flight)."""
        model, src, dst = self._hops.pop(p.hop)
        for end in (src, dst):
            self._hops_of.get(end, set()).discard(p.hop)
        return model

    def on_gossip_arrival(self, event: Event) -> None:
        """A neighbour's model arrived; the node mixes once it has one from every awaited neighbour."""
        p = event.payload
        model = self._landed(p)
        self.env.telemetry.flow(("device", p.sender), ("device", p.device), p.sent, self.env.now, "gossip", p.hop)
        if not self.live(p.device):
            return
        self.mailbox[p.device].setdefault(p.sender, deque()).append(model)
        self._try_mix(p.device)

    def _try_mix(self, node: int) -> None:
        awaited = self.waiting.get(node)
        if awaited is None:
            return  # still training
        for j in [j for j in awaited if not self.live(j)]:  # a neighbour left: it drops out of the mixing
            awaited.discard(j)
            self.mailbox[node].pop(j, None)
        box = self.mailbox[node]
        if any(not box.get(j) for j in awaited):
            return
        if self.barrier:  # sync_global: ready, but everyone mixes together once every live node is
            self.ready.add(node)
            self._release()
            return
        self._mix(node)

    def _release(self) -> None:
        """sync_global: when every live node is ready, all mix (in id order) and start the next step.
        O(N) per call: the barrier looks at every node."""
        if not self.ready or any(self.live(k) and k not in self.ready for k in range(self.env.world.num_devices)):
            return
        nodes = sorted(self.ready)
        self.ready.clear()
        for node in nodes:
            if node in self.waiting:
                self._mix(node)

    def _mix(self, node: int) -> None:
        awaited = self.waiting.pop(node)
        box = self.mailbox[node]
        if self.watch is not None:
            self.watch.discard(node)
        if not self.env.live.is_up(node):
            self._leave(node)
            return
        senders = sorted(awaited)
        received = [box[j].popleft() for j in senders]
        w, w_self = self.weights(node, senders)
        own, start = self.trained.pop(node), self.started.pop(node)
        point = self.env.tier("device", node)
        if self.cfg.update == "combine_trained":
            self.model[node] = point.average([own, *received], [w_self, *w])
        else:
            terms = [(w_self, start, None), *[(c, m, None) for c, m in zip(w, received)], (1.0, own, start)]
            self.model[node] = point.combine(terms)
        self.step[node] += 1
        self.mixings += 1
        self.env.telemetry.instant(("device", node), "mix", self.env.now, peers=senders, step=int(self.step[node]))
        self._train(node)

    # -- async_pairwise --------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Start every queued exchange whose two nodes are free, in request order."""
        self.pairs.serve(self._start_exchange)

    def _start_exchange(self, a: int, b: int) -> None:
        if not self.live(a):
            self._leave(a)
        elif not self.live(b):
            self._train(a)  # the partner left meanwhile: go on alone
        else:
            ex_id = self._hop_seq  # an exchange is named by its first hop's id
            sent = {a: self.model[a], b: self.model[b]}
            self.pairs.begin(ex_id, Exchange(a, b, sent, [self._send(a, b, sent[a], "exchange_arrival", ex_id),
                                                          self._send(b, a, sent[b], "exchange_arrival", ex_id)]))

    def on_exchange_arrival(self, event: Event) -> None:
        """One half of a pairwise exchange arrived; when both have, the pair averages."""
        p = event.payload
        self._landed(p)
        self.env.telemetry.flow(("device", p.sender), ("device", p.device), p.sent, self.env.now, "gossip", p.hop)
        ex = self.pairs.arrived(p.exchange)
        if ex is None:
            return
        a, b, sent = ex.a, ex.b, ex.sent
        mean = None
        for k, other in ((a, b), (b, a)):
            if self.model[k] is sent[k]:
                if mean is None:
                    mean = self.env.tier("device", a).average([sent[a], sent[b]], [0.5, 0.5])
                self.model[k] = mean
            else:  # k's own update landed meanwhile: keep it, move by half the difference
                self.model[k] = self.env.tier("device", k).combine([(1.0, self.model[k], None),
                                                                   (0.5, sent[other], sent[k])])
        self.env.telemetry.instant(("device", a), "mix", self.env.now, peers=[b], step=int(self.step[a]))
        self._train(a)
        self._serve()

    # -- churn -----------------------------------------------------------------------------------------
    def on_device_lost(self, event: Event) -> None:
        """A node went offline: it leaves the mixing; its neighbours go on without it."""
        self._leave(event.payload.device)

    def _leave(self, node: int) -> None:
        env = self.env
        first = node not in self.out
        self.out.add(node)
        self.ready.discard(node)
        self.waiting.pop(node, None)
        if self.watch is not None:
            self.watch.discard(node)
        self.trained.pop(node, None)
        self.started.pop(node, None)
        self.mailbox[node].clear()
        ex = self.pairs.void(node)
        if ex is not None:  # its exchange is void: the partner is free again
            for fid in ex.transfers:
                env.cancel_transfer(fid)
            if ex.a != node:
                self._train(ex.a)
        if first:
            env.cancel_device(node)  # its transfers are withdrawn: forget the models they carried
            for hop in self._hops_of.pop(node, set()):
                _, src, dst = self._hops.pop(hop)
                self._hops_of.get(dst if src == node else src, set()).discard(hop)
            self.jobs.pop(node, None)
            back = env.live.next_up([node])
            if np.isfinite(back):
                env.at(back, "rejoin", NodeMsg(node, int(self.step[node])), Priority.START)
        for j in self.graph.neighbours[node]:
            self._try_mix(j)
        if self.barrier:
            self._release()
        if not self.sync:
            self._serve()

    def on_rejoin(self, event: Event) -> None:
        """An offline node is back: it trains from the model it had."""
        node = event.payload.device
        if not self.env.live.is_up(node):
            back = self.env.live.next_up([node])
            if np.isfinite(back):
                self.env.at(back, "rejoin", event.payload, Priority.START)
            return
        self.out.discard(node)
        self._train(node)

    # -- the observer ----------------------------------------------------------------------------------
    def device_models(self) -> dict[int, Any] | None:
        """Each node is tested with its own model."""
        return dict(self.model)

    def observe(self) -> dict[str, Any]:
        """Before an evaluation, at no cost: the model tested is the average x̄ of all nodes' models, and
        the line reports the consensus distance ``(1/N) Σ ‖x_i − x̄‖²``, the mixes or exchanges so far and
        the spread of the nodes' step counters."""
        env = self.env
        n = env.world.num_devices
        fields: dict[str, Any] = {"mixings": self.mixings, "gossip_exchanges": self.pairs.completed,
                                  "node_steps_min": int(self.step.min()), "node_steps_max": int(self.step.max())}
        if env.spec.train:
            models = [self.model[i] for i in range(n)]
            point = env.tier("device", 0)
            mean = point.average(models, [1.0] * n)
            env.set_global(mean)
            fields["consensus_distance"] = float(np.sum(point.similarity(models, mean, measure="sq_norm")) / n)
            if self.cfg.node_eval:  # each node's own model on the test set: mean and spread
                # a node's model can be a job's result (a row of a batch of jobs, under Ray), which is not a
                # model handle on its own: the average of that one model is (the same numbers, as one)
                acc = [point.evaluate(point.average([m], [1.0]))[0] for m in models]
                fields.update(node_accuracy_mean=float(np.mean(acc)), node_accuracy_min=float(min(acc)),
                              node_accuracy_max=float(max(acc)))
        return fields
