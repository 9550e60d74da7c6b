"""Co-op: asynchronous merging with an age filter and an admission window.

Y. Wang, "CO-OP: Cooperative Machine Learning from Mobile Devices", M.Sc. thesis, University of
Alberta, 2017 (DOI 10.7939/R32805C45). Only the abstract was available [V]; the age filter below
follows a third-party re-implementation [V3], and the window bounds are design defaults [D].

docs/explanation/algorithms.md §5.12. Co-op is FedAsync (Xie et al., 2019) with base weight 1 and the staleness function
``(τ + 1)^(−1/2)``, plus an admission window ``[b_l, b_u]`` on the staleness ``τ = A − a_k`` that
each client checks before it uploads. The server keeps the model ``w`` and an integer age ``A``
(one per merge, starting at ``b_l``); client k keeps its model ``w_k`` and the age ``a_k`` of the
server model it last received (0 at the start)::

    client k, while online:
        train w_k (one job of the training section) → w_k
        ask the server its age A (a 64-byte round trip); d = A − a_k
        d > b_u  (too old):  discard w_k, download (w, A): w_k ← w, a_k ← A, train again
        d < b_l  (too soon): continue — train again from w_k without uploading
                             wait — ask again every poll_s seconds until d >= b_l
        else:                upload (w_k, a_k)
    server, per upload in arrival order:
        α = clip(σ(A − a_k), 0, 1);  w ← (1 − α)·w + α·w_k;  A ← A + 1;  send (w, A) back
    client on the reply: w_k ← w, a_k ← A, train again

A client that goes offline loses what it had in flight and, when it comes back, trains again from
the ``w_k`` it kept (intermittent availability: the ``devices.availability`` models). With
``stream``, data arrive over virtual time: a job started at ``t`` trains on the first
``ceil(n_k · min(1, f0 + (1 − f0)·t/T))`` samples of the device (and takes their compute time) [D].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from hierfl.config.base import ConfigModel, ReadWith
from hierfl.core.work import TrainSpec
from hierfl.env import Env
from hierfl.kernel.engine import Event, Priority
from hierfl.policies.staleness import STALENESS, PolynomialStaleness
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["Coop", "CoopConfig"]


@dataclass(frozen=True)
class AgeMsg(DeviceMsg):
    """A message of client ``device``'s ``seq``-th exchange with the server; ``age``: the server age it carries."""

    seq: int
    age: int = -1


class StreamConfig(ConfigModel):
    """``stream: {initial_fraction: 0.1, full_at_s: 600}``: a device's samples are revealed over virtual time."""

    initial_fraction: float = Field(default=0.1, gt=0, le=1, description="share of a device's samples it holds "
                                    "at t = 0 (design default 0.1)")
    full_at_s: float = Field(default=600.0, gt=0, description="virtual time by which every sample is revealed; "
                             "the share grows linearly until then (design default 600 s)")

    def revealed(self, n: int, t: float) -> int:
        """Samples of a device with ``n`` revealed at ``t``: ``ceil(n · min(1, f0 + (1 − f0) · t / T))``, at least 1."""
        share = min(1.0, self.initial_fraction + (1.0 - self.initial_fraction) * t / self.full_at_s)
        return max(1, min(n, math.ceil(n * share - 1e-9)))


