"""The output files of a run other than the trace (ARCHITECTURE.md §7), one writer each.

``runs/<name>/``: ``config.yaml``, ``metrics.jsonl`` (appended and flushed line by line),
``summary.json``, ``devices.csv``, ``clusters.jsonl``, ``trace.json`` (:mod:`hierfl.output.trace`),
plus ``final_model.npy``. A metric line is formed only in :class:`MetricsWriter`, from a typed
:class:`~hierfl.env.records.Record`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.core.world import World
from hierfl.env.records import ClustersRecord, Record
from hierfl.output.jsonsafe import clean

__all__ = ["CONTRACT_FILES", "MetricsWriter", "ClustersWriter", "prepare_dir", "reopen", "sync", "write_config", "write_devices",
           "write_summary", "write_model"]

CONTRACT_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "devices.csv", "clusters.jsonl", "trace.json")


def prepare_dir(out_dir: Path) -> None:
    """Create ``out_dir``; a re-run replaces the previous run's files (and only those)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (*CONTRACT_FILES, "final_model.npy"):
        (out_dir / name).unlink(missing_ok=True)


def reopen(path: Path, offset: int | None) -> Any:
    """A text stream on ``path``: a new file, or (``offset``: a resumed run) the file cut back to
    ``offset`` bytes, appended to from there."""
    if offset is None:
        return open(path, "w", encoding="utf-8")
    with open(path, "r+b") as fh:  # cut what was written after the checkpoint
        fh.truncate(offset)
    return open(path, "a", encoding="utf-8")


def sync(fh: Any) -> int:
    """Flush ``fh`` to disk (it survives a power cut) and return its size in bytes."""
    fh.flush()
    os.fsync(fh.fileno())
    return int(fh.tell())


class MetricsWriter:
    """``metrics.jsonl``: one JSON object per line, flushed as it is written."""

    def __init__(self, path: Path, offset: int | None = None) -> None:
        self._fh = reopen(path, offset)

    def write(self, t: float, wall_s: float, rec: Record) -> dict[str, Any]:
        """Append ``rec`` stamped with virtual ``t`` and ``wall_s``; returns the line's object."""
        line: dict[str, Any] = {"t": t, "wall_s": wall_s, "event": rec.EVENT}
        line.update(rec.items())
        self._fh.write(json.dumps(clean(line)) + "\n")
        self._fh.flush()
        return line

    def close(self) -> None:
        """Close the stream."""
        if not self._fh.closed:
            self._fh.close()


class ClustersWriter:
    """``clusters.jsonl``: membership and leaders at start and after every re-clustering."""

    def __init__(self, path: Path, offset: int | None = None) -> None:
        self._fh = reopen(path, offset)

    def write(self, rec: ClustersRecord) -> None:
        """Append one membership record."""
        self._fh.write(json.dumps(clean(rec.line())) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the stream."""
        if not self._fh.closed:
            self._fh.close()


def write_config(out_dir: Path, text: str) -> None:
    """``config.yaml``: the fully resolved scenario."""
    (out_dir / "config.yaml").write_text(text, encoding="utf-8")


def write_devices(out_dir: Path, world: World, availability: list[str] | None = None,
                  slowdowns: list[int] | None = None, edge_of: np.ndarray | None = None) -> None:
    """``devices.csv``: each device's tier, drawn profile and server (-1: the cloud), its availability
    model and how many slowdown windows the scenario's events give it. ``edge_of``: a protocol's own
    device → edge map instead of the topology's (FedCH)."""
    if edge_of is not None:  # each device's server and its link times as that map has them (on a copy)
        world = dataclasses.replace(world, edge_of=np.asarray(edge_of))
    assert world.tier is not None
    edges = world.edge_of
    with open(out_dir / "devices.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["device", "tier", "samples", "speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms",
                    "edge", "edge_latency_ms", "compute_s_per_epoch", "download_s", "upload_s",
                    "availability", "slowdowns"])
        for i in range(world.num_devices):
            edge = int(edges[i])
            extra = float(world.edge_latency_ms[i, edge]) if edge >= 0 else 0.0
            w.writerow([i, world.tier[i], int(world.samples[i]), f"{world.speed_sps[i]:.6g}",
                        f"{world.uplink_mbps[i]:.6g}",
                        f"{world.downlink_mbps[i]:.6g}", f"{world.latency_ms[i]:.6g}", edge, f"{extra:.6g}",
                        f"{world.samples[i] / world.speed_sps[i]:.6g}", f"{world.download_s(i):.6g}",
                        f"{world.upload_s(i):.6g}", availability[i] if availability else "always",
                        slowdowns[i] if slowdowns else 0])


def write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` (rewritten whole, atomically; at the end or on failure)."""
    path = out_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(clean(summary), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def write_model(out_dir: Path, params: np.ndarray) -> None:
    """``final_model.npy``: the final global model as a float32 vector."""
    np.save(out_dir / "final_model.npy", np.asarray(params, dtype=np.float32))
