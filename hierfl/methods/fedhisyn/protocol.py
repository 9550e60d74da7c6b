"""FedHiSyn: capacity classes, ring exchange inside each class, synchronous time-weighted aggregation.

G. Li, Y. Hu, M. Zhang, J. Liu, Q. Yin, Y. Peng, D. Dou, "FedHiSyn: A Hierarchical Synchronous
Federated Learning Framework for Resource and Data Heterogeneity", ICPP 2022 (arXiv 2206.10546).
docs/explanation/algorithms.md §3: devices are put into ``k`` classes by the time ``t_i`` of one local training
unit; each class is a ring ordered fastest → slowest (the slowest sends back to the fastest).

One round (docs/explanation/algorithms.md §3.3; [D] unless noted)::

    the cloud broadcasts w_r; device i trains from its arrival for T virtual seconds:
      it runs units back to back and never waits; after each unit it forwards its model to
      succ(i) over a device-to-device link and continues with the newest model that arrived
      meanwhile (arrival_policy: latest) or the plain average of its own and all arrived ones
      (average), or its own when nothing arrived; a unit that would end after the window is
      discarded (it is never run)
    at the end of its window every device with >= 1 finished unit uploads its last trained model
    when every device has reported, w_{r+1} = Σ p_i · last_i with p_i ∝ l_i, the device's
      mean unit time ([B], weighting: time), or n_i (data), or 1 (uniform)

The round is a synchronous aggregation point of every device at the cloud, closed by the scenario's
``straggler:`` policy (``wait_all``, the paper's rule, by default): ``deadline`` closes it ``seconds``
after the broadcast, dropping later uploads (with ``partial: true`` each device's window instead
ends early enough for its upload to arrive in time); ``first_k`` closes it on the first ``k``
uploads. A device with no finished unit has nothing to send: the round stops waiting for it.

``T = auto`` is ``max_i (t_i + C_com(i, succ(i)))`` so every device finishes at least one unit.
Uploads go device → cloud directly (the [D] default); a class leader is not implemented.

Re-classing (``recluster:``, :mod:`hierfl.protocols.regroup`; beyond the paper): the groups are the
capacity classes, formed again by the same ``classing`` from each device's unit time *now*
(slowdowns), with new rings (and a new ``T`` when it is ``auto``) [D]. A class's round time for the
``adaptive`` trigger is the longest mean unit time among its members that round [D] (a round itself
always lasts ``T``); each class counts once per round for ``periodic``. The decision is taken
between rounds, when nothing is in flight; a moved device's migration transfer is the global
model from the cloud [D].
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveInt, field_validator

from hierfl.config.errors import ConfigError, Problem
from hierfl.core.capacity import capacity_classes, ring_orders, ring_successors
from hierfl.policies.recluster import RECLUSTER, NeverRecluster
from hierfl.kernel.engine import Event, Priority
from hierfl.env import ClustersRecord, Env, Job, RoundEmpty
from hierfl.protocols.base import AggregationPoint, DeviceMsg, PROTOCOLS, Protocol, ProtocolConfig
from hierfl.protocols.regroup import Regrouping
from hierfl.protocols.straggler import Barrier, GUARD_S

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["FedHiSynConfig", "FedHiSyn"]


@dataclass(frozen=True)
class RoundMsg(DeviceMsg):
    """A device's download, unit, window end or upload in round ``round``."""

    round: int


@dataclass(frozen=True)
class RingHop(DeviceMsg):
    """A model sent along the ring to ``device`` by ``sender`` at ``sent`` (hop sequence number ``hop``)."""

    sender: int
    round: int
    hop: int
    sent: float


