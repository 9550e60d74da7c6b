"""The narrow interface a protocol is written against (ARCHITECTURE.md §4a, STYLE.md 13).

Its parts, nothing else:

* **clock and scheduling** — ``now``, named random streams, timers (``schedule``, ``at``,
  ``cancel``), whether the run is stopping;
* **the world** — the static :class:`~hierfl.core.world.World`, the training spec, the straggler
  policies and the time budget; ``live``, the world as it is now (who is online, which servers are
  up, slowdowns);
* **training jobs** — start one on a device from a model and hear when it is done or lost;
* **transfers** — send a model between two entities and hear when it arrives;
* **aggregation** — one :class:`Aggregator` per aggregation point (``env.tier(tier, entity)``),
  which aggregates and does its own accounting, gives the models it receives or sends as a transfer
  channel delivers them (``coded``), and runs the server's own computation (server
  tasks, in virtual time); the cloud's model; the servers' control variates;
* and one :class:`Telemetry` object that owns counters, metric lines and trace events.

The driver (:mod:`hierfl.driver`) implements it; a unit test can implement a fake in a few
lines. A protocol never holds the event queue, the recorder or the executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from hierfl.core.jobs import Endpoint, Job, Term

if TYPE_CHECKING:
    import numpy as np

    from hierfl.core.dynamics import OnlineIndex
    from hierfl.kernel.engine import Event
    from hierfl.core.work import TrainSpec
    from hierfl.core.world import World
    from hierfl.env.records import ClustersRecord, Record

__all__ = ["Env", "Live", "Aggregator", "ControlVariates", "Telemetry", "Job", "Term", "Endpoint"]


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
        """Rewrite ``devices.csv`` with the protocol's own device → server map (clusters it forms itself)."""


class Live(Protocol):
    """The world as it is now (``env.live``)."""

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


class ControlVariates(Protocol):
    """The servers' control variates (``env.controls``): a vector ``c`` that travels down with the model and the
    devices' κ-weighted deltas ``Δc_i`` that travel up behind their updates."""

    @property
    def on(self) -> bool:
        """Whether jobs carry control variates."""

    @property
    def relays(self) -> bool:
        """Whether edge servers relay their devices' control deltas to the cloud, rather than
        keeping a control of their own (edge-scoped controls)."""

    def control(self, edge: int | None = None) -> Any:
        """Handle of the control a device of ``edge`` (None: of the cloud) trains with now; None without."""

    def coef(self, device: int) -> float | None:
        """κ_i of ``device``'s control delta, or None without control variates."""

    def reset(self, devices: list[int]) -> None:
        """Forget the per-device state of ``devices`` (every vector its job method keeps): they
        start again from zeros (a device that moved to another group, ``migration.device_state: reset``)."""

    def regroup(self, edge_of: Any) -> None:
        """Devices moved between edge servers (``edge_of``: each device's edge now): weights and round rules
        taken over an edge's members follow the new membership."""


