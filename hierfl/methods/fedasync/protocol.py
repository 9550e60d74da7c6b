"""FedAsync: asynchronous federated optimisation with staleness-weighted mixing.

Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", arXiv 1903.03934 (OPT 2020).
docs/explanation/algorithms.md §5.3: a device trains on ``f(x) + (ρ/2)‖x − x_t‖²`` from the model ``x_t`` it
downloaded at version ``t``; the server applies each update the moment it arrives, in
virtual-time order: ``α_t = α·s(v − t)``, ``x ← (1 − α_t)·x + α_t·x_new``, ``v += 1``.
Updates staler than ``max_staleness`` are dropped. ``concurrency`` devices train at any time;
when one reports, an idle device (the same one when all devices train) gets the current model.
Each job runs ``H`` local SGD steps drawn uniformly from ``[H_min, H_max]`` (§5.3, Alg. 1:
"H drawn in [H_min, H_max]") when ``local_steps`` is set; by default (``null``) every job does
the ``training:`` section's work, as the other protocols do.

:class:`FlatAsync` holds what FedAsync and FedBuff share: continuous dispatch under a
concurrency limit, start versions, staleness and dropping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.kernel.engine import Event, Priority
from hierfl.kernel.rankedset import RankedSet
from hierfl.core.work import TrainSpec
from hierfl.env import Env, Timer
from hierfl.policies.staleness import STALENESS, PolynomialStaleness, StalenessConfig
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["concurrency_problems", "FedAsyncConfig", "LocalStepsConfig", "FedAsync", "FlatAsync", "VersionMsg"]


@dataclass(frozen=True)
class VersionMsg(DeviceMsg):
    """A device's download of (and upload against) cloud model version ``version``."""

    version: int


class LocalStepsConfig(ConfigModel):
    """``local_steps: {min: H_min, max: H_max}``: each job's step count H, uniform on the integers in between."""

    min: PositiveInt = Field(description="H_min: fewest local SGD steps of a job")
    max: PositiveInt = Field(description="H_max: most local SGD steps of a job")

    @model_validator(mode="after")
    def _ordered(self) -> LocalStepsConfig:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max}); allowed: 1 <= min <= max")
        return self