@PROTOCOLS.register
class FedHiSynConfig(ProtocolConfig):
    """``protocol: {name: fedhisyn, k: 3, T: auto, weighting: time, arrival_policy: latest}``."""

    supports_churn: ClassVar[bool] = False
    own_train_specs: ClassVar[bool] = True  # (jobs of its own steps or epochs: see ProtocolConfig)

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        # every device takes part (no pool to over-select from); a device trains for a time window, not
        # a number of epochs random_epochs could shorten, but partial work shortens its window
        AggregationPoint("straggler", "device→cloud over every class", synchronous=True, selects=False,
                         fixed_work=False),)

    name: Literal["fedhisyn"] = "fedhisyn"
    grouping: Literal["capacity_classes"] = Field(default="capacity_classes",
                                                  description="classes by compute capacity, one ring each")
    k: int = Field(default=3, ge=1, description="number of capacity classes, 1..devices.count")
    classing: Literal["kmeans", "quantile"] = Field(
        default="kmeans", description="1-D k-means on log unit time, or equal-size quantile bins")
    T: float | str = Field(default="auto", description="round length (virtual s of local training) or 'auto'")
    unit_epochs: PositiveInt = Field(default=1, description="local epochs in one training unit")
    weighting: Literal["time", "data", "uniform"] = Field(
        default="time", description="cloud weights: mean unit time, sample count, or equal")
    arrival_policy: Literal["latest", "average"] = Field(
        default="latest", description="after a unit: adopt the newest arrived model, or average own + arrived")
    upload: Literal["direct"] = Field(default="direct", description="device → cloud (a class leader is not implemented)")
    recluster: RECLUSTER.union() = Field(  # type: ignore[valid-type]
        default=NeverRecluster(),
        description="when the capacity classes and rings are formed again from the unit times now (never, "
                    "periodic, adaptive, on_event); decided between rounds")

    @field_validator("T", mode="before")
    @classmethod
    def _round_length(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) and value > 0:
            return float(value)
        raise ValueError("must be 'auto' or a number of seconds > 0")

    def check(self, scenario: Scenario) -> list[Problem]:
        """k within 1..N; devices upload to the cloud directly, so no edge servers."""
        problems = []
        n = scenario.devices.count
        if self.k > n:
            problems.append(Problem("protocol.k", f"more classes than devices; allowed: 1..{n}", self.k))
        if scenario.topology.edge_servers:
            problems.append(Problem("topology.edge_servers",
                                    "fedhisyn uploads device → cloud directly (protocol.upload: direct); allowed: 0",
                                    scenario.topology.edge_servers))
        if self.recluster.grouping is not None:
            problems.append(Problem("protocol.recluster.grouping", "fedhisyn's groups are its capacity classes, "
                                    "formed by its classing from unit times; allowed: null", self.recluster.grouping))
        if self.recluster.migration.in_flight != "finish":
            problems.append(Problem("protocol.recluster.migration.in_flight", "fedhisyn re-classes between rounds, "
                                    "when no work is in flight; allowed: finish", self.recluster.migration.in_flight))
        policy = scenario.straggler
        deadline = policy.deadline_s
        if deadline is not None and not policy.partial_work and self.T != "auto" and deadline <= float(self.T):
            # every window lasts T after the device's download: each upload would land after the deadline
            problems.append(Problem("straggler.seconds", f"every device trains for T = {float(self.T):g} s before "
                                    "it uploads, so no update could arrive in time; allowed: more than T, or "
                                    "partial: true (windows end in time for the upload)", deadline))
        return problems

    def create(self, env: Env) -> FedHiSyn:
        """A FedHiSyn run."""
        return FedHiSyn(self, env)