class Aggregator(Protocol):
    """One aggregation point. It aggregates and accounts (counters, trace, metric lines, staleness,
    queue lengths); the layers it steps a model through (plain combination or the tier's server
    optimizer, robust rules, screens) were chosen once for the run from the scenario."""

    # -- synchronous rounds: add each update as it arrives, then commit (or discard) ------------------
    def add(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        """Fold an update into the running aggregation now."""

    def commit(self, participants: list[int], base: Any = None, source: str = "device",
               pack_control: bool = False) -> Any:
        """Finish the round (counted, recorded; at the cloud it may end the run); the new model.
        ``base``: the model the round started from; ``source``: devices or edge servers sent the
        inputs; ``pack_control``: an edge returns ``[model; Σ κ Δc]`` for its upload (control variates relayed)."""

    def discard(self) -> None:
        """Forget what the running aggregation holds (an aborted round)."""

    @property
    def releases_empty(self) -> bool:
        """Whether a round with no update must still be committed (``commit([])``): this point's rule releases
        something on it (differential privacy under Poisson sampling releases its noise alone, so that an empty
        round does not show). False: an empty round leaves the model as it was and is not committed."""

    # -- a sub-protocol before it aggregates (hierfl.subprotocol) --------------------------------------
    @property
    def subprotocol(self) -> Any:
        """The sub-protocol the scenario places at this point's tier (``subprotocol:``), or None: the
        point aggregates as soon as its round closes."""

    def prepare(self, participants: list[int], done: str, payload: Any = None, source: str = "device") -> None:
        """Run this point's sub-protocol with ``participants`` (devices, or edge servers when
        ``source="edge"``) now: its message rounds are transfers on the emulated links and its work is
        virtual time; a participant that goes offline is dropped. ``on_<done>`` then fires with a
        :class:`~hierfl.env.events.SubProtocolDone` (the survivors, whose inputs the protocol
        aggregates, or a failure: fewer than the threshold were left)."""

    # -- queues and asynchronous updates --------------------------------------------------------------
    def step(self, base: Any, deltas: list[Term], sources: list[int], staleness: list[int], version: int,
             queue_len: int, source: str = "device") -> Any:
        """``base`` stepped by ``Σ c·(a − b)``, accounted as one asynchronous aggregation (``version``:
        the point's version after it); None if a screen rejected it."""

    def drop(self, source: int, staleness: int) -> None:
        """An update staler than allowed is discarded (counted, recorded)."""

    def queue(self, length: int) -> None:
        """The point's update queue holds ``length`` updates from now on."""

    # -- models the protocol forms itself ---------------------------------------------------------------
    def average(self, models: list[Any], weights: list[float], base: Any = None) -> Any:
        """``Σ w·m / Σ w`` (or the tier's robust rule where the protocol declares one applies)."""

    def combine(self, terms: list[Term]) -> Any:
        """``Σ c·(a − b)`` over model handles, computed at this tier."""

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> np.ndarray:
        """Cosine similarity matrix of ``models − base`` (or of the models), computed by the role (for grouping);
        ``measure="sq_norm"``: the vector of their squared norms instead (consensus distance)."""

    def evaluate_loss(self, model: Any) -> float:
        """Test loss of ``model`` (choosing a number of groups needs the initial gap)."""

    def evaluate(self, model: Any) -> tuple[float, float]:
        """``(accuracy, loss)`` of ``model`` on the run's test set (an observer's look at one node's model)."""

    def coded(self, peer: Endpoint, model: Any, inbound: bool = True) -> Any:
        """``model`` as the receiver of a model message between this point and ``peer`` gets it: decoded by that
        link direction's transfer channel (``channels:``; fp16 rounding really applied), the same handle
        without one. ``inbound``: ``peer`` sends to this point (else this point sends to ``peer``).
        ``env.send`` charges the channel's bytes and encode/decode time; a protocol that declares a direction
        in ``ProtocolConfig.channel_links`` hands its receivers this handle (the base class's download →
        train → upload helpers do it for the device tier)."""

    def track_staleness(self) -> None:
        """Updates applied at this tier can be stale: report their staleness in the summary."""

    def aggregated(self, participants: list[int], trace: dict[str, Any], extra: dict[str, Any] | None = None,
                   lane: Endpoint | None = None) -> None:
        """Account a synchronous aggregation the protocol formed (``aggregate`` instant, aggregate line)."""

    def applied(self, sources: list[int], weights: list[float], staleness: list[int], version: int,
                queue_len: int, source: str = "device") -> None:
        """Account an asynchronous aggregation the protocol formed itself."""

    # -- the server's own computation -------------------------------------------------------------------
    def run(self, task: str, inputs: list[Any], done: str, payload: Any = None,
            params: dict[str, Any] | None = None) -> Event:
        """Start the server task ``task`` (registered in :mod:`hierfl.learn.server_tasks`) on the models
        ``inputs`` at this point's server, with the protocol's ``params``. The server spends the work the
        task counts at its FLOP/s (``servers:``), after the tasks it was given before (one at a time);
        ``on_<done>`` then fires with a :class:`~hierfl.env.events.ServerJobDone` (the outputs' handles,
        the task's stats, start and end, and ``payload``). Returns that pending event."""


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
    def live(self) -> Live:
        """The world as it is now: who is online, which servers are up, slowdowns, what a job or an
        upload would take if it started now."""

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

    def tier(self, tier: str, entity: int = 0) -> Aggregator:
        """The aggregation point ``(tier, entity)``: ``"cloud"`` (entity 0), ``"edge"`` (an edge server,
        a cluster leader) or ``"device"`` (a device mixing models it received). Every aggregation a
        protocol makes goes through it; it does its own accounting."""

    @property
    def controls(self) -> ControlVariates:
        """The servers' control variates: ``on``, the cloud's ``control()`` and each device's ``coef(i)``."""
