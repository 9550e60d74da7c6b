"""FedAvg: synchronous federated averaging.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017. docs/explanation/algorithms.md §5.1: each round samples
``m = max(⌈C·K⌉, 1)`` devices uniformly without replacement; each runs ``E`` local epochs of
minibatch SGD (batch ``B``; ``B = null`` with ``E = 1`` is FedSGD) from the global model; the
server waits for all of them and sets ``w ← Σ n_k w_k / Σ n_k``.

Virtual time of one round (server-side aggregation is instantaneous)::

    round_time = max over selected i of (download_i + compute_i + upload_i)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.kernel.engine import Event, Priority
from hierfl.env import Env, Payload, RoundEmpty
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig
from hierfl.protocols.cohort import EmptyCohort, SamplingKind, coin_cohort, coin_problems, empty_cohort_field, sampling_field
from hierfl.protocols.straggler import Barrier, planned_spec

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["FedAvgConfig", "FedAvg", "RoundMsg"]


@dataclass(frozen=True)
class RoundMsg(DeviceMsg):
    """A device's model download / upload in cloud round ``round``."""

    round: int


@dataclass(frozen=True)
class RoundRetry(Payload):
    """Try to begin round ``round`` again (nobody was online)."""

    round: int


@PROTOCOLS.register
class FedAvgConfig(ProtocolConfig):
    """``protocol: {name: fedavg, fraction: C, weighting: samples}``; E and B come from ``training:``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    control_variates: ClassVar[bool] = True

    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=True),)
    rule_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink")  # base helpers
    subprotocol_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    cohort_sampling: ClassVar[str | None] = "fixed_size"  # rng.choice(N, m, replace=False) while all are online
    name: Literal["fedavg"] = "fedavg"
    read_only_with: ClassVar[dict[str, ReadWith]] = {"empty_cohort": ReadWith("sampling", ("bernoulli",))}
    fraction: float = Field(default=0.1, gt=0.0, le=1.0, description="C: fraction of devices per round")
    sampling: SamplingKind = sampling_field("max(⌈C·N⌉, 1) of the online devices, uniformly without replacement")
    empty_cohort: EmptyCohort = empty_cohort_field("skip", "an empty round: no aggregation, and the next round "
                                                           "begins at once")
    weighting: Literal["samples", "uniform"] = Field(
        default="samples", description="cloud average weighted by sample count (McMahan et al.) or uniform "
                                       "(Reddi et al.'s FedOpt average, docs/explanation/algorithms.md §5.7)")

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """``max(⌈C·N⌉, 1)`` updates at the cloud."""
        return {"cloud": min(devices, max(math.ceil(self.fraction * devices - 1e-9), 1)), "edge": None}

    def sampling_scheme(self) -> str | None:
        """``fixed_size``, or ``poisson`` with ``sampling: bernoulli``."""
        return "poisson" if self.sampling == "bernoulli" else "fixed_size"

    def sampling_rate(self) -> float | None:
        """``C`` with ``sampling: bernoulli`` (each online device's coin), else None."""
        return float(self.fraction) if self.sampling == "bernoulli" else None

    def check(self, scenario: Scenario) -> list[Problem]:
        """A Bernoulli cohort is the round: a straggler policy cannot over-select on top of it."""
        m = self.expected_inputs(scenario.devices.count, 0)["cloud"] or 1
        return [*super().check(scenario), *coin_problems(self, scenario, m)]

    def create(self, env: Env) -> FedAvg:
        """A FedAvg run."""
        return FedAvg(self, env)


class FedAvg(Protocol):
    """Synchronous rounds over the whole population, aggregated at the cloud."""

    def __init__(self, cfg: FedAvgConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.round = 0
        self.selected: list[int] = []
        self.arrived: set[int] = set()
        self.round_model: Any = None
        self.barrier: Barrier
        self.round_control: Any = None  # SCAFFOLD's server control c for this round (None otherwise)
        # with a sub-protocol at the cloud (subprotocol.cloud): the round's updates in arrival order, added
        # once it has said whose inputs survive (None: none, each update is added as it arrives)
        self.held: list[tuple[int, Any, float, float | None]] | None = None

    def clients_per_round(self) -> int:
        """``m = max(⌈C·N⌉, 1)``."""
        n = self.env.world.num_devices
        return min(n, max(math.ceil(self.cfg.fraction * n - 1e-9), 1))

    def start(self) -> None:
        """Begin round 0 at t = 0."""
        if getattr(self.env.tier("cloud"), "subprotocol", None) is not None:
            self.held = []
        self._begin_round()

    def _begin_round(self) -> None:
        env = self.env
        policy = env.straggler
        online = env.live.online_count()
        if not online:  # nobody online: try again when the first device comes back
            when = env.live.next_up()
            if math.isfinite(when):
                env.at(when, "round_retry", RoundRetry(self.round), Priority.CONTROL)
            return
        n = env.world.num_devices
        if getattr(self.cfg, "sampling", "fixed") == "bernoulli":  # each online device's own coin (the policy selects no extra: check)
            chosen = coin_cohort(env, ("fedavg.select", self.round), n if online == n else np.asarray(env.live.available()),
                                 self.cfg.fraction, getattr(self.cfg, "empty_cohort", "skip"))
            m = k = len(chosen)
            if not k:  # nobody's coin came up (empty_cohort: skip): an empty round, and the next one begins at once
                env.telemetry.record(RoundEmpty({"round": self.round, "sampling": "bernoulli"}))
                self._release_empty(env.global_model)
                self.round += 1
                if not env.stopping:
                    env.at(env.now, "round_retry", RoundRetry(self.round), Priority.CONTROL)
                return
        else:
            m = min(self.clients_per_round(), online)
            k = min(policy.select_count(m), online)
            rng = env.rng("fedavg.select", self.round)
            if online == n:  # O(selected) draw: the population is never listed
                chosen = rng.choice(n, size=k, replace=False)
            else:
                chosen = rng.choice(np.asarray(env.live.available()), size=k, replace=False)
        self.selected = sorted(int(i) for i in chosen)
        self.jobs, self.arrived = {}, set()
        self.round_model = env.global_model
        self.barrier = Barrier(self, policy, ("cloud", 0), self.round, self.selected, m, self._close)
        self.round_control = env.controls.control()
        for device in self.selected:
            self.send_model(device, "device_cloud", RoundMsg(device, self.round))

    def on_round_retry(self, event: Event) -> None:
        """A device came back online after a round found nobody: begin it now."""
        if not self.env.stopping:
            self._begin_round()

    def on_train_start(self, event: Event) -> None:
        """The device has the model: start its job (submitted to the executor now)."""
        spec = planned_spec(self, event.payload.device, self.barrier)
        if spec is None:  # partial work: not even one step fits before the deadline
            return
        self.start_job(event, self.round_model, spec, control=self.round_control)

    def on_train_done(self, event: Event) -> None:
        """The job's virtual time is over: collect it and upload."""
        self.collect_and_upload(event, "device_cloud")

    def on_upload_done(self, event: Event) -> None:
        """An update reached the cloud: fold it in; the barrier decides when the round closes."""
        env = self.env
        device = event.payload.device
        self.arrived.add(device)
        weight = self.barrier.weight(device, float(env.world.samples[device]) if self.cfg.weighting == "samples" else 1.0)
        if self.held is not None:  # it waits for the sub-protocol
            self.held.append((device, self.jobs.pop(device).params, weight, env.controls.coef(device)))
        else:
            env.tier("cloud").add(self.jobs.pop(device).params, weight, env.controls.coef(device))
        self.barrier.arrive(device)

    def on_device_lost(self, event: Event) -> None:
        """A selected device went offline: the round no longer waits for it."""
        self.barrier.drop(event.payload.device)

    def on_round_deadline(self, event: Event) -> None:
        """The straggler deadline of the round."""
        self.barrier.on_deadline()

    def _close(self, arrived: list[int]) -> None:
        env = self.env
        if arrived and self.held is not None:  # the sub-protocol runs first; its end commits the round
            env.tier("cloud").prepare(sorted(arrived), done="subprotocol_done", payload=self.round)
            return
        if arrived:
            env.set_global(env.tier("cloud").commit(sorted(arrived), base=self.round_model))
        else:
            env.telemetry.record(RoundEmpty({"round": self.round}))
            self._release_empty(self.round_model)
        self._next_round()

    def on_subprotocol_done(self, event: Event) -> None:
        """The cloud's sub-protocol is over: the survivors' updates are aggregated, in the order they
        arrived; a failed one leaves the global model as it was (an empty round)."""
        env, result = self.env, event.payload
        held, self.held = self.held or [], []
        if result.failed or not result.survivors:
            env.telemetry.record(RoundEmpty({"round": self.round, "subprotocol": result.reason or "no survivors"}))
            self._release_empty(self.round_model)
        else:
            keep, cloud = set(result.survivors), env.tier("cloud")
            for device, params, weight, coef in held:
                if device in keep:
                    cloud.add(params, weight, coef)
            env.set_global(cloud.commit(list(result.survivors), base=self.round_model))
        self._next_round()

    def _release_empty(self, base: Any) -> None:
        """A round without updates: the cloud's rule may still release one (``releases_empty``: differential
        privacy under Poisson sampling adds its noise alone, so that an empty round does not show)."""
        cloud = self.env.tier("cloud")
        if getattr(cloud, "releases_empty", False):
            self.env.set_global(cloud.commit([], base=base))

    def _next_round(self) -> None:
        env = self.env
        self.round += 1
        if not env.stopping:
            self._begin_round()
