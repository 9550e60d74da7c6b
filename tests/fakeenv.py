"""A small, deterministic fake of the protocol interface (:mod:`hierfl.env.api`) for trace tests.

A protocol runs against it exactly as against the driver, but everything is checkable by hand:

* the clock is a real :class:`~hierfl.kernel.engine.EventQueue` (so ``schedule``/``at``/``cancel``
  and the ``(time, priority, seq)`` order are the real ones);
* a job on device ``d`` lasts ``unit_s[d]`` seconds per unit of work (one unit per epoch, or per
  local step when the spec counts steps; by default ``unit_s[d] = 1 + 0.5·d``, so times stay exact
  binary fractions) and its trained model is the number ``model + d + 1``;
* a transfer takes a fixed time per pair of endpoint kinds (device ↔ server 0.25 s, edge ↔ cloud
  0.5 s, device ↔ device 0.125 s; a pair can be overridden) and fires ``on_<event>`` on arrival;
* models are Python floats and every aggregation point (:class:`FakeAggregator`) does the float
  arithmetic: ``add``/``commit`` a weighted mean, ``step`` ``base + Σ c·(a − b)`` and so on;
* everyone is online (unless ``away`` windows say otherwise), servers are up, SCAFFOLD is off;
  devices compute at their ``unit_s`` unless ``slow`` windows ``(start, end, factor)`` say otherwise
  (a job takes its time at the factor in force when it starts).

:class:`FakeEnv` keeps an **event log**: one ``(t, kind, payload)`` line per dispatched event and one
``(t, "tier", tier, entity, method, summary)`` line per aggregation call, in the order they happen.
:meth:`FakeEnv.run` is the driver loop.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from hierfl.core.dynamics import Availability, OnlineIndex
from hierfl.kernel.engine import Event, EventQueue, Priority
from hierfl.core.jobs import Job
from hierfl.core.rng import stream
from hierfl.core.work import TrainSpec
from hierfl.env.events import ServerJobDone
from hierfl.policies.straggler import WaitAll

__all__ = ["FakeWorld", "FakeEnv", "FakeAggregator", "FakeTelemetry", "FakeLive", "short", "run"]

LINK_S = {("device", "edge"): 0.25, ("device", "cloud"): 0.25, ("edge", "cloud"): 0.5, ("device", "device"): 0.125}


def work_units(spec: TrainSpec) -> int:
    """Units of work of a job: its local steps when it counts steps, else its epochs."""
    return int(spec.steps if spec.steps is not None else spec.epochs)


class FakeWorld:
    """The fields of :class:`~hierfl.core.world.World` the protocols read, with durations from tables."""

    def __init__(self, samples: list[int], edge_of: list[int] | None = None, num_edges: int | None = None,
                 unit_s: list[float] | None = None, links: dict[tuple[Any, Any], float] | None = None) -> None:
        n = len(samples)
        self.samples = np.asarray(samples, dtype=np.int64)
        self.edge_of = np.asarray(edge_of if edge_of is not None else [-1] * n, dtype=np.int64)
        self._num_edges = int(num_edges if num_edges is not None else max(int(self.edge_of.max()) + 1, 0))
        self.unit_s = np.asarray(unit_s if unit_s is not None else [1.0 + 0.5 * d for d in range(n)], dtype=np.float64)
        self.links = dict(links or {})  # (endpoint, endpoint) → seconds, either direction
        e = self._num_edges
        self.latency_ms = np.zeros(n)
        self.edge_latency_ms = np.zeros((n, e))
        self.model_bytes = 0
        # what a grouping reads (re-grouping): throughput such that samples / speed = unit_s; equal links
        self.speed_sps = self.samples / self.unit_s
        self.uplink_mbps = np.ones(n)

    @property
    def num_devices(self) -> int:
        return int(self.samples.shape[0])

    @property
    def num_edges(self) -> int:
        return self._num_edges

    def edge_members(self, edge: int) -> np.ndarray:
        return np.flatnonzero(self.edge_of == edge).astype(np.int64)

    def edge_samples(self, edge: int) -> int:
        return int(self.samples[self.edge_of == edge].sum())

    def link_s(self, src: tuple[str, int], dst: tuple[str, int]) -> float:
        """Seconds of one transfer ``src → dst``: an override for the pair, else by the kinds."""
        for key in ((src, dst), (dst, src)):
            if key in self.links:
                return float(self.links[key])
        kinds = (src[0], dst[0])
        return LINK_S.get(kinds, LINK_S.get(kinds[::-1], 0.0))

    def _server(self, device: int) -> tuple[str, int]:
        edge = int(self.edge_of[device])
        return ("edge", edge) if edge >= 0 else ("cloud", 0)

    def compute_s(self, device: int, spec: TrainSpec) -> float:
        return float(self.unit_s[device]) * work_units(spec)

    def download_s(self, device: int) -> float:
        return self.link_s(self._server(device), ("device", device))

    def upload_s(self, device: int) -> float:
        return self.link_s(("device", device), self._server(device))

    def d2d_s(self, src: int, dst: int) -> float:
        return self.link_s(("device", src), ("device", dst))

    def edge_upload_s(self, edge: int) -> float:
        return self.link_s(("edge", edge), ("cloud", 0))

    def edge_download_s(self, edge: int) -> float:
        return self.link_s(("cloud", 0), ("edge", edge))


class FakeTelemetry:
    """Records every call; ``counts`` sums the counters and ``records`` keeps the metric lines."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.counts: dict[str, float] = {}
        self.records: list[Any] = []

    def count(self, name: str, by: float = 1) -> None:
        self.calls.append(("count", (name, by), {}))
        self.counts[name] = self.counts.get(name, 0) + by

    def record(self, rec: Any) -> None:
        self.calls.append(("record", (rec,), {}))
        self.records.append(rec)

    def __getattr__(self, name: str) -> Any:  # span, instant, flow, clusters, devices: recorded as they come
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))
        return call


