"""The output files of a run (ARCHITECTURE.md §7), written as the run goes.

``runs/<name>/``: ``config.yaml``, ``metrics.jsonl`` (appended and flushed line by line),
``summary.json``, ``devices.csv``, ``clusters.jsonl``, ``trace.json`` (Chrome trace-event
array format — the closing bracket is optional, so a crashed run's trace still opens in
Perfetto), plus ``final_model.npy``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.core.world import World

__all__ = ["Recorder", "LANES", "CONTRACT_FILES"]

CONTRACT_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "devices.csv", "clusters.jsonl", "trace.json")

# Chrome-trace process ids of the three lane groups (pid, label).
LANES = {"cloud": (1, "cloud"), "edge": (2, "leaders"), "device": (3, "devices")}


def _clean(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Recorder:
    """Writes every output file of one run."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name in (*CONTRACT_FILES, "final_model.npy"):  # a re-run replaces the previous files
            (self.out_dir / name).unlink(missing_ok=True)
        self._metrics = open(self.out_dir / "metrics.jsonl", "w", encoding="utf-8")
        self._clusters = open(self.out_dir / "clusters.jsonl", "w", encoding="utf-8")
        self._trace = open(self.out_dir / "trace.json", "w", encoding="utf-8")
        self._trace.write("[\n")
        self._trace_first = True

    # -- static files -------------------------------------------------------------------------
    def write_config(self, text: str) -> None:
        """The fully resolved scenario."""
        (self.out_dir / "config.yaml").write_text(text, encoding="utf-8")

    def write_devices(self, world: World, availability: list[str] | None = None,
                      slowdowns: list[int] | None = None) -> None:
        """Each device's tier, drawn profile and edge server (-1: talks to the cloud), its availability
        model and how many slowdown windows the scenario's events give it."""
        assert world.tier is not None
        with open(self.out_dir / "devices.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["device", "tier", "samples", "speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms",
                        "edge", "edge_latency_ms", "compute_s_per_epoch", "download_s", "upload_s",
                        "availability", "slowdowns"])
            for i in range(world.num_devices):
                edge = int(world.edge_of[i])
                extra = float(world.edge_latency_ms[i, edge]) if edge >= 0 else 0.0
                w.writerow([i, world.tier[i], int(world.samples[i]), f"{world.speed_sps[i]:.6g}",
                            f"{world.uplink_mbps[i]:.6g}",
                            f"{world.downlink_mbps[i]:.6g}", f"{world.latency_ms[i]:.6g}", edge, f"{extra:.6g}",
                            f"{world.samples[i] / world.speed_sps[i]:.6g}", f"{world.download_s(i):.6g}",
                            f"{world.upload_s(i):.6g}", availability[i] if availability else "always",
                            slowdowns[i] if slowdowns else 0])

    def write_summary(self, summary: dict[str, Any]) -> None:
        """``summary.json`` (rewritten whole; written at the end or on failure)."""
        path = self.out_dir / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_clean(summary), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    def write_model(self, params: np.ndarray) -> None:
        """The final global model as a float32 vector."""
        np.save(self.out_dir / "final_model.npy", np.asarray(params, dtype=np.float32))

    # -- streams ------------------------------------------------------------------------------
    def metric(self, record: dict[str, Any]) -> None:
        """Append one line to ``metrics.jsonl`` and flush it (and the trace) to disk."""
        self._metrics.write(json.dumps(_clean(record)) + "\n")
        self._metrics.flush()
        self._trace.flush()

    def clusters(self, record: dict[str, Any]) -> None:
        """Append one membership record to ``clusters.jsonl``."""
        self._clusters.write(json.dumps(_clean(record)) + "\n")
        self._clusters.flush()

    def _event(self, event: dict[str, Any]) -> None:
        self._trace.write(("" if self._trace_first else ",\n") + json.dumps(event, separators=(",", ":")))
        self._trace_first = False

    def trace_lanes(self, num_edges: int, num_devices: int) -> None:
        """Name the lanes: one per device, leader and the cloud."""
        for group, (pid, label) in LANES.items():
            self._event({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
            self._event({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            count = {"cloud": 1, "edge": num_edges, "device": num_devices}[group]
            for tid in range(count):
                name = "cloud" if group == "cloud" else f"{'edge' if group == 'edge' else 'device'} {tid}"
                self._event({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    def span(self, lane: tuple[str, int], name: str, start: float, duration: float, **args: Any) -> None:
        """A complete event in virtual time (seconds in, microseconds out)."""
        pid = LANES[lane[0]][0]
        self._event({"ph": "X", "name": name, "cat": lane[0], "ts": start * 1e6, "dur": duration * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": _clean(args)})

    def instant(self, lane: tuple[str, int], name: str, t: float, **args: Any) -> None:
        """An instant event on a lane."""
        pid = LANES[lane[0]][0]
        self._event({"ph": "i", "s": "t", "name": name, "cat": lane[0], "ts": t * 1e6,
                     "pid": pid, "tid": int(lane[1]), "args": _clean(args)})

    def counter(self, lane: tuple[str, int], name: str, t: float, **values: float) -> None:
        """A counter sample (Chrome trace phase ``C``): each of ``values`` holds from ``t`` until the next sample.

        Counters are drawn per process (lane group) and told apart by ``name``, e.g. one queue
        length track per leader.
        """
        pid = LANES[lane[0]][0]
        self._event({"ph": "C", "name": name, "cat": lane[0], "ts": t * 1e6, "pid": pid, "tid": int(lane[1]),
                     "args": _clean(values)})

    def flow(self, src: tuple[str, int], dst: tuple[str, int], start: float, end: float, name: str,
             flow_id: int) -> None:
        """An arrow from lane ``src`` at ``start`` to lane ``dst`` at ``end`` (trace flow events, e.g. a ring hop)."""
        for ph, lane, t in (("s", src, start), ("f", dst, end)):
            event = {"ph": ph, "id": int(flow_id), "name": name, "cat": "flow", "ts": t * 1e6,
                     "pid": LANES[lane[0]][0], "tid": int(lane[1])}
            if ph == "f":
                event["bp"] = "e"  # bind to the slice enclosing the arrival
            self._event(event)

    def close(self) -> None:
        """Close the streams; the trace array gets its closing bracket."""
        if not self._trace.closed:
            self._trace.write("\n]\n")
        for fh in (self._metrics, self._clusters, self._trace):
            if not fh.closed:
                fh.close()
