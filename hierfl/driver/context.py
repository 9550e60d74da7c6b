"""The driver's implementation of the protocol interface (:class:`~hierfl.env.api.Env`): wiring.

:class:`Context` builds the run's services and exposes them as the protocol interface:

* the clock: the event queue and named random streams (here);
* the world as it is now (:class:`~hierfl.driver.live.Live`);
* the job pipeline (:class:`~hierfl.driver.jobs.Jobs`);
* the network (:class:`~hierfl.driver.transfers.Transfers`);
* aggregation (:class:`~hierfl.driver.aggregation.Aggregation`, ``env.tier``);
* telemetry (:class:`~hierfl.output.RunTelemetry`).

Every action is stamped with the current virtual time; durations come from the world.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from hierfl.core.dynamics import Dynamics
from hierfl.kernel.engine import Event, EventQueue, Priority
from hierfl.core.rng import stream
from hierfl.core.work import TrainSpec
from hierfl.driver.aggregation import Aggregation, ControlVariates
from hierfl.channels.driver import ChannelLinks, device_flops
from hierfl.driver.errors import ClusterLostError, DivergedError, RunError
from hierfl.driver.eval_cost import DeviceEvalCost
from hierfl.driver.jobs import Jobs
from hierfl.driver.live import Live
from hierfl.driver.tiers import TierAggregator
from hierfl.driver.transfers import Transfers
from hierfl.energy.driver import energy_ledger
from hierfl.faults.driver import Faults
from hierfl.output.telemetry import RunTelemetry
from hierfl.privacy.driver import (privacy_edge_rule, privacy_ledger, privacy_overhead, privacy_rule,
                                   privacy_upload)
from hierfl.privacy.driver_dp_sgd import dp_sgd_ledger
from hierfl.robust.driver import RobustLedger, robust_setup
from hierfl.scenario.schema import Scenario

__all__ = ["Context", "RunError", "DivergedError", "ClusterLostError"]


class Context:
    """What a protocol can do (the :class:`~hierfl.env.api.Env` interface), backed by the real run."""

    def __init__(self, scenario: Scenario, built: Any, executor: Any, telemetry: RunTelemetry) -> None:
        self.scenario = scenario
        self.seed = scenario.seed
        self.dyn: Dynamics = built.dynamics or Dynamics.static(built.world.num_devices)
        # link events change the world's arrays during the run: work on a copy (Built is reusable)
        self._world = copy.deepcopy(built.world) if self.dyn.links else built.world
        self._spec: TrainSpec = built.spec
        self.executor = executor
        self.telemetry = telemetry
        self.queue = EventQueue()
        telemetry.clock = lambda: self.queue.now
        self.counters = telemetry.counters
        self.stopping = False   # the run ends after the current event (request_stop sets it)
        self.stop_reason: str | None = None
        self.transfers = Transfers(self._world, self.dyn, self.queue, telemetry, scenario.network.contention)
        # edge-server / cloud outages (edge_fail, cloud_fail events); None when there are none
        self.faults = Faults(self.dyn, self.queue, self.transfers, telemetry) if self.dyn.faults else None
        self.transfers.track_servers = self.faults is not None  # only a server fault cuts transfers by server
        # Byzantine robustness: None keeps every call exactly as without it
        setup = robust_setup(scenario, self.dyn, privacy_rule(scenario), privacy_edge_rule(scenario, self._world))
        self.robust: RobustLedger | None = None if setup is None else RobustLedger(setup, self.dyn, telemetry,
                                                                                  scenario.protocol)
        # per-device evaluation: the run has evaluation sets; with evaluation.device_eval_cost: forward
        # the devices are busy while they evaluate (None: free)
        self.device_eval = bool(getattr(built, "eval_sets", None))
        eval_cost: DeviceEvalCost | None = None
        if self.device_eval and scenario.evaluation.device_eval_cost == "forward":
            eval_cost = DeviceEvalCost(self._world.speed_sps, built.eval_sets, self.counters)
        # device energy (`energy:`): None keeps every output as without it
        self.energy = self.transfers.energy = energy_ledger(scenario, built, self.counters)
        self.aggregation = Aggregation(scenario, executor, telemetry, self.robust, self, self._world)
        self.transfers.carried = self.aggregation.subprotocols.carried  # updates a sub-protocol carries itself
        # differential privacy (`privacy.dp`, or `privacy.dp_sgd`: per device): the accountant; None: no outputs change
        self.privacy = self.aggregation.privacy = privacy_ledger(scenario) or dp_sgd_ledger(scenario, self._world.samples)
        self.controls = ControlVariates(executor, self._world, self._spec, scenario.training.trainer,
                                        "edge" in scenario.protocol.server_optimizer_tiers,
                                        self.aggregation.round_rules)
        self.live = Live(self._world, self.dyn, self.queue, self.transfers, self._spec)
        models = getattr(built, "models", None)
        self.jobs = Jobs(self, self._world, self._spec, eval_cost, self.energy,
                         models.of_device if models is not None and models.heterogeneous else None)
        # the per-job calls bound once: a protocol reaches the service without a frame of its own
        self.send = self.transfers.send  # type: ignore[method-assign]
        self.cancel_transfer = self.transfers.cancel_transfer  # type: ignore[method-assign]
        self.start_job = self.jobs.start_job  # type: ignore[method-assign]
        self.finish_training = self.jobs.finish_training  # type: ignore[method-assign]
        self.cancel_device = self.jobs.cancel_device  # type: ignore[method-assign]
        self.planned_compute_s = self.jobs.planned_compute_s  # type: ignore[method-assign]
        # transfer channels (`channels:`): None keeps every transfer as without them
        self.channels: ChannelLinks | None = None
        placed = {} if scenario.channels.default else scenario.channels.resolved(type(scenario.protocol).channel_links)
        overhead = privacy_overhead(scenario)  # privacy.dp's clipping and noise on the devices' uploads, or {}
        if placed or overhead:
            # a message's values: every float32 value a model message carries (the model, and a control vector or
            # step sizes when the trainer's layout adds them; only the global layers when some stay on the device)
            self.channels = self.transfers.channels = self.aggregation.channels = ChannelLinks(
                placed, self._world.model_bytes // 4, self._world.model_bytes, device_flops(scenario, built), scenario.servers,
                executor, scenario.seed, bool(self._spec.train), self.aggregation.nonfinite, overhead)
            if self.privacy is not None:
                self._privacy_channels(scenario, self.channels)

    def _privacy_channels(self, scenario: Scenario, channels: ChannelLinks) -> None:
        """``privacy.dp`` on the devices' messages: its work is counted with theirs, and in local mode each upload is
        clipped and noised as it leaves its device (before a channel codes it)."""
        assert self.privacy is not None
        self.privacy.work = channels.overhead_stats
        upload = privacy_upload(scenario)
        if upload is not None:
            channels.transform("device_uplink", "dp_local", upload, self._uploaded)

    def _uploaded(self, device: int, stats: dict[str, float]) -> None:
        """A device's own noised upload left it (``privacy.dp``, local mode): the accountant counts it (a release of
        its own when updates are applied one by one: a budget may end the run)."""
        reason = self.privacy.uploaded(device, stats) if self.privacy is not None else None
        if reason is not None:
            self.request_stop(reason)

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part: why the run stopped, the virtual time, cloud rounds and the totals."""
        return {"stop_reason": self.stop_reason, "virtual_time_s": self.now,
                "rounds": int(self.counters["cloud_aggregations"]), "totals": dict(self.counters)}

    @property
    def eval_cost(self) -> DeviceEvalCost | None:
        """What per-device evaluation costs the devices (None: free)."""
        return self.jobs.eval_cost

    # -- clock and scheduling ------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time in seconds."""
        return self.queue.now

    def wall_s(self) -> float:
        """Real seconds since the run started (reported, never used for decisions)."""
        return self.telemetry.wall_s()

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        """The named random stream ``(seed, name, ids)``."""
        return stream(self.seed, name, *ids)

    def schedule(self, delay: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` ``delay`` virtual seconds from now."""
        return self.queue.push_after(delay, kind, payload, priority)

    def at(self, time: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        """Schedule ``kind`` at absolute virtual ``time``."""
        return self.queue.push(time, kind, payload, priority)

    def cancel(self, event: Event) -> None:
        """Withdraw a pending event."""
        self.queue.cancel(event)

    def request_stop(self, reason: str) -> None:
        """End the run after the current event."""
        if not self.stopping:
            self.stopping, self.stop_reason = True, reason

    # -- the world ------------------------------------------------------------------------------------
    @property
    def world(self) -> Any:
        """The world (a private copy when link events change it)."""
        return self._world

    @property
    def spec(self) -> TrainSpec:
        """The scenario's local training job."""
        return self._spec

    @property
    def straggler(self) -> Any:
        """The straggler policy of synchronous rounds."""
        return self.scenario.straggler

    @property
    def cloud_straggler(self) -> Any:
        """The straggler policy of a cloud round over edge servers."""
        return self.scenario.straggler.cloud

    @property
    def time_budget_s(self) -> float | None:
        """``stop.virtual_time_s``."""
        return self.scenario.stop.virtual_time_s

    # -- aggregation --------------------------------------------------------------------------------
    @property
    def global_model(self) -> Any:
        """Handle of the cloud's model."""
        return self.aggregation.global_model

    def set_global(self, handle: Any) -> None:
        """The cloud's model changed."""
        self.aggregation.set_global(handle)

    def tier(self, tier: str, entity: int = 0) -> TierAggregator:
        """The aggregation point ``(tier, entity)`` (:meth:`Aggregation.tier`)."""
        return self.aggregation.tier(tier, entity)