class FakeLive:
    """Who is online (everyone, minus ``away`` windows), which servers are down (none), no slowdowns."""

    def __init__(self, env: FakeEnv, away: dict[int, list[tuple[float, float]]] | None = None,
                 slow: dict[int, list[tuple[float, float, float]]] | None = None) -> None:
        self.env = env
        self.slow = dict(slow or {})
        n = env.world.num_devices
        self.availability = Availability([None] * n, [list((away or {}).get(d, [])) for d in range(n)])
        self.down: set[tuple[str, int]] = set()

    @property
    def churn(self) -> bool:
        return not self.availability.trivial

    def is_up(self, device: int) -> bool:
        return self.availability.is_up(int(device), self.env.now)

    def available(self, devices: Any = None) -> list[int]:
        pool = range(self.env.world.num_devices) if devices is None else devices
        return sorted(int(d) for d in pool if self.is_up(int(d)))

    def online_count(self) -> int:
        return len(self.available())

    def online_index(self, devices: Any = ()) -> OnlineIndex:
        return OnlineIndex(self.availability, devices, now=self.env.now)

    def next_up(self, devices: Any = None) -> float:
        pool = range(self.env.world.num_devices) if devices is None else devices
        return min((self.availability.next_up(int(d), self.env.now) for d in pool), default=math.inf)

    def server_up(self, server: tuple[str, int]) -> bool:
        return tuple(server) not in self.down

    def compute_factor(self, device: int) -> float:
        now = self.env.now
        return math.prod(f for a, b, f in self.slow.get(int(device), []) if a <= now < b)

    def current_compute_s(self, spec: TrainSpec | None = None) -> np.ndarray:
        world = self.env.world
        return np.array([world.compute_s(d, spec or self.env.spec) * self.compute_factor(d)
                         for d in range(world.num_devices)])

    def current_upload_s(self) -> np.ndarray:
        world = self.env.world
        return np.array([world.upload_s(d) for d in range(world.num_devices)])


class NoControls:
    on = False
    relays = False

    def control(self, edge: int | None = None) -> None:
        return None

    def coef(self, device: int) -> None:
        return None

    def reset(self, devices: list[int]) -> None:
        self.resets.append(list(devices))

    def regroup(self, edge_of: Any) -> None:
        self.regroups.append([int(e) for e in edge_of])

    def __init__(self) -> None:
        self.resets: list[list[int]] = []
        self.regroups: list[list[int]] = []


def _combine(terms: list[tuple[float, Any, Any]]) -> float:
    return sum(c * (a - (0.0 if b is None else b)) for c, a, b in terms)


