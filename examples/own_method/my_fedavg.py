"""My FedAvg: synchronous rounds of a fixed number of devices, averaged at the cloud, plus a quorum policy.

A complete protocol plug-in written only against :mod:`hierfl.plugin` (the tutorial
``docs/tutorials/own-method.md`` walks through it). Load it with
``hierfl run scenario.yaml --plugin my_fedavg.py`` or a scenario's ``plugins: [my_fedavg.py]``.

The protocol (``protocol: {name: my_fedavg, clients: 5}``) is FedAvg (McMahan et al., AISTATS
2017) with ``clients`` devices per round instead of a fraction of the population: each round the
cloud draws ``clients`` online devices from its own seeded stream, sends them the model, and
when the round's barrier closes sets ``w ← Σ n_k w_k / Σ n_k`` over the updates that arrived.

The straggler policy (``straggler: {name: quorum, share: 0.6}``) closes a round as soon as a
share of its devices has arrived; the others' work is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from hierfl.plugin import (
    PROTOCOLS,
    STRAGGLERS,
    AggregationPoint,
    Barrier,
    DeviceMsg,
    Env,
    Event,
    Payload,
    Priority,
    Protocol,
    ProtocolConfig,
    RoundEmpty,
    StragglerPolicy,
    planned_spec,
)

HIERFL_API = "1"  # the plug-in API major version this file is written for


@dataclass(frozen=True)
class RoundMsg(DeviceMsg):
    """A device's download or upload in round ``round`` (``device`` comes from :class:`DeviceMsg`)."""

    round: int


@dataclass(frozen=True)
class RoundRetry(Payload):
    """Begin round ``round`` again: nobody was online when it was due."""

    round: int


@PROTOCOLS.register
class MyFedAvgConfig(ProtocolConfig):
    """``protocol: {name: my_fedavg, clients: 5}``: FedAvg with a fixed number of devices per round."""

    # where it aggregates: one synchronous round device→cloud, whose barrier `straggler:` configures
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=True),)
    rule_tiers: ClassVar[tuple[str, ...]] = ("cloud",)  # `aggregation.cloud` may replace the mean

    name: Literal["my_fedavg"] = "my_fedavg"
    clients: int = Field(default=5, ge=1, description="devices per round (all online ones if fewer)")

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """``min(clients, N)`` updates at the cloud per round."""
        return {"cloud": min(self.clients, devices), "edge": None}

    def create(self, env: Env) -> MyFedAvg:
        """The protocol object of one run."""
        return MyFedAvg(self, env)


class MyFedAvg(Protocol):
    """Rounds of ``clients`` devices; the barrier (the straggler policy) decides when a round closes."""

    def __init__(self, cfg: MyFedAvgConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        self.round = 0
        self.round_model: Any = None  # the model the round's devices start from
        self.barrier: Barrier

    def start(self) -> None:
        """Begin round 0 at t = 0."""
        self._begin_round()

    def _begin_round(self) -> None:
        env = self.env
        online = env.live.available()
        if not online:  # nobody online: try again when the first device comes back
            when = env.live.next_up()
            if math.isfinite(when):
                env.at(when, "round_retry", RoundRetry(self.round), Priority.CONTROL)
            return
        wanted = min(self.cfg.clients, len(online))
        k = min(env.straggler.select_count(wanted), len(online))
        rng = env.rng("my_fedavg.select", self.round)  # its own seeded stream: same draw on every executor
        selected = sorted(int(d) for d in rng.choice(np.asarray(online), size=k, replace=False))
        self.round_model = env.global_model
        self.barrier = Barrier(self, env.straggler, ("cloud", 0), self.round, selected, wanted, self._close)
        for device in selected:
            self.send_model(device, "device_cloud", RoundMsg(device, self.round))  # train_start on arrival

    def on_round_retry(self, event: Event) -> None:
        """A device came back online after a round found nobody: begin it now."""
        if not self.env.stopping:
            self._begin_round()

    def on_train_start(self, event: Event) -> None:
        """The device has the model: start its job (the policy may shorten or skip it)."""
        spec = planned_spec(self, event.payload.device, self.barrier)
        if spec is not None:
            self.start_job(event, self.round_model, spec)

    def on_train_done(self, event: Event) -> None:
        """The job's virtual compute time is over: collect its result and upload it."""
        self.collect_and_upload(event, "device_cloud")

    def on_upload_done(self, event: Event) -> None:
        """An update reached the cloud: add it to the round's average, weighted by sample count."""
        device = event.payload.device
        weight = self.barrier.weight(device, float(self.env.world.samples[device]))
        self.env.tier("cloud").add(self.jobs.pop(device).params, weight)
        self.barrier.arrive(device)

    def on_device_lost(self, event: Event) -> None:
        """A selected device went offline: the round no longer waits for it."""
        self.barrier.drop(event.payload.device)

    def on_round_deadline(self, event: Event) -> None:
        """The straggler policy's deadline (if it has one)."""
        self.barrier.on_deadline()

    def _close(self, arrived: list[int]) -> None:
        env = self.env
        if arrived:
            env.set_global(env.tier("cloud").commit(sorted(arrived), base=self.round_model))
        else:
            env.telemetry.record(RoundEmpty({"round": self.round}))
        self.round += 1
        if not env.stopping:
            self._begin_round()


@STRAGGLERS.register
class Quorum(StragglerPolicy):
    """``straggler: {name: quorum, share: 0.6}``: a round closes once ``⌈share · K⌉`` of its K devices arrived."""

    name: Literal["quorum"] = "quorum"
    share: float = Field(default=0.5, gt=0.0, le=1.0, description="share of a round's devices it waits for")

    def needed(self, selected: int, wanted: int) -> int:
        """``⌈share · selected⌉``, at least one."""
        return max(1, math.ceil(self.share * selected - 1e-9))