class FedHiSyn(Protocol):
    """Synchronous rounds of fixed length; ring hand-offs inside capacity classes during a round."""

    def __init__(self, cfg: FedHiSynConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        base, world = env.spec, env.world
        self.unit_spec = replace(base, epochs=cfg.unit_epochs, steps=None)  # keeps the trainer's fields
        n = world.num_devices
        self.unit_s = np.array([world.compute_s(i, self.unit_spec) for i in range(n)], dtype=np.float64)
        self.labels = capacity_classes(self.unit_s, cfg.k, cfg.classing)
        self._rings()
        if self.round_s < float(self.unit_s.min()):
            raise ConfigError([Problem("protocol.T", f"no device can finish a unit: the fastest needs "
                                       f"{self.unit_s.min():.6g} s; allowed: >= that, or 'auto'", cfg.T)])
        self.round = 0
        self.barrier: Barrier  # the round's, under the straggler policy (from start())
        self.round_model: Any = None
        self._hop_seq = 0
        self._hops: dict[int, Any] = {}  # model handles travelling on ring links, by hop id
        self._reset_round()
        self.regroup = Regrouping(cfg.recluster, env, list(range(cfg.k)), fallback="capacity_classes",
                                  own=self._reclass, server=("cloud", 0), label="class")

    def _rings(self) -> None:
        """Rings (fastest → slowest) of the classes ``labels``, ring successors, hop times and ``T`` (auto)."""
        world, cfg = self.env.world, self.cfg
        n = world.num_devices
        self.rings = ring_orders(self.labels, self.unit_s)
        self.succ = ring_successors(self.rings, n)
        self.hop_s = np.array([world.d2d_s(i, int(self.succ[i])) if self.succ[i] != i else 0.0 for i in range(n)])
        self.round_s = float(np.max(self.unit_s + self.hop_s)) if cfg.T == "auto" else float(cfg.T)

    def _reclass(self) -> np.ndarray:
        """The capacity classes again, from each device's unit time now."""
        self.unit_s = np.asarray(self.env.live.current_compute_s(self.unit_spec), dtype=np.float64)
        return capacity_classes(self.unit_s, self.cfg.k, self.cfg.classing).astype(np.int64)

    def _reset_round(self) -> None:
        n = self.env.world.num_devices
        self.model: dict[int, Any] = {}            # what the device's next unit starts from
        self.last: dict[int, Any] = {}             # its last trained model (what it uploads)
        self.mailbox: dict[int, list[Any]] = {}    # models arrived since its last unit ended
        self.window_start: dict[int, float] = {}
        self.window_end: dict[int, float] = {}
        self.units = np.zeros(n, dtype=np.int64)
        self.busy_s = np.zeros(n, dtype=np.float64)
        self.window_s: dict[int, float] = {}       # its window's length (T, or less under partial work)
        self.reported: set[int] = set()

    def clusters_record(self) -> ClustersRecord:
        """Classes (fastest first), each ring's order and the devices' unit times."""
        return ClustersRecord(0.0, "initial", "capacity_classes", [sorted(r) for r in self.rings],
                              ["cloud"] * len(self.rings), head={"classing": self.cfg.classing},
                              mid={"rings": self.rings},
                              tail={"unit_time_s": [[float(self.unit_s[d]) for d in r] for r in self.rings],
                                    "round_s": self.round_s})

    def start(self) -> None:
        """Round 0 begins at t = 0."""
        self._begin_round()

    def _begin_round(self) -> None:
        self._reset_round()
        env = self.env
        self.round_model = env.global_model
        self._hops = {}  # a hop of a closed round still on its way is ignored when it arrives
        self._sending: dict[int, dict[int, int]] = {}  # device → its ring hops on the way: hop id → transfer
        everyone = list(range(env.world.num_devices))
        self.barrier = Barrier(self, env.straggler, ("cloud", 0), self.round, everyone, len(everyone), self._close)
        for device in everyone:
            self.send_model(device, "device_cloud", RoundMsg(device, self.round))

    def on_train_start(self, event: Event) -> None:
        """The global model arrived: the device's window of ``T`` seconds starts now (under partial work
        it ends early enough for the upload to reach the cloud by the round's deadline)."""
        env = self.env
        device = event.payload.device
        window = self.round_s
        plan_by = self.barrier.plan_by
        if plan_by is not None and env.now + window > plan_by - env.world.upload_s(device) - GUARD_S:
            window = max(plan_by - env.world.upload_s(device) - GUARD_S - env.now, 0.0)
        self.model[device] = self.round_model
        self.window_start[device] = env.now
        self.window_end[device] = env.now + window
        self.window_s[device] = window
        env.schedule(window, "deadline", RoundMsg(device, self.round), Priority.CONTROL)
        self._next_unit(device)

    def _next_unit(self, device: int) -> None:
        env = self.env
        end = self.window_end[device]
        # Decide on summed durations, not on accumulated clock readings: two 0.5 s units fit a
        # 1.0 s window exactly, and a unit that fits never ends after the deadline event.
        elapsed = float(self.busy_s[device])
        if elapsed + env.planned_compute_s(device, self.unit_spec) <= self.window_s[device]:
            # the end is the window start + summed durations (not now + duration: see above)
            planned_end = self.window_start[device] + (elapsed + env.planned_compute_s(device, self.unit_spec))
            job, _ = env.start_job(device, self.model[device], RoundMsg(device, self.round), self.unit_spec,
                                   done="unit_done", end=planned_end)
            self.jobs[device] = job
        elif end > env.now:
            # the unit it would start now is cut by the deadline: discarded, so never computed
            env.telemetry.span(("device", device), "train_discarded", env.now, end - env.now)

    def on_unit_done(self, event: Event) -> None:
        """A unit finished: forward the model along the ring, pick the next start model, go on."""
        env = self.env
        device = event.payload.device
        job: Job = self.jobs.pop(device)
        env.finish_training(job)
        self.last[device] = job.params
        self.units[device] += 1
        self.busy_s[device] += job.compute_s
        peer = int(self.succ[device])
        if peer != device:  # a class of one has no ring to pass along
            hop = self._hop_seq
            self._hop_seq += 1
            self._hops[hop] = job.params
            fid = env.send(("device", device), ("device", peer), "ring_arrival",
                           RingHop(peer, device, self.round, hop, env.now),
                           "ring_send", peer=peer)
            self._sending.setdefault(device, {})[hop] = fid
        arrived = self.mailbox.pop(device, [])
        if not arrived:
            self.model[device] = job.params           # nothing arrived: keep training its own model
        elif self.cfg.arrival_policy == "latest":
            self.model[device] = arrived[-1]
        else:
            # a device mixes what came round the ring with its own model (a device-tier aggregation)
            self.model[device] = env.tier("device", device).average([job.params, *arrived], [1.0] * (1 + len(arrived)))
        self._next_unit(device)

    def on_ring_arrival(self, event: Event) -> None:
        """A predecessor's model arrived; it is used when the device's current unit ends."""
        p = event.payload
        handle = self._hops.pop(p.hop, None)
        sending = self._sending.get(p.sender)
        if sending is not None:
            sending.pop(p.hop, None)
        device = p.device
        self.env.telemetry.flow(("device", p.sender), ("device", device), p.sent, self.env.now, "ring_hop", p.hop)
        if p.round != self.round or device in self.reported:
            return  # the receiver's window is over: the model is not used
        self.env.telemetry.instant(("device", device), "ring_arrival", self.env.now, peer=p.sender)
        if self.cfg.arrival_policy == "latest":
            self.mailbox[device] = [handle]
        else:
            self.mailbox.setdefault(device, []).append(handle)

    def on_deadline(self, event: Event) -> None:
        """The device's window is over: upload its last trained model, if it finished a unit."""
        device = event.payload.device
        if event.payload.round != self.round or self.barrier.closed:
            return  # a window of a round the straggler policy has closed
        self.reported.add(device)  # no more ring arrivals are used
        self.mailbox.pop(device, None)
        if self.units[device] == 0:
            self.barrier.drop(device)  # nothing to send: the round stops waiting for it
            return
        if self.barrier.plan_by is not None:
            # partial work planned the window so that an upload alone on the device's link is in on time:
            # its ring hops still on the way (their receivers' windows are ending too) are withdrawn [D]
            for hop, fid in sorted(self._sending.pop(device, {}).items()):
                self.env.cancel_transfer(fid)
                self._hops.pop(hop, None)
        self.env.send(("device", device), ("cloud", 0), "upload_done", RoundMsg(device, self.round),
                      "upload")

    def weight(self, device: int) -> float:
        """Its cloud aggregation weight: mean unit time (``time``), samples (``data``) or 1 (``uniform``)."""
        if self.cfg.weighting == "time":
            return float(self.busy_s[device] / self.units[device])
        if self.cfg.weighting == "data":
            return float(self.env.world.samples[device])
        return 1.0

    def on_upload_done(self, event: Event) -> None:
        """A last trained model reached the cloud: fold it in; the round's barrier decides when it closes."""
        device = event.payload.device
        self.env.tier("cloud").add(self.last[device], self.weight(device))
        self.barrier.arrive(device)

    def on_round_deadline(self, event: Event) -> None:
        """The straggler deadline of the round."""
        if event.payload.round == self.round:
            self.barrier.on_deadline()

    def _close(self, arrived: list[int]) -> None:
        """The round closed: the cloud model is the weighted mean of the last models that arrived."""
        env = self.env
        if arrived:
            env.set_global(env.tier("cloud").commit(sorted(arrived), base=self.round_model))
        else:  # a deadline before any upload (with wait_all, T >= the fastest unit: there is always one)
            env.telemetry.record(RoundEmpty({"round": self.round}))
        self.round += 1
        if not env.stopping:
            self._classes_closed()
            if self.regroup.due():
                self._regroup()
            self._begin_round()

    def _classes_closed(self) -> None:
        """Tell the trigger each class's round time (the longest mean unit time among its members) and that
        its models were applied."""
        if self.regroup.policy.static:
            return
        for c, ring in enumerate(self.rings):
            done = [d for d in ring if self.units[d] > 0]
            if done:
                self.regroup.round_closed(c, max(float(self.busy_s[d] / self.units[d]) for d in done))
                self.regroup.applied(c)

    def _regroup(self) -> None:
        """Form the classes and rings again (between rounds: nothing is in flight)."""
        old = np.asarray(self.labels, dtype=np.int64).copy()
        new = self.regroup.plan(old)
        self.regroup.migrate(old, new)
        self.labels = new
        self._rings()
