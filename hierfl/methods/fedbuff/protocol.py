"""FedBuff: buffered asynchronous aggregation.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with Buffered
Asynchronous Aggregation", AISTATS 2022 (arXiv 2106.06639). docs/explanation/algorithms.md §5.4: ``concurrency``
devices train at any time from the model version they downloaded; each arrival adds
``s(τ)·Δ_i`` (``Δ_i = y_i − y_start``, ``τ = v − v_start``, ``s(τ) = 1/√(1+τ)`` by default) to
a buffer; when it holds ``K`` updates the server steps ``x ← x + η_g·Σ s(τ_i)Δ_i / K``,
``v += 1``. Deltas are formed where the models live (the cloud role), never on the driver.
With ``normalize_staleness`` each weight is divided by ``s(avg_staleness)``, as FLSim's
``StalenessWeight.weight`` does (weight 1 at the expected staleness; FLSim's default
``avg_staleness`` is 1), so ``s(τ)/s(τ̄)`` may exceed 1 for updates fresher than ``τ̄``.

With a sub-protocol at the cloud (``subprotocol.cloud``: secure aggregation over the buffer, as FedBuff's
authors pair it with), a full buffer is sealed and its devices run the sub-protocol while the next buffer
fills; at its end the server steps with the survivors' updates (still divided by ``K``), or not at all when
it failed. Each device must then be in a buffer once (``unique_per_buffer: true``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from hierfl.config.base import ReadWith
from hierfl.config.errors import Problem
from hierfl.env import Env, RoundEmpty
from hierfl.kernel.engine import Event
from hierfl.methods.fedbuff.policies import FedBuffStaleness
from hierfl.policies.staleness import STALENESS
from hierfl.protocols.base import PROTOCOLS, AggregationPoint, ProtocolConfig
from hierfl.methods.fedasync.protocol import FlatAsync, concurrency_problems

if TYPE_CHECKING:
    from hierfl.scenario.schema import Scenario

__all__ = ["FedBuffConfig", "FedBuff"]

MIN_NORM = 1e-6  # normalize_staleness divides by s(avg_staleness): keep the weights finite and sane


@PROTOCOLS.register
class FedBuffConfig(ProtocolConfig):
    """``protocol: {name: fedbuff, K: 10, concurrency: 100, server_lr: 1.0}``."""

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    rule_tiers: ClassVar[tuple[str, ...]] = ("cloud",)
    aggregation_style: ClassVar[str] = "queue"
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→cloud", synchronous=False,
                         note="the cloud steps whenever its buffer holds K updates, from whichever devices"),)

    channel_links: ClassVar[tuple[str, ...]] = ("device_uplink", "device_downlink")  # base helpers
    subprotocol_tiers: ClassVar[tuple[str, ...]] = ("cloud",)  # over a sealed buffer
    name: Literal["fedbuff"] = "fedbuff"
    # its cloud steps on whichever K updates arrive: participation follows availability and speed (privacy.dp
    # accounts it per device without amplification, or nominally as Poisson sampling with q = K/N)
    cohort_sampling: ClassVar[str | None] = "buffered"
    K: PositiveInt = Field(default=10, description="buffer size: updates per server step [D]")
    concurrency: PositiveInt = Field(default=100, description="devices training at once; the default is capped at N, "
                                                              "any other value above devices.count is refused [D]")
    server_lr: float = Field(default=1.0, gt=0.0, description="η_g of the server SGD step [D]")
    staleness: STALENESS.union() = Field(default=FedBuffStaleness(), description="s(τ) weighting each buffered update (a staleness function by name)")  # type: ignore[valid-type]
    max_staleness: NonNegativeInt | None = Field(default=None, description="drop staler updates; null = ∞ [D]")
    unique_per_buffer: bool = Field(default=False, description="a device contributes at most once per buffer [D]")
    normalize_staleness: bool = Field(
        default=False, description="divide s(τ) by s(avg_staleness), as FLSim does (§5.4) [V: FLSim; default off]")
    avg_staleness: NonNegativeInt = Field(
        default=1, description="τ̄ of normalize_staleness: the staleness that gets weight 1 [V: FLSim default 1]; "
                               "read only with normalize_staleness: true (set without it, it is refused)")
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {
        "avg_staleness": ReadWith("normalize_staleness", (True,))}

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """``K`` updates per server step."""
        return {"cloud": int(self.K), "edge": None}

    def check(self, scenario: Scenario) -> list[Problem]:
        """The buffer must be fillable: K ≤ number of devices."""
        n = scenario.devices.count
        problems = []
        if self.K > n:
            problems.append(Problem("protocol.K", f"buffer larger than the number of devices; allowed: 1..{n}", self.K))
        problems.extend(concurrency_problems(self, n))
        sub = getattr(scenario, "subprotocol", None)
        if sub is not None and sub.at("cloud") is not None and not self.unique_per_buffer:
            problems.append(Problem("protocol.unique_per_buffer", "a sub-protocol at the cloud runs over the devices "
                                    "of a buffer, each once; allowed: true", self.unique_per_buffer))
        if self.normalize_staleness and self.staleness(self.avg_staleness) < MIN_NORM:
            problems.append(Problem(
                "protocol.avg_staleness",
                f"normalize_staleness divides every weight by s(avg_staleness) = "
                f"{self.staleness(self.avg_staleness):.3g}, too small; allowed: an avg_staleness with "
                f"s(avg_staleness) >= {MIN_NORM:g} (or a gentler staleness function)", self.avg_staleness))
        return problems

    def create(self, env: Env) -> FedBuff:
        """A FedBuff run."""
        return FedBuff(self, env)


class FedBuff(FlatAsync):
    """Arrivals fill a buffer of ``K`` staleness-weighted deltas; a full buffer is one server step."""

    def __init__(self, cfg: FedBuffConfig, env: Env) -> None:
        super().__init__(env, cfg.concurrency, cfg.staleness, cfg.max_staleness, env.spec)
        self.cfg = cfg
        self.buffer: list[tuple[int, float, Any, Any, int]] = []  # (device, s(τ), y, y_start, τ)
        # FLSim's normalisation is one constant divisor, fixed by the config
        self.norm = cfg.staleness(cfg.avg_staleness) if cfg.normalize_staleness else 1.0
        # with a sub-protocol at the cloud: full buffers whose sub-protocol is running, by flush number
        self.sealed: dict[int, list[tuple[int, float, Any, Any, int]]] = {}
        self.flushes = 0

    def start(self) -> None:
        """The buffer starts empty; then the first ``concurrency`` devices get the model."""
        self.env.tier("cloud").queue(0)
        super().start()

    def excluded(self) -> set[int]:
        """With ``unique_per_buffer``, devices already in the buffer wait for the next one."""
        return {d for d, *_ in self.buffer} if self.cfg.unique_per_buffer else set()

    def apply(self, device: int, update: Any, start_model: Any, tau: int) -> None:
        """Buffer ``s(τ)·Δ``; on the K-th, step the server model.

        The server step goes through the ``cloud`` server optimizer (docs/explanation/algorithms.md §5.4: "any FedOpt
        server optimizer fed with Δ̄/K"), fed ``Δ = server_lr · Σ s(τ_i)Δ_i / K``; with the default
        (``fedavg``, η = 1) that is plain server SGD ``x + server_lr · Σ s(τ_i)Δ_i / K``.
        """
        self.buffer.append((device, self.sigma(tau) / self.norm, update, start_model, tau))
        self.env.tier("cloud").queue(len(self.buffer))
        if len(self.buffer) < self.cfg.K:
            return
        cloud = self.env.tier("cloud")
        if getattr(cloud, "subprotocol", None) is not None:  # seal it: the sub-protocol's end steps the model
            self.flushes += 1
            self.sealed[self.flushes] = self.buffer
            devices = sorted(d for d, *_ in self.buffer)
            self.buffer = []
            cloud.queue(0)
            cloud.prepare(devices, done="subprotocol_done", payload=self.flushes)
            return
        self._step(self.buffer)
        self.buffer = []
        cloud.queue(0)

    def _step(self, entries: list[tuple[int, float, Any, Any, int]]) -> None:
        """One server step over ``entries`` (each ``s(τ)·Δ`` scaled by ``server_lr / K``)."""
        env = self.env
        scale = self.cfg.server_lr / self.cfg.K
        coefs = [scale * s for _, s, _, _, _ in entries]
        deltas = [(c, y, y0) for c, (_, _, y, y0, _) in zip(coefs, entries)]
        self.version += 1
        cloud = env.tier("cloud")
        env.set_global(cloud.step(env.global_model, deltas, [d for d, *_ in entries],
                                  [t for *_, t in entries], self.version, len(entries)))

    def on_subprotocol_done(self, event: Event) -> None:
        """A sealed buffer's sub-protocol is over: step with its survivors' updates, in buffer order (none when
        it failed: the model stays)."""
        result = event.payload
        entries = self.sealed.pop(result.payload)
        keep = set(result.survivors)
        kept = [e for e in entries if e[0] in keep]
        if result.failed or not kept:
            self.env.telemetry.record(RoundEmpty({"round": self.version,
                                                  "subprotocol": result.reason or "no survivors"}))
            return
        self._step(kept)

    def queue_lengths(self) -> dict[str, int]:
        """Updates waiting in the buffer."""
        return {"cloud": len(self.buffer)}