@PROTOCOLS.register
class CoopConfig(ProtocolConfig):
    """``protocol: {name: coop, b_l: 1, b_u: 10, staleness: {name: polynomial, a: 0.5}, too_soon: continue}``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    rule_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    aggregation_style: ClassVar[str] = "updates"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=False,
                         note="the server merges each admitted upload the moment it arrives"),)

    name: Literal["coop"] = "coop"
    b_l: NonNegativeInt = Field(default=1, description="lower end of the admission window: a client whose model "
                                "is fewer than b_l merges behind the server does not upload yet (design default 1)")
    b_u: NonNegativeInt = Field(default=10, description="upper end: a client more than b_u merges behind discards "
                                "its work and downloads the server model (design default 10)")
    staleness: STALENESS.union() = Field(  # type: ignore[valid-type]
        default=PolynomialStaleness(a=0.5), description="merge weight α = σ(τ), τ = A − a_k, clipped to [0, 1] "
                                                        "(the re-implementation's (τ + 1)^(−1/2))")
    too_soon: Literal["continue", "wait"] = Field(
        default="continue", description="a client below the window trains again (continue) or stays idle and asks "
                                        "again every poll_s seconds (wait) (design default continue)")
    poll_s: float = Field(default=5.0, gt=0, description="seconds between age queries under too_soon: wait "
                          "(design default 5; another value under continue is refused)")
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {"poll_s": ReadWith("too_soon", ("wait",))}
    query_bytes: PositiveInt = Field(default=64, description="bytes of an age query and of its answer (the "
                                     "smallest message; design default 64)")
    stream: StreamConfig | None = Field(default=None, description="streaming data: each job trains on the samples "
                                        "revealed by its start (null: all samples from the start)")

    @model_validator(mode="after")
    def _window(self) -> CoopConfig:
        if self.b_l > self.b_u:
            raise ValueError(f"b_l ({self.b_l}) must not exceed b_u ({self.b_u}); allowed: 0 <= b_l <= b_u")
        return self

    def create(self, env: Env) -> Coop:
        """A Co-op run."""
        return Coop(self, env)


class Coop(Protocol):
    """Every client loops on its own; the server merges uploads one at a time (module docstring)."""

    def __init__(self, cfg: CoopConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        n = env.world.num_devices
        self.age = cfg.b_l                                 # A: merges so far, starting at b_l (V3)
        self.model: dict[int, Any] = {}                    # w_k
        self.age_of = [0] * n                              # a_k: the server age w_k came from
        self.seq = [0] * n                                 # each client's exchanges, to tell stale messages
        self.carried: dict[tuple[int, int], Any] = {}      # models in flight to a client, by (client, seq)
        self.counts = {"coop_uploads": 0, "coop_too_old": 0, "coop_too_soon": 0, "coop_polls": 0}
        env.tier("cloud").track_staleness()

    def start(self) -> None:
        """Every client holds the initial model (age 0) and starts training (an offline one when it is back)."""
        for device in range(self.env.world.num_devices):
            self.model[device] = self.env.global_model
            self._train(device)

    def _msg(self, device: int, age: int = -1) -> AgeMsg:
        return AgeMsg(device, self.seq[device], age)

    def _train(self, device: int) -> None:
        env = self.env
        if env.stopping:
            return
        if not env.live.is_up(device):
            self._wait_for(device)
            return
        self.seq[device] += 1
        job, _ = env.start_job(device, self.model[device], self._msg(device), self.job_spec(device))
        self.jobs[device] = job

    def job_spec(self, device: int) -> TrainSpec | None:
        """The training section's job, on the samples revealed by now when data stream in (None: as is)."""
        stream = self.cfg.stream
        if stream is None:
            return None
        n = int(self.env.world.samples[device])
        shown = stream.revealed(n, self.env.now)
        return None if shown >= n else replace(self.env.spec, revealed=shown)

    def _wait_for(self, device: int) -> None:
        back = self.env.live.next_up([device])
        if math.isfinite(back):
            self.seq[device] += 1
            self.env.at(back, "back_online", self._msg(device), Priority.START)

    def on_back_online(self, event: Event) -> None:
        """An offline client is back: it trains again from the model it kept."""
        if event.payload.seq == self.seq[event.payload.device]:
            self._train(event.payload.device)

    def on_train_done(self, event: Event) -> None:
        """Local training is over: keep the result, ask the server's age."""
        device = event.payload.device
        job = self.jobs.pop(device)
        self.env.finish_training(job)
        self.model[device] = job.params
        self._query(device)

    def _query(self, device: int) -> None:
        self.env.send(("device", device), ("cloud", 0), "age_query", self._msg(device), "age_query",
                      size=self.cfg.query_bytes)

    def on_age_query(self, event: Event) -> None:
        """The server answers with its age now."""
        device = event.payload.device
        self.env.send(("cloud", 0), ("device", device), "age_reply", self._msg(device, self.age), "age_reply",
                      size=self.cfg.query_bytes)

    def on_age_reply(self, event: Event) -> None:
        """The client decides by its distance to the server: download, train on, wait, or upload."""
        p = event.payload
        device = p.device
        d = p.age - self.age_of[device]
        env = self.env
        if d > self.cfg.b_u:
            self.counts["coop_too_old"] += 1
            env.tier("cloud").drop(device, d)   # its work is discarded (counted as a dropped update)
            self._download(device)
        elif d < self.cfg.b_l:
            self.counts["coop_too_soon"] += 1
            env.telemetry.instant(("device", device), "too_soon", env.now, distance=d)
            if self.cfg.too_soon == "continue":
                self._train(device)
            else:
                self.counts["coop_polls"] += 1
                env.schedule(self.cfg.poll_s, "poll", self._msg(device), Priority.CONTROL)
        else:
            env.send(("device", device), ("cloud", 0), "upload_done", self._msg(device, self.age_of[device]),
                     "upload")

    def on_poll(self, event: Event) -> None:
        """A waiting client asks the server's age again."""
        device = event.payload.device
        if event.payload.seq != self.seq[device]:
            return
        if not self.env.live.is_up(device):
            self._wait_for(device)
            return
        self._query(device)

    def _download(self, device: int) -> None:
        self.carried[(device, self.seq[device])] = self.env.global_model
        self.env.send(("cloud", 0), ("device", device), "model_arrival", self._msg(device, self.age), "download",
                      Priority.START)

    def on_upload_done(self, event: Event) -> None:
        """The server merges the upload: α = clip(σ(A − a_k)), w ← w + α (w_k − w), A + 1; and replies."""
        env = self.env
        p = event.payload
        device = p.device
        tau = self.age - p.age
        alpha = min(max(float(self.cfg.staleness(tau)), 0.0), 1.0)
        w = env.global_model
        new = env.tier("cloud").step(w, [(alpha, self.model[device], w)], [device], [tau], self.age + 1, 1)
        self.counts["coop_uploads"] += 1
        if new is not None:  # None: a screen of the cloud rejected it (counted there)
            self.age += 1
            env.set_global(new)
        if not env.stopping:
            self._download(device)

    def on_model_arrival(self, event: Event) -> None:
        """The server model (w, A) reached the client: it trains on from there."""
        p = event.payload
        device = p.device
        model = self.carried.pop((device, p.seq))
        self.model[device] = model
        self.age_of[device] = p.age
        self._train(device)

    def on_device_lost(self, event: Event) -> None:
        """The client went offline: what it had in flight is lost; it resumes from w_k when back."""
        device = event.payload.device
        self.carried.pop((device, self.seq[device]), None)
        self.jobs.pop(device, None)
        self.env.cancel_device(device)
        self._wait_for(device)

    def observe(self) -> dict[str, Any]:
        """The server's age and the clients' decisions so far, in every evaluation line."""
        return {"coop_age": self.age, **self.counts}