class FakeAggregator:
    """One aggregation point on floats; every call is a line of the event log."""

    def __init__(self, env: FakeEnv, tier: str, entity: int) -> None:
        self.env, self.tier, self.entity = env, tier, entity

    def _log(self, method: str, *summary: Any) -> None:
        self.env.log.append((self.env.now, "tier", self.tier, self.entity, method, *summary))

    def _cloud_aggregation(self) -> None:
        env = self.env
        if self.tier == "cloud":
            env.cloud_aggregations += 1
            if env.rounds is not None and env.cloud_aggregations >= env.rounds:
                env.stopping = True

    # -- synchronous rounds
    def add(self, update: Any, weight: float, control_coef: float | None = None) -> None:
        self.env.pending.setdefault((self.tier, self.entity), []).append((update, weight))
        self._log("add", update, weight)

    def commit(self, participants: list[int], base: Any = None, source: str = "device",
               pack_control: bool = False) -> Any:
        held = self.env.pending.pop((self.tier, self.entity), [])
        model = sum(u * w for u, w in held) / sum(w for _, w in held)
        self._log("commit", list(participants), model)
        self._cloud_aggregation()
        return model

    def discard(self) -> None:
        self.env.pending.pop((self.tier, self.entity), None)
        self._log("discard")

    # -- queues and asynchronous updates
    def step(self, base: Any, deltas: list[Any], sources: list[int], staleness: list[int], version: int,
             queue_len: int, source: str = "device") -> Any:
        model = base + _combine(deltas)
        self._log("step", list(sources), [(c, a, b) for c, a, b in deltas], list(staleness), version, model)
        self._cloud_aggregation()
        return model

    def drop(self, source: int, staleness: int) -> None:
        self._log("drop", source, staleness)

    def queue(self, length: int) -> None:
        self._log("queue", length)

    # -- models the protocol forms itself
    def average(self, models: list[Any], weights: list[float], base: Any = None) -> Any:
        model = sum(m * w for m, w in zip(models, weights)) / sum(weights)
        self._log("average", list(models), list(weights), model)
        return model

    def combine(self, terms: list[Any]) -> Any:
        model = _combine(terms)
        self._log("combine", [tuple(t) for t in terms], model)
        return model

    def similarity(self, models: list[Any], base: Any = None, measure: str = "cosine") -> np.ndarray:
        self._log("similarity", list(models))
        if measure == "sq_norm":
            return (np.asarray(models, dtype=np.float64) - (0.0 if base is None else base)) ** 2
        if self.env.similarity is not None:
            return np.asarray(self.env.similarity, dtype=np.float64)
        u = np.asarray(models, dtype=np.float64) - (0.0 if base is None else base)
        return np.sign(np.outer(u, u))  # the cosine of two numbers

    def evaluate_loss(self, model: Any) -> float:
        self._log("evaluate_loss", model)
        return self.env.loss

    def evaluate(self, model: Any) -> tuple[float, float]:
        self._log("evaluate", model)
        return 1.0 / (1.0 + abs(float(model))), self.env.loss  # a made-up accuracy that depends on the model

    def track_staleness(self) -> None:
        self._log("track_staleness")

    def aggregated(self, participants: list[int], trace: dict[str, Any], extra: dict[str, Any] | None = None,
                   lane: Any = None) -> None:
        self._log("aggregated", list(participants))

    def applied(self, sources: list[int], weights: list[float], staleness: list[int], version: int,
                queue_len: int, source: str = "device") -> None:
        self._log("applied", list(sources), list(weights), list(staleness), version)
        self._cloud_aggregation()

    # -- the server's own computation
    def run(self, task: str, inputs: list[Any], done: str, payload: Any = None,
            params: dict[str, Any] | None = None) -> Event:
        """A server task on floats: ``env.server_tasks[task](inputs, params) -> (outputs, seconds)`` (default:
        the inputs' mean, 1 s), queued behind this server's earlier tasks as the driver queues them."""
        fn = self.env.server_tasks.get(task, lambda xs, _: ([sum(xs) / len(xs)], 1.0))
        # (a fake may also give the task's stats: outputs, seconds, stats)
        outputs, seconds, *rest = fn(list(inputs), dict(params or {}))
        stats = dict(rest[0]) if rest else {}
        key = (self.tier, self.entity)
        start = max(self.env.now, self.env.server_free.get(key, self.env.now))
        self.env.server_free[key] = start + seconds
        self._log("run", task, list(inputs), start, start + seconds)
        return self.env.at(start + seconds, done, ServerJobDone(task, tuple(outputs), stats, start, start + seconds, payload))


def short(payload: Any) -> str:
    """A payload in a log line: ``"device=0 round=1"`` (its fields), ``""`` for none."""
    if payload is None:
        return ""
    if dataclasses.is_dataclass(payload):
        return " ".join(f"{f.name}={getattr(payload, f.name)!r}" for f in dataclasses.fields(payload))
    return repr(payload)