@PROTOCOLS.register
class FedAsyncConfig(ProtocolConfig):
    """``protocol: {name: fedasync, alpha: 0.6, staleness: {name: polynomial, a: 0.5}, rho: 0.005}``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    rule_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    aggregation_style: ClassVar[str] = "updates"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=False,
                         note="the cloud applies each update the moment it arrives"),)

    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink")  # base helpers
    # each update is applied alone as it arrives (privacy.dp: local mode, a device's uploads composed)
    cohort_sampling: ClassVar[str | None] = "each_upload"
    name: Literal["fedasync"] = "fedasync"
    alpha: float = Field(default=0.6, gt=0.0, le=1.0, description="base mixing weight α [V3/D]")
    staleness: STALENESS.union() = Field(default=PolynomialStaleness(a=0.5), description="s(τ) scaling the mixing weight α (a staleness function by name)")  # type: ignore[valid-type]
    rho: float = Field(default=0.005, ge=0.0, description="proximal coefficient ρ of local training [V3/D]")
    concurrency: PositiveInt | None = Field(default=None, description="devices training at once; null = all; more "
                                            "than devices.count is refused [D]")
    max_staleness: NonNegativeInt | None = Field(default=None, description="drop staler updates; null = ∞ [D]")
    local_steps: LocalStepsConfig | None = Field(
        default=None, description="H ~ uniform{min..max} SGD steps per job (§5.3); null = the training section [D]")

    def check(self, scenario: Any) -> list[Problem]:
        """A concurrency the devices can fill."""
        return concurrency_problems(self, scenario.devices.count)

    def create(self, env: Env) -> FedAsync:
        """A FedAsync run."""
        return FedAsync(self, env)


def concurrency_problems(cfg: ProtocolConfig, devices: int) -> list[Problem]:
    """A ``concurrency`` set above ``devices`` would be capped at it: refused (the default is capped, as documented)."""
    value = getattr(cfg, "concurrency", None)
    if cfg.non_default("concurrency") and value is not None and value > devices:
        return [Problem("protocol.concurrency", f"more devices training at once than there are devices "
                        f"(devices.count = {devices}), so it would be capped; allowed: 1..{devices}", value,
                        refused=True)]
    return []


class FlatAsync(Protocol):
    """Devices train continuously against the cloud; subclasses decide how an update is applied."""

    select_stream = "async.select"  # shared: FedAsync and FedBuff pick the same devices

    def __init__(self, env: Env, concurrency: int | None, staleness: StalenessConfig,
                 max_staleness: int | None, spec: TrainSpec) -> None:
        super().__init__(env)
        n = env.world.num_devices
        self.concurrency = n if concurrency is None else min(int(concurrency), n)
        self.sigma = staleness
        self.max_staleness = max_staleness
        self.spec = spec
        self.version = 0                                  # cloud model version: applied aggregations
        # idle devices, and those of them online now: "the k-th idle online device in id order" is
        # O(log N) (a seeded uniform pick over the sorted pool, without sorting it on every dispatch)
        self.idle = RankedSet(n, range(n))
        self.ready = RankedSet(n, range(n))
        self.watch = env.live.online_index(range(n))           # online state of the idle devices
        self.start_of: dict[int, tuple[Any, int]] = {}    # device → (model handle, version) it trains from
        self.dispatches = 0
        env.tier("cloud").track_staleness()

    def start(self) -> None:
        """``concurrency`` devices, drawn uniformly without replacement, get the initial model at t = 0."""
        n = self.env.world.num_devices
        pool = self.env.live.available()
        if len(pool) == n:
            first = self.env.rng(self.select_stream, 0).choice(n, size=self.concurrency, replace=False)
        else:  # some devices are offline at t = 0: start those online; the rest of the slots wait
            k = min(self.concurrency, len(pool))
            first = self.env.rng(self.select_stream, 0).choice(np.asarray(pool, dtype=np.int64), size=k, replace=False)
            if k < self.concurrency:
                when = self.env.live.next_up(sorted(set(range(n)) - set(pool)))
                if math.isfinite(when):
                    self.env.at(when, "dispatch_retry", Timer(), Priority.CONTROL)
        self.dispatches = 1
        for device in sorted(int(d) for d in first):
            self._send(device)

    def _idle(self, device: int) -> None:
        """``device`` is idle again (its job ended or was lost)."""
        self._sync()
        self.idle.add(device)
        self.watch.add(device)
        if self.watch.is_online(device):
            self.ready.add(device)

    def _sync(self) -> None:
        """Bring the ready set up to now: idle devices that came online or went offline meanwhile."""
        for device, online in self.watch.advance(self.env.now):
            if online:
                self.ready.add(device)
            else:
                self.ready.discard(device)

    def _send(self, device: int) -> None:
        self.idle.discard(device)
        self.ready.discard(device)
        self.watch.discard(device)
        self.start_of[device] = (self.env.global_model, self.version)
        self.send_model(device, "device_cloud", VersionMsg(device, self.version))

    def excluded(self) -> set[int]:
        """Idle devices that must not be dispatched now (FedBuff's ``unique_per_buffer``)."""
        return set()

    def _dispatch_one(self) -> None:
        self._sync()
        ready = self.ready
        if not len(ready):  # every idle device is offline: try again when one comes back
            when = self.watch.next_online()
            if math.isfinite(when):
                self.env.at(when, "dispatch_retry", Timer(), Priority.CONTROL)
            return
        # the candidates are the ready devices not excluded, in id order (all ready ones if that is empty)
        excluded = [d for d in self.excluded() if d in ready]
        count = len(ready) - len(excluded)
        rng = self.env.rng(self.select_stream, self.dispatches)
        self.dispatches += 1
        if count > 0:
            self._send(ready.kth_excluding(int(rng.integers(count)), excluded))
        else:
            self._send(ready.kth(int(rng.integers(len(ready)))))

    def job_spec(self, device: int) -> TrainSpec:
        """The work of ``device``'s next job (the same for every job unless a subclass draws it)."""
        return self.spec

    def on_train_start(self, event: Event) -> None:
        """The device has the model it was sent: start its job."""
        device = event.payload.device
        self.start_job(event, self.start_of[device][0], self.job_spec(device))

    def on_train_done(self, event: Event) -> None:
        """Collect the job and upload it to the cloud."""
        self.collect_and_upload(event, "device_cloud")

    def on_upload_done(self, event: Event) -> None:
        """An update reached the cloud: drop it if too stale, else apply; then keep ``concurrency`` busy."""
        env = self.env
        device = event.payload.device
        update = self.jobs.pop(device).params
        start_model, start_version = self.start_of.pop(device)
        self._idle(device)
        tau = self.version - start_version
        if self.max_staleness is not None and tau > self.max_staleness:
            env.tier("cloud").drop(device, tau)
        else:
            self.apply(device, update, start_model, tau)
        if not env.stopping:
            self._dispatch_one()

    def on_device_lost(self, event: Event) -> None:
        """The device dropped out: its update is lost; another idle device takes its slot."""
        device = event.payload.device
        self.start_of.pop(device, None)
        self._idle(device)
        if not self.env.stopping:
            self._dispatch_one()

    def on_dispatch_retry(self, event: Event) -> None:
        """A device came back online while a concurrency slot was empty."""
        while not self.env.stopping and len(self.start_of) < self.concurrency:
            before = len(self.start_of)
            self._dispatch_one()
            if len(self.start_of) == before:
                break

    def apply(self, device: int, update: Any, start_model: Any, tau: int) -> None:
        """Apply one arriving update with staleness ``tau``."""
        raise NotImplementedError

class FedAsync(FlatAsync):
    """Every arrival is mixed into the global model at once: ``x ← (1 − α·s(τ))·x + α·s(τ)·x_new``."""

    def __init__(self, cfg: FedAsyncConfig, env: Env) -> None:
        super().__init__(env, cfg.concurrency, cfg.staleness, cfg.max_staleness, replace(env.spec, prox=cfg.rho))
        self.cfg = cfg
        self._jobs_of: dict[int, int] = {}  # jobs started per device = the job id the context gives it

    def job_spec(self, device: int) -> TrainSpec:
        """With ``local_steps``: ``H`` steps drawn from stream ``("fedasync.steps", device, job)``.

        The steps replace the training section's epochs/steps; batch size, lr, momentum, weight
        decay and ρ stay. The compute time follows, since it is derived from the spec that runs
        (``H · min(batch_size, n_i) / speed_sps``).
        """
        bounds = self.cfg.local_steps
        if bounds is None:
            return self.spec
        job = self._jobs_of.get(device, 0)
        self._jobs_of[device] = job + 1
        steps = int(self.env.rng("fedasync.steps", device, job).integers(bounds.min, bounds.max + 1))
        return replace(self.spec, epochs=None, steps=steps)

    def apply(self, device: int, update: Any, start_model: Any, tau: int) -> None:
        """The FedAsync server step (one update at a time, in arrival order)."""
        env = self.env
        a = self.cfg.alpha * self.sigma(tau)
        # the mix (1 − α_t)·x + α_t·x_new as a step x + α_t·(x_new − x) (a server optimizer steps with it)
        new = env.tier("cloud").step(env.global_model, [(a, update, env.global_model)], [device], [tau],
                                     self.version + 1, 1)
        if new is None:
            return  # rejected by the cloud's screen (aggregation.cloud: zeno_pp): dropped and counted
        self.version += 1
        env.set_global(new)
