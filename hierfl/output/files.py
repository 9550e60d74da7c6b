"""The output files of a run other than the trace (ARCHITECTURE.md §7), one writer each.

``runs/<name>/``: ``config.yaml``, ``metrics.jsonl`` (appended line by line, each line whole or not at all),
``summary.json``, ``devices.csv``, ``clusters.jsonl``, ``trace.json`` (:mod:`hierfl.output.trace`),
plus ``final_model.npy``. A metric line is formed only in :class:`MetricsWriter`, from a typed
:class:`~hierfl.env.records.Record`.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.core.world import World
from hierfl.env.records import ClustersRecord, Record
from hierfl.output.bounded import bound_lists
from hierfl.output.jsonsafe import clean, jsonable

__all__ = ["CONTRACT_FILES", "OutputWriteError", "LineFile", "MetricsWriter", "ClustersWriter", "prepare_dir", "sync", "write_config", "write_devices",
           "write_summary", "write_model"]

CONTRACT_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "devices.csv", "clusters.jsonl", "trace.json")


def prepare_dir(out_dir: Path) -> None:
    """Create ``out_dir``; a re-run replaces the previous run's files (and only those)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (*CONTRACT_FILES, "final_model.npy"):
        (out_dir / name).unlink(missing_ok=True)


class OutputWriteError(OSError):
    """An output file could not be written (a full disk, a removed directory); names the file and why."""


def _write_error(path: Path, exc: OSError) -> OutputWriteError:
    reason = exc.strerror or str(exc)
    hint = " (the disk is full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return OutputWriteError(exc.errno or 0, f"cannot write {path}: {reason}{hint}")


class LineFile:
    """An append-only text file that only ever holds whole lines (reliability: a full disk cut a metric
    line mid-JSON).

    Each :meth:`append` writes its text with unbuffered ``os.write`` calls; if one fails part-way
    the file is truncated back to its last whole line and :class:`OutputWriteError` is raised, so
    every reader still sees valid JSON lines (``metrics.jsonl``, ``clusters.jsonl``) or a valid
    prefix of trace events.
    """

    def __init__(self, path: Path, offset: int | None = None) -> None:
        """``offset``: a resumed run: the file is cut back to ``offset`` bytes (a checkpoint's
        :meth:`sync` value) and appended to from there; None: a new, empty file."""
        self.path = path
        try:
            if offset is None:
                self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            else:
                self._fd = os.open(path, os.O_WRONLY)
                os.ftruncate(self._fd, offset)  # cut what was written after the checkpoint
                os.lseek(self._fd, offset, os.SEEK_SET)
        except OSError as exc:
            raise _write_error(path, exc) from None
        self.size = 0 if offset is None else offset  # bytes of whole lines written
        self._tail = 0  # bytes of a tail written after them (a trace's closing bracket), replaced by the next append

    def sync(self) -> int:
        """Flush to disk (it survives a power cut); returns the file's size in bytes."""
        if self._fd is not None:
            os.fsync(self._fd)
        return self.size

    @property
    def closed(self) -> bool:
        """Whether the file is closed."""
        return self._fd is None

    def append(self, text: str, tail: str = "") -> None:
        """Append ``text`` whole, or nothing of it (raising :class:`OutputWriteError`).

        ``tail``: text written after it that is not part of the content (:attr:`size`, the
        checkpoint's offset, leaves it out): the next append writes over it, in the same write, so
        the file always ends with one (``trace.json``'s closing bracket: the array parses whenever
        the process ends)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        body = text.encode("utf-8")
        data = memoryview(body + tail.encode("utf-8"))
        done = 0
        try:
            if self._tail:
                os.lseek(self._fd, self.size, os.SEEK_SET)
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as exc:
            try:  # cut the partial line off: truncating frees space, so it works on a full disk
                os.ftruncate(self._fd, self.size)
                os.lseek(self._fd, self.size, os.SEEK_SET)
            except OSError:
                pass
            self._tail = 0
            raise _write_error(self.path, exc) from None
        self.size += len(body)
        self._tail = done - len(body)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class MetricsWriter:
    """``metrics.jsonl``: one JSON object per line, each written whole as it happens."""

    def __init__(self, path: Path, offset: int | None = None, list_limit: int | None = None) -> None:
        self._fh = LineFile(path, offset)
        self.list_limit = list_limit  # longer lists are written as summaries (hierfl.output.bounded)

    def write(self, t: float, wall_s: float, rec: Record) -> dict[str, Any]:
        """Append ``rec`` stamped with virtual ``t`` and ``wall_s``; returns the line's object."""
        line: dict[str, Any] = {"t": t, "wall_s": wall_s, "event": rec.EVENT}
        line.update(rec.items())
        line = bound_lists(line, self.list_limit)
        self._fh.append(json.dumps(jsonable(line)) + "\n")  # the bytes of json.dumps(clean(line))
        return line

    def sync(self) -> int:
        """Flush the stream to disk; its size in bytes (what a checkpoint records)."""
        return self._fh.sync()

    def close(self) -> None:
        """Close the stream."""
        self._fh.close()


class ClustersWriter:
    """``clusters.jsonl``: membership and leaders at start and after every re-clustering."""

    def __init__(self, path: Path, offset: int | None = None) -> None:
        self._fh = LineFile(path, offset)

    def write(self, rec: ClustersRecord) -> None:
        """Append one membership record."""
        self._fh.append(json.dumps(jsonable(rec.line())) + "\n")

    def sync(self) -> int:
        """Flush the stream to disk; its size in bytes (what a checkpoint records)."""
        return self._fh.sync()

    def close(self) -> None:
        """Close the stream."""
        self._fh.close()


def write_config(out_dir: Path, text: str) -> None:
    """``config.yaml``: the fully resolved scenario."""
    path = out_dir / "config.yaml"
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _write_error(path, exc) from None