class FakeEnv:
    """The :class:`~hierfl.env.api.Env` of a trace test (see the module docstring)."""

    def __init__(self, world: FakeWorld, *, spec: TrainSpec | None = None, straggler: Any = None,
                 cloud_straggler: Any = None, rounds: int | None = None, time_budget_s: float | None = None,
                 global_model: float = 0.0, seed: int = 7, away: dict[int, list[tuple[float, float]]] | None = None,
                 similarity: Any = None, loss: float = 1.0,
                 slow: dict[int, list[tuple[float, float, float]]] | None = None) -> None:
        self.world = world
        self.spec = spec or TrainSpec(epochs=1)
        self.straggler = straggler or WaitAll()
        self.cloud_straggler = cloud_straggler or WaitAll()
        self.time_budget_s = time_budget_s
        self.rounds = rounds
        self.seed = seed
        self.similarity = similarity
        self.loss = loss
        self.queue = EventQueue()
        self.telemetry = FakeTelemetry()
        self.live = FakeLive(self, away, slow)
        self.controls = NoControls()
        # server tasks on floats by name (see FakeAggregator.run) and when each server's queue runs dry
        self.server_tasks: dict[str, Any] = {}
        self.server_free: dict[tuple[str, int], float] = {}
        self.global_model: Any = global_model
        self.stopping = False
        self.cloud_aggregations = 0
        self.pending: dict[tuple[str, int], list[tuple[Any, float]]] = {}
        self.log: list[tuple] = []
        self._jobs = 0
        self._transfers: dict[int, Event] = {}
        self._in_flight: dict[int, set[Event]] = {}  # device → its pending job events and transfers

    # -- clock and scheduling
    @property
    def now(self) -> float:
        return self.queue.now

    def rng(self, name: str, *ids: int) -> np.random.Generator:
        return stream(self.seed, name, *ids)

    def schedule(self, delay: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        return self.queue.push_after(delay, kind, payload, priority)

    def at(self, time: float, kind: str, payload: Any = None, priority: int = Priority.CONTROL) -> Event:
        return self.queue.push(time, kind, payload, priority)

    def cancel(self, event: Event) -> None:
        self.queue.cancel(event)

    # -- jobs
    def planned_compute_s(self, device: int, spec: TrainSpec | None = None) -> float:
        return self.world.compute_s(device, spec or self.spec) * self.live.compute_factor(device)

    def start_job(self, device: int, model: Any, payload: Any, spec: TrainSpec | None = None,
                  control: Any = None, done: str = "train_done", end: float | None = None) -> tuple[Job, Event]:
        compute = self.planned_compute_s(device, spec)
        job = Job(device, self._jobs, model + device + 1, None, compute, self.now)
        self._jobs += 1
        event = self.queue.push(self.now + compute if end is None else end, done, payload, Priority.ARRIVAL)
        event.device = device
        self._in_flight.setdefault(device, set()).add(event)
        return job, event

    def finish_training(self, job: Job) -> dict[str, float]:
        return {}

    def cancel_device(self, device: int) -> None:
        for event in self._in_flight.pop(device, set()):
            self.queue.cancel(event)

    # -- transfers
    def send(self, src: tuple[str, int], dst: tuple[str, int], event: str, payload: Any, name: str,
             priority: int = Priority.ARRIVAL, size: int | None = None, **args: Any) -> int:
        ev = self.queue.push(self.now + self.world.link_s(tuple(src), tuple(dst)), event, payload, priority)
        fid = len(self._transfers)
        ev.transfer = fid
        self._transfers[fid] = ev
        for end in (src, dst):
            if end[0] == "device":
                self._in_flight.setdefault(int(end[1]), set()).add(ev)
        return fid

    def cancel_transfer(self, fid: int) -> None:
        self.queue.cancel(self._transfers[fid])

    # -- aggregation
    def set_global(self, handle: Any) -> None:
        self.global_model = handle

    def tier(self, tier: str, entity: int = 0) -> FakeAggregator:
        return FakeAggregator(self, tier, entity)

    # -- the driver loop
    def run(self, protocol: Any, until: float | None = None, max_events: int = 10_000) -> list[tuple]:
        """Start ``protocol`` and dispatch events until it stops (``rounds`` cloud aggregations, virtual
        time ``until`` or nothing left); returns the event log."""
        if until is not None:
            self.queue.push(until, "stop", None, Priority.STOP)
        protocol.start()
        for _ in range(max_events):
            if self.stopping:
                break
            event = self.queue.pop_next()
            if event is None:
                break
            if event.kind == "stop":
                self.stopping = True
                break
            for pending in self._in_flight.values():
                pending.discard(event)
            self.log.append((event.time, event.kind, short(event.payload)))
            protocol.handle(event)
        else:
            raise AssertionError(f"more than {max_events} events")
        return self.log


def run(protocol_cfg: Any, env: FakeEnv, until: float | None = None) -> list[tuple]:
    """Create the protocol of ``protocol_cfg`` on ``env`` and run it; the event log."""
    return env.run(protocol_cfg.create(env), until=until)
