"""The narrow interface a protocol is written against (ARCHITECTURE.md §4a, STYLE.md 13).

Five parts, nothing else:

* **clock and scheduling** — ``now``, named random streams, timers (``schedule``, ``at``,
  ``cancel``), whether the run is stopping;
* **the world as it is now** — the static :class:`~hierfl.core.world.World`, the training spec,
  the straggler policies, which devices are online and how long their work would take now;
* **training jobs** — start one on a device from a model and hear when it is done or lost;
* **transfers** — send a model between two entities and hear when it arrives;
* **aggregation** — fold updates at an edge or the cloud, combine handles, server optimizers;
* and one :class:`Telemetry` object that owns counters, metric lines and trace events.

The driver (:mod:`hierfl.driver`) implements it; a unit test can implement a fake in a few
lines. A protocol never holds the event queue, the recorder or the executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from hierfl.core.dynamics import OnlineIndex
    from hierfl.core.engine import Event
    from hierfl.core.work import TrainSpec
    from hierfl.core.world import World
    from hierfl.env.records import ClustersRecord, Record

__all__ = ["Env", "Telemetry", "Job", "Term", "Endpoint"]

Endpoint = tuple[str, int]
"""``("device", i)``, ``("edge", e)`` or ``("cloud", 0)``."""

Term = tuple[float, Any, Any]
"""``(coefficient, handle, handle or None)``: ``c · (a − b)``, or ``c · a`` when the third is None."""


@dataclass
class Job:
    """A submitted local training job."""

    device: int
    job: int
    params: Any          # handle of the trained parameter vector
    stats: Any           # handle of the small stats dict
    compute_s: float     # its virtual duration
    start: float         # virtual start time
    host: int = 0
    lost_at: float | None = None   # the device drops out (offline / dropout) at this time: no result
    lost_reason: str | None = None
    ran: bool = True               # False: timing only, nothing was submitted (params = the start model)


class Telemetry(Protocol):
    """Counters, metric lines and trace events of one run (the only way a protocol reports anything)."""

    def count(self, name: str, by: float = 1) -> None:
        """Add ``by`` to counter ``name`` (one of the run's totals in ``summary.json``)."""

    def record(self, rec: Record) -> None:
        """Append one typed metric line (stamped with the virtual time and wall seconds)."""

    def span(self, lane: Endpoint, name: str, start: float, duration: float, **args: Any) -> None:
        """A trace span on ``lane`` in virtual time."""

    def instant(self, lane: Endpoint, name: str, t: float, **args: Any) -> None:
        """A trace instant on ``lane``."""

    def flow(self, src: Endpoint, dst: Endpoint, start: float, end: float, name: str, flow_id: int) -> None:
        """A trace arrow from lane ``src`` at ``start`` to lane ``dst`` at ``end`` (e.g. a ring hop)."""

    def clusters(self, rec: ClustersRecord) -> None:
        """Append one membership record to ``clusters.jsonl``."""

    def devices(self, edge_of: np.ndarray) -> None:
        """Rewrite ``devices.csv`` with the protocol's own device → server map (FedCH)."""


class Env(Protocol):
    """What a protocol can see and do."""

    telemetry: Telemetry

    # -- clock and scheduling ------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current virtual time in seconds."""

    @property
    def stopping(self) -> bool:
        """Whether the run ends after the current event (start no new work)."""

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        """The named random stream ``(seed, name, ids)``."""

    def schedule(self, delay: float, kind: str, payload: Any = None, priority: int = ...) -> Event:
        """``on_<kind>(event)`` fires ``delay`` virtual seconds from now."""

    def at(self, time: float, kind: str, payload: Any = None, priority: int = ...) -> Event:
        """``on_<kind>(event)`` fires at absolute virtual ``time`` (never in the past)."""

    def cancel(self, event: Event) -> None:
        """Withdraw a pending event (a popped one: nothing happens)."""

    # -- the world as it is now ----------------------------------------------------------------------
    @property
    def world(self) -> World:
        """Devices, edge servers and links as built (link events change it during the run)."""

    @property
    def spec(self) -> TrainSpec:
        """The scenario's local training job."""

    @property
    def straggler(self) -> Any:
        """The straggler policy of synchronous rounds (``straggler:``)."""

    @property
    def cloud_straggler(self) -> Any:
        """The straggler policy of a cloud round over edge servers (``straggler.cloud``)."""

    @property
    def time_budget_s(self) -> float | None:
        """``stop.virtual_time_s`` (None: the run is bounded by rounds)."""

    @property
    def churn(self) -> bool:
        """Whether any device can be offline at some time (availability other than ``always``)."""

    def available(self, devices: Any = None) -> list[int]:
        """The devices (all, or those given) online now, sorted."""

    def online_count(self) -> int:
        """How many devices are online now (O(1))."""

    def online_index(self, devices: Any = ()) -> OnlineIndex:
        """A :class:`~hierfl.core.dynamics.OnlineIndex` over ``devices`` at now: keep it (``advance``
        it to ``now``) instead of asking about every device of a pool on every event."""

    def next_up(self, devices: Any = None) -> float:
        """The earliest time ≥ now at which one of ``devices`` (all by default) is online."""

    def is_up(self, device: int) -> bool:
        """Whether ``device`` is online now."""

    def server_up(self, server: Endpoint) -> bool:
        """Whether the edge server or cloud ``server`` is up now (``edge_fail`` / ``cloud_fail`` events);
        a transfer to or from a server that is down is refused."""

    def compute_factor(self, device: int) -> float:
        """``device``'s slowdown factor now (1 outside slowdown windows)."""

    def current_compute_s(self, spec: TrainSpec | None = None) -> np.ndarray:
        """(N,) seconds one job of ``spec`` would take on each device if started now."""

    def current_upload_s(self) -> np.ndarray:
        """(N,) seconds of one model upload device → its server now (no contention)."""

    def planned_compute_s(self, device: int, spec: TrainSpec | None = None) -> float:
        """How long ``device``'s next job would take if started now (what :meth:`start_job` will use)."""

    # -- training jobs -------------------------------------------------------------------------------
    def start_job(self, device: int, model: Any, payload: Any, spec: TrainSpec | None = None,
                  control: Any = None, done: str = "train_done", end: float | None = None) -> tuple[Job, Event]:
        """Submit ``device``'s next job now; ``on_<done>`` fires (with ``payload``) when its virtual
        compute time is over — at ``end`` if given, a protocol's own sum of durations that equals
        now + the job's time up to rounding — or ``on_device_lost`` if the device drops out first.
        Returns the job and that pending event."""

    def finish_training(self, job: Job) -> dict[str, float]:
        """Collect a job whose virtual end has come (blocks only if it still runs for real)."""

    def cancel_device(self, device: int) -> None:
        """Withdraw everything ``device`` has in flight (transfers and pending job events)."""

    # -- transfers ----------------------------------------------------------------------------------
    def send(self, src: Endpoint, dst: Endpoint, event: str, payload: Any, name: str, priority: int = ...,
             size: int | None = None, **args: Any) -> int:
        """Start a model transfer now; ``on_<event>`` fires on arrival. Returns its id."""

    def cancel_transfer(self, fid: int) -> None:
        """Withdraw a transfer still in flight (its event never fires)."""

    # -- aggregation --------------------------------------------------------------------------------
    @property
    def global_model(self) -> Any:
        """Handle of the cloud's model now."""

    def set_global(self, handle: Any) -> None:
        """The cloud's model changed."""

    def add_to_edge(self, edge: int, update: Any, weight: float, control_coef: float | None = None) -> None:
        """Fold an update into ``edge``'s running aggregation now."""

    def commit_edge(self, edge: int, participants: list[int], base: Any = None, pack_control: bool = False) -> Any:
        """Finish ``edge``'s aggregation (counted and recorded); returns the edge model handle."""

    def edge_aggregated(self, lane: Endpoint, edge: int, participants: list[int], trace: dict[str, Any],
                        extra: dict[str, Any] | None = None) -> None:
        """Account an edge-tier aggregation the protocol computed itself (e.g. with :meth:`average`):
        counters, the ``aggregate`` trace instant on ``lane`` (``trace``: its args) and the
        ``edge_aggregate`` line (``extra``: its fields after ``participants``)."""

    def discard_edge(self, edge: int) -> None:
        """Forget what ``edge``'s running aggregation holds (its round was aborted)."""

    def add_to_cloud(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """Fold an update into the cloud's running aggregation now."""

    def commit_cloud(self, participants: list[int], tier: str = "device", base: Any = None) -> Any:
        """Finish the cloud aggregation (counted, recorded, may end the run); returns the new model."""

    def combine(self, tier: str, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at ``tier``."""

    def screen_update(self, tier: str, base: Any, candidate: Any, update: Any, source: int) -> bool:
        """Whether an asynchronous step ``base → candidate`` made from ``source``'s ``update`` is applied (Zeno++)."""

    def robust_combine(self, tier: str, entity: int, base: Any, deltas: list[Term]) -> Any:
        """``base`` stepped by the ``tier`` rule's aggregate of the deltas (None: the rule is the mean)."""

    def robust_average(self, tier: str, entity: int, models: list[Any], weights: list[float], base: Any = None) -> Any:
        """The ``tier`` rule's aggregate of ``models`` (FedCH's cluster leaders); None under the mean."""

    def average(self, models: list[Any], weights: list[float]) -> Any:
        """Handle of ``Σ w_k m_k / Σ w_k`` over model handles, computed by a role."""

    def server_optimizer(self, tier: str) -> Any:
        """The optimizer configured for ``tier``, or None for plain averaging."""

    def server_step(self, tier: str, entity: int, base: Any, delta_terms: list[Term]) -> Any:
        """The ``tier`` optimizer steps ``base`` with ``Δ = Σ c·(a − b)``."""

    @property
    def control_variates(self) -> bool:
        """Whether jobs carry SCAFFOLD control variates."""

    def control(self) -> Any:
        """Handle of the cloud's SCAFFOLD control now (None without SCAFFOLD)."""

    def control_coef(self, device: int) -> float | None:
        """κ_i of ``device``'s control delta, or None without SCAFFOLD."""

    def similarity(self, models: list[Any], base: Any = None) -> np.ndarray:
        """Cosine similarity matrix of ``models − base`` (or of the models), computed by a role (WSCC)."""

    def evaluate_loss(self, model: Any) -> float:
        """Test loss of ``model`` (FedCH's ``K: auto`` needs the initial gap)."""

    def track_staleness(self, tier: str) -> None:
        """The protocol applies stale updates at ``tier``: report their staleness in the summary."""

    def record_async_aggregation(self, tier: str, entity: int, participants: list[int], weights: list[float],
                                 staleness: list[int], version: int, queue_len: int, source: str = "device") -> None:
        """Account one asynchronous aggregation at a leader or the cloud (counted, recorded)."""

    def drop_update(self, tier: str, entity: int, source: int, staleness: int) -> None:
        """An update staler than allowed is discarded (counted, recorded)."""

    def queue_length(self, tier: str, entity: int, length: int) -> None:
        """The update queue of ``tier``/``entity`` holds ``length`` updates from now on."""
