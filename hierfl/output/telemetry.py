"""The run's telemetry: counters, staleness, queue lengths, and the writers of every output stream.

:class:`RunTelemetry` implements :class:`~hierfl.env.api.Telemetry` for protocols and the driver
alike; it owns the counters (the ``totals`` of ``summary.json``, repeated in every evaluation
line), the staleness of applied updates per tier, the queue-length series, and the metrics,
clusters and trace writers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.kernel.timeseries import QueueTracker, StepSeries
from hierfl.core.world import World
from hierfl.env.api import Endpoint
from hierfl.env.records import ClustersRecord, Record
from hierfl.output.files import ClustersWriter, MetricsWriter, prepare_dir, write_devices
from hierfl.output.trace import CounterTrack, TraceWriter

__all__ = ["COUNTERS", "OPTIONAL_COUNTERS", "RunTelemetry"]

COUNTERS = ("cloud_aggregations", "edge_aggregations", "device_updates", "train_jobs", "compute_s",
            "bytes_device_tier", "bytes_edge_tier", "bytes_cloud", "messages_cloud", "bytes_d2d",
            "updates_dropped", "devices_lost", "stragglers_dropped", "wasted_compute_s")
# counters a feature adds on its first count (only the runs that use it carry them, so others' totals
# stay as they were): re-grouping (``protocol.recluster``) counts the devices it moved and their transfers;
# server jobs (a protocol's own computation at a server) count their tasks, virtual seconds and FLOPs; a
# ledger (a blockchain-based protocol) counts the blocks that carry data and the bytes written to the chain
OPTIONAL_COUNTERS = frozenset({"devices_migrated", "bytes_migration", "server_jobs", "server_job_s", "server_flops",
                               "chain_blocks", "bytes_on_chain", "subprotocol_runs", "subprotocol_rounds",
                               "subprotocol_dropped", "subprotocol_failed", "subprotocol_s"})


def _hist_mean(hist: dict[int, int]) -> float | None:
    """Mean of a {τ: count} histogram: the integer sum over the count, one rounding (the value
    ``numpy.mean`` gives for the list of values, whose float64 sum of integers is exact)."""
    count = sum(hist.values())
    return sum(t * c for t, c in hist.items()) / count if count else None


class RunTelemetry:
    """Counters, metric lines, clusters records and trace events of one run, written as it goes."""

    def __init__(self, out_dir: Path, clock: Callable[[], float] = lambda: 0.0,
                 trace_devices: set[int] | None = None, tensorboard: bool = False,
                 offsets: dict[str, int] | None = None, list_limit: int | None = None,
                 counter_s: float = 0.0) -> None:
        """``offsets``: resume a run, its streams cut back to these sizes (:meth:`sync`'s value);
        ``list_limit``: longer lists in metric lines and trace events are written as summaries;
        ``counter_s``: queue-length counters in the trace at most about once per that many virtual s."""
        self.out_dir = Path(out_dir)
        if offsets is None:
            prepare_dir(self.out_dir)
        at = offsets or {}
        self.clock = clock  # virtual now (the driver sets it once its queue exists)
        self.counters: dict[str, float] = {k: 0 for k in COUNTERS}
        # staleness of the applied updates, per tier ("edge": device→leader, "cloud"), as a histogram
        # {τ: updates} (memory and evaluation cost bounded by the distinct τ, not by the updates);
        # only asynchronous protocols record any (synchronous ones apply fresh updates only)
        self.staleness: dict[str, dict[int, int]] = {}
        # lengths of the update queues (leaders, cloud, buffers) over virtual time
        self.queues = QueueTracker()
        self._queue_hits: dict[tuple[str, int], tuple[StepSeries, CounterTrack]] = {}  # queue → (series, counter)
        self._queue_tracks: dict[tuple[str, int], CounterTrack] = {}  # (tier, entity) → its trace counter
        self._wall0 = time.perf_counter()
        self._metrics = MetricsWriter(self.out_dir / "metrics.jsonl", at.get("metrics.jsonl"), list_limit)
        self._clusters = ClustersWriter(self.out_dir / "clusters.jsonl", at.get("clusters.jsonl"))
        self.trace = TraceWriter(self.out_dir / "trace.json", trace_devices, at.get("trace.json"), list_limit, counter_s)
        self._devices: Callable[[np.ndarray | None], None] | None = None
        self._edge_of: np.ndarray | None = None       # a protocol's own device → edge map, once it gives one
        self._extra: dict[str, np.ndarray] | None = None  # further devices.csv columns (energy), at the end
        self._tb: Any = None
        if tensorboard:  # output.tensorboard: the eval lines as TensorBoard scalars too
            from hierfl.output.tensorboard import TensorBoardWriter

            self._tb = TensorBoardWriter(self.out_dir)

    # -- the Telemetry interface -----------------------------------------------------------------
    def count(self, name: str, by: float = 1) -> None:
        """Add ``by`` to counter ``name`` (an optional one starts at 0 on its first count)."""
        try:
            self.counters[name] += by
        except KeyError:
            if name not in OPTIONAL_COUNTERS:
                raise
            self.counters[name] = by

    def record(self, rec: Record) -> dict[str, Any]:
        """Append one metric line now (the trace is flushed with it); returns the line."""
        line = self._metrics.write(self.clock(), self.wall_s(), rec)
        self.trace.flush()
        if self._tb is not None:
            self._tb.write(line)
        return line

    def span(self, lane: Endpoint, name: str, start: float, duration: float, **args: Any) -> None:
        """A trace span."""
        devices = self.trace.devices  # the trace's keeps(lane) first: most device lanes of a large run are not kept
        if devices is not None and lane[0] == "device" and int(lane[1]) not in devices:
            return
        self.trace.span(lane, name, start, duration, **args)

    def instant(self, lane: Endpoint, name: str, t: float, **args: Any) -> None:
        """A trace instant."""
        self.trace.instant(lane, name, t, **args)

    def counter(self, lane: Endpoint, name: str, t: float, **values: float) -> None:
        """A trace counter sample."""
        self.trace.counter(lane, name, t, **values)

    def flow(self, src: Endpoint, dst: Endpoint, start: float, end: float, name: str, flow_id: int) -> None:
        """A trace arrow between two lanes."""
        self.trace.flow(src, dst, start, end, name, flow_id)

    def clusters(self, rec: ClustersRecord) -> None:
        """Append a ``clusters.jsonl`` line."""
        self._clusters.write(rec)

    def devices(self, edge_of: np.ndarray) -> None:
        """Rewrite ``devices.csv`` with a protocol's own device → edge map."""
        self._edge_of = edge_of
        if self._devices is not None:
            self._devices(edge_of)

    def device_columns(self, columns: dict[str, np.ndarray]) -> None:
        """Rewrite ``devices.csv`` with further per-device columns (the energy model's, at the end of a run)."""
        self._extra = columns
        if self._devices is not None:
            self._devices(self._edge_of)

    # -- the driver's side -------------------------------------------------------------------------
    def wall_s(self) -> float:
        """Real seconds since the run started (reported, never used for decisions)."""
        return time.perf_counter() - self._wall0

    def continue_wall(self, wall_s: float) -> None:
        """Count wall seconds on from ``wall_s`` (a run rolled back to a checkpoint keeps its clock)."""
        self._wall0 = time.perf_counter() - float(wall_s)

    def summary_part(self, t_end: float) -> dict[str, Any]:
        """``summary.json``'s part: staleness per tier and queue lengths up to ``t_end`` (each if any)."""
        part: dict[str, Any] = {}
        if self.staleness:
            part["staleness"] = self.staleness_summary()
        if self.queues.series:
            part["queues"] = self.queues.summary(t_end)
        return part

    def write_devices(self, world: World, availability: list[str], slowdowns: list[int]) -> None:
        """``devices.csv`` as built; a protocol may rewrite it later with its own map (:meth:`devices`)."""
        self._devices = lambda edge_of: write_devices(self.out_dir, world, availability, slowdowns, edge_of,
                                                      self._extra)
        self._devices(None)

    def lanes(self, num_edges: int, num_devices: int) -> None:
        """Name the trace lanes."""
        self.trace.lanes(num_edges, num_devices)

    def queue_length(self, tier: str, entity: int, length: int) -> None:
        """Queue ``tier``/``entity`` holds ``length`` updates from now on (a trace counter on change)."""
        hit = self._queue_hits.get((tier, entity))
        if hit is not None:  # a queue seen before: its series and trace counter, in one lookup
            series, track = hit
            if series.value != length:
                if length < 0:
                    raise ValueError(f"a queue length is >= 0, got {length} for {tier} {entity}")
                now = self.clock()
                self.queues.change(now, tier, series, length)
                track.sample(now, length)
            return
        now = self.clock()
        track = self._queue_tracks.get((tier, entity))
        if track is None:
            track = self._queue_track(tier, entity)
        if self.queues.set(now, tier, entity, length):
            track.sample(now, length)
        self._queue_hits[(tier, entity)] = (self.queues.series[(tier, int(entity))], track)

    def _queue_track(self, tier: str, entity: int) -> CounterTrack:
        """The trace counter of queue ``tier``/``entity``: its lane, name and event text, formed once."""
        track = self._queue_tracks[(tier, entity)] = (
            self.trace.counter_track(("edge", entity), f"queue_len {tier} {entity}", "updates")
            if tier == "edge" else self.trace.counter_track(("cloud", 0), "queue_len cloud", "updates"))
        return track

    def track_staleness(self, tier: str) -> None:
        """``tier`` reports staleness (its fields appear in evaluation lines, None until an update)."""
        self.staleness.setdefault(tier, {})

    def add_staleness(self, tier: str, values: Iterable[int]) -> None:
        """Applied updates of ``tier`` with staleness ``values``."""
        hist = self.staleness.setdefault(tier, {})
        # counted in C first (Counter keeps first-occurrence order, so new keys enter hist in the same order)
        for t, n in Counter(values).items():
            t = int(t)
            hist[t] = hist.get(t, 0) + n

    def staleness_means(self) -> dict[str, float | None]:
        """``staleness_mean_<tier>`` fields of an evaluation line."""
        return {f"staleness_mean_{tier}": _hist_mean(hist) for tier, hist in sorted(self.staleness.items())}

    def staleness_summary(self) -> dict[str, Any]:
        """Per tier: histogram ``{τ: count}``, mean, max and count of applied updates' staleness."""
        out: dict[str, Any] = {}
        for tier, hist in sorted(self.staleness.items()):
            count = sum(hist.values())
            out[tier] = {"histogram": {str(t): hist[t] for t in sorted(hist) if hist[t]},
                         "mean": _hist_mean(hist), "max": max(hist) if count else None, "count": count}
        return out

    def sync(self) -> dict[str, int]:
        """Flush every stream to disk; their sizes (a checkpoint's file offsets)."""
        return {"metrics.jsonl": self._metrics.sync(), "clusters.jsonl": self._clusters.sync(),
                "trace.json": self.trace.sync()}

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides the files: counters (the very dict the driver holds),
        staleness, queue series, whether the trace has an event yet, and the wall seconds so far."""
        return {"counters": self.counters, "staleness": self.staleness, "queues": self.queues,
                "trace_first": not self.trace.started, "wall_s": self.wall_s(), "edge_of": self._edge_of,
                "queue_tracks": {key: track.state() for key, track in self._queue_tracks.items()},
                "chain_lanes": sorted(self.trace.chain_lanes)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Take over :meth:`state` (a resumed run's wall seconds go on from the checkpoint's)."""
        self.counters, self.staleness, self.queues = state["counters"], state["staleness"], state["queues"]
        self._queue_hits = {}  # (the series are the checkpoint's objects now)
        self.trace.started = not state["trace_first"]
        self._edge_of = state.get("edge_of")
        self.trace.chain_lanes = set(state.get("chain_lanes", ()))  # lanes named already stay named
        for (tier, entity), track_state in state.get("queue_tracks", {}).items():
            self._queue_track(tier, entity).set_state(track_state)
        self._wall0 = time.perf_counter() - float(state["wall_s"])

    def close(self) -> None:
        """Close every stream (the trace gets its held counter samples and its closing bracket)."""
        if not self.trace.closed:
            for track in self._queue_tracks.values():
                try:
                    track.close()
                except Exception:  # noqa: BLE001 - a failed run unwinding: the trace stays a valid prefix
                    break
        self.trace.close()
        self._metrics.close()
        self._clusters.close()
        if self._tb is not None:
            self._tb.close()