def write_devices(out_dir: Path, world: World, availability: list[str] | None = None,
                  slowdowns: list[int] | None = None, edge_of: np.ndarray | None = None,
                  extra: dict[str, np.ndarray] | None = None) -> None:
    """``devices.csv``: each device's tier, drawn profile and server (-1: the cloud), its availability
    model and how many slowdown windows the scenario's events give it. ``edge_of``: a protocol's own
    device → edge map instead of the topology's (clusters it forms itself). ``extra``: further per-device columns appended
    at the end (the energy model's joules, written when the run ends)."""
    if edge_of is not None:  # each device's server and its link times as that map has them (on a copy)
        world = dataclasses.replace(world, edge_of=np.asarray(edge_of))
    try:
        _devices_csv(out_dir / "devices.csv", world, availability, slowdowns, extra)
    except OSError as exc:
        raise _write_error(out_dir / "devices.csv", exc) from None


_CSV_BLOCK = 65_536  # devices formed and written at a time (bounded memory at 10^6 devices)


def _devices_csv(path: Path, world: World, availability: list[str] | None, slowdowns: list[int] | None,
                 columns: dict[str, np.ndarray] | None = None) -> None:
    assert world.tier is not None
    n = world.num_devices
    header = ["device", "tier", "samples", "speed_sps", "uplink_mbps", "downlink_mbps", "latency_ms", "edge",
              "edge_latency_ms", "compute_s_per_epoch", "download_s", "upload_s", "availability", "slowdowns",
              *(columns or {})]
    tiers = np.asarray(world.tier)[:n].tolist()
    labels = list(availability[:n]) if availability else ["always"] * n
    # the csv module quotes a field only when it holds a delimiter, a quote or a line break: with none in
    # the header, tier names and availability labels (the only free text), a row is its fields joined by
    # commas and ended by "\r\n" (excel dialect), written without the module's per-field work
    words = {*header, *set(tiers), *set(labels)}
    plain = all(type(word) is str and not any(c in word for c in ',"\r\n') for word in words)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for lo in range(0, n, _CSV_BLOCK):
            rows = zip(*_devices_block(world, lo, min(lo + _CSV_BLOCK, n), tiers, labels, slowdowns, columns))
            if plain:
                fh.write("".join([",".join(row) + "\r\n" for row in rows]))
            else:
                w.writerows(rows)


def _devices_block(world: World, lo: int, hi: int, tiers: list[Any], labels: list[Any],
                   slowdowns: list[int] | None, columns: dict[str, np.ndarray] | None) -> list[list[Any]]:
    """The ``devices.csv`` fields of devices ``lo``..``hi − 1``, column by column: numbers as text,
    tier names and availability labels as given.

    Whole columns at once (scale: the row-by-row scalar calls cost ~8 µs a device, 8 s at 10^6
    devices), with the same IEEE operations in the same order as ``World.link_latency_ms`` /
    ``download_s`` / ``upload_s`` and ``transfer_time_s``, element-wise, so every value has the same
    bits; ``.tolist()`` gives the Python numbers that numpy's scalars format as, so every field has
    the same text as ``f"{world.speed_sps[i]:.6g}"`` and the like.
    """
    part = slice(lo, hi)
    edges = np.asarray(world.edge_of)[part]
    extra = np.zeros(hi - lo)
    rows = np.flatnonzero(edges >= 0)
    if rows.size:
        extra[rows] = np.asarray(world.edge_latency_ms, dtype=np.float64)[lo + rows, edges[rows]]
    latency = np.asarray(world.latency_ms, dtype=np.float64)[part]
    link_latency = latency + extra
    down = np.asarray(world.downlink_mbps, dtype=np.float64)[part]
    up = np.asarray(world.uplink_mbps, dtype=np.float64)[part]
    bad = np.flatnonzero((down <= 0) | (up <= 0) | (link_latency < 0))
    if bad.size:  # a link that cannot carry data: the scalar path's own error
        world.download_s(lo + int(bad[0]))
        world.upload_s(lo + int(bad[0]))
    bits = world.model_bytes * 8.0
    samples = np.asarray(world.samples)[part]
    fmt = "%.6g".__mod__  # the text of f"{x:.6g}" for a Python float or int, with less per-call overhead

    def col(values: Any) -> list[str]:
        return list(map(fmt, np.asarray(values)[part].tolist()))

    def own(values: np.ndarray) -> list[str]:
        return list(map(fmt, values.tolist()))

    return [list(map(str, range(lo, hi))), tiers[part], list(map(str, samples.astype(np.int64).tolist())),
            col(world.speed_sps), own(up), own(down), own(latency), list(map(str, edges.astype(np.int64).tolist())),
            own(extra), own(samples / np.asarray(world.speed_sps)[part]),
            own(link_latency / 1000.0 + bits / (down * 1e6)), own(link_latency / 1000.0 + bits / (up * 1e6)),
            labels[part], list(map(str, slowdowns[part])) if slowdowns else ["0"] * (hi - lo),
            *(col(c) for c in (columns or {}).values())]


def write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` (rewritten whole, atomically; at the end or on failure)."""
    path = out_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps(clean(summary), indent=2) + "\n"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # the data is on disk before the rename makes it the summary
        tmp.replace(path)
    except OSError as exc:
        # a full disk: no half-written temporary file is left, and the earlier summary (if any) stays whole
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from None


def write_model(out_dir: Path, params: np.ndarray) -> None:
    """``final_model.npy``: the final global model as a float32 vector."""
    path = out_dir / "final_model.npy"
    try:
        np.save(path, np.asarray(params, dtype=np.float32))
    except OSError as exc:
        raise _write_error(path, exc) from None
