"""Device trace files: FedScale's capacity and availability traces and our CSV equivalents.

FedScale (Lai et al., "FedScale: Benchmarking Model and System Performance of Federated
Learning at Scale", ICML 2022; ``fedscale/cloud/internal/client_metadata.py``):

* ``client_device_capacity`` — a pickle ``{client_id: {'computation': ms, 'communication':
  kbps}}``: ``computation`` is the model's *inference* latency per sample in ms (training a
  sample costs 3× that: ``batch · steps · computation · 3 / 1000`` s per job), ``communication``
  the bandwidth in kbit/s with 1 kbit = 1024 bit (FedScale sizes models as ``bytes / 1024 · 8``
  kbit and divides by it), the same both ways.
* ``client_behave_trace`` — a pickle ``{client_id: {'active': [..], 'inactive': [..],
  'finish_time': s, 'duration': s, 'model': str}}``. FedScale's ``is_active(t)`` reduces ``t``
  modulo ``finish_time`` and tests ``active[k] <= t <= inactive[k]``: the k-th pair is one
  online interval and the pattern repeats every ``finish_time`` seconds. We return the pairs as
  half-open ``[start, end)`` intervals (the closed end has measure zero), sorted, clipped to
  ``[0, finish_time)`` (FedScale never looks outside it), with ``period_s = finish_time``. An
  ``active`` list one longer than ``inactive`` means the last session lasts to ``finish_time``.

The same content is accepted as JSON (keys as strings). Our CSV formats, one header line, ``#``
comment lines and blank lines ignored:

* capacity: ``client_id,compute_ms_per_sample,uplink_kbps,downlink_kbps`` (FedScale's units:
  inference ms per sample, kbit/s with 1 kbit = 1024 bit);
* availability: ``client_id,start_s,end_s[,period_s]``, one row per online interval.

Every error names the file and, for CSV and JSON, the line. Pickles are read with an unpickler
that only builds plain containers and numbers (no code runs from a trace file).
"""

from __future__ import annotations

import csv
import io
import json
import math
import pickle
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hierfl.config.files import display_path

__all__ = ["Capacity", "Availability", "TraceError", "ClientId", "load_capacity", "load_availability",
           "write_capacity_csv", "write_capacity_fedscale", "write_availability_csv",
           "write_availability_fedscale", "CAPACITY_COLUMNS", "AVAILABILITY_COLUMNS", "KBIT"]

ClientId = int | str
KBIT = 1024  # bits per FedScale kbit
CAPACITY_COLUMNS = ("client_id", "compute_ms_per_sample", "uplink_kbps", "downlink_kbps")
AVAILABILITY_COLUMNS = ("client_id", "start_s", "end_s")
_INT = re.compile(r"^-?\d+$")


class TraceError(ValueError):
    """A trace file that cannot be used; the message starts with the file (and line)."""


@dataclass(frozen=True)
class Capacity:
    """One client's compute and link figures, in FedScale's units."""

    compute_ms_per_sample: float   # inference latency per sample (training = 3×)
    uplink_kbps: float             # 1 kbit = 1024 bit
    downlink_kbps: float

    @property
    def speed_sps(self) -> float:
        """Training samples per second: ``1000 / (3 · compute_ms_per_sample)``."""
        return 1000.0 / (3.0 * self.compute_ms_per_sample)

    @property
    def uplink_mbps(self) -> float:
        """Megabit (10⁶ bit) per second."""
        return self.uplink_kbps * KBIT / 1e6

    @property
    def downlink_mbps(self) -> float:
        """Megabit (10⁶ bit) per second."""
        return self.downlink_kbps * KBIT / 1e6


@dataclass(frozen=True)
class Availability:
    """Online intervals ``[start, end)`` in seconds (sorted, disjoint), repeating every ``period_s``."""

    intervals: tuple[tuple[float, float], ...]
    period_s: float | None = None

    def as_array(self) -> np.ndarray:
        """(k, 2) float64."""
        return np.array(self.intervals, dtype=np.float64).reshape(-1, 2)

    def is_available(self, t: float) -> bool:
        """Whether the client is online at ``t`` (seconds)."""
        if self.period_s is not None:
            t = t % self.period_s
        return any(s <= t < e for s, e in self.intervals)


def _fail(where: str, line: int | None, message: str) -> TraceError:
    return TraceError(f"{where}:{line}: {message}" if line is not None else f"{where}: {message}")


def _positive(value: Any, what: str, where: str, line: int | None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _fail(where, line, f"{what} must be a number, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise _fail(where, line, f"{what} must be > 0, got {value!r}")
    return x


def _number(value: Any, what: str, where: str, line: int | None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _fail(where, line, f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise _fail(where, line, f"{what} must be finite, got {value!r}")
    return x


def _client_ids(raw: Iterable[Any]) -> list[ClientId]:
    ids = [str(x).strip() if not isinstance(x, int) or isinstance(x, bool) else x for x in raw]
    if all(isinstance(x, int) or _INT.match(str(x)) for x in ids):
        return [int(x) for x in ids]
    return [str(x) for x in ids]


# -- reading ----------------------------------------------------------------------------------------

class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, numbers and strings only (numpy scalars and arrays too)."""

    _ALLOWED = {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "int", "float", "str",
                                          "bool", "complex")} | {
        (m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("scalar", "_reconstruct")} | {
        ("numpy", "dtype"), ("numpy", "ndarray"), ("collections", "OrderedDict"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a trace file (only plain data)")


def _read_mapping(path: Path, where: str) -> tuple[dict[Any, Any], dict[str, int]]:
    """A FedScale trace (pickle or JSON) as a dict, plus the JSON line of each client key."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(where, None, f"cannot read the file: {exc}") from None
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            text = data.decode("utf-8")
            obj = json.loads(text)
        except UnicodeDecodeError as exc:
            raise _fail(where, None, f"not UTF-8 JSON: {exc}") from None
        except json.JSONDecodeError as exc:
            raise _fail(where, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        lines = {m.group(1): text.count("\n", 0, m.start()) + 1
                 for m in re.finditer(r'"([^"\\]*)"\s*:\s*\{', text)}
    else:
        try:
            obj = _PlainUnpickler(io.BytesIO(data)).load()
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
            raise _fail(where, None, f"not a FedScale trace (pickle or JSON): {type(exc).__name__}: {exc}") from None
        lines = {}
    if not isinstance(obj, Mapping) or not obj:
        raise _fail(where, None, f"a FedScale trace maps client ids to records; got {type(obj).__name__}"
                                 + (" (empty)" if isinstance(obj, Mapping) else ""))
    return dict(obj), lines


def _csv_rows(path: Path, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
              ) -> list[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(where, None, f"cannot read the file: {exc}") from None
    header: list[str] | None = None
    rows: list[tuple[int, dict[str, str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in next(csv.reader([line]))]
        if header is None:
            header = cells
            unknown = [c for c in header if c not in required + optional]
            missing = [c for c in required if c not in header]
            if unknown or missing or len(set(header)) != len(header):
                raise _fail(where, number, f"header must be {','.join(required)}"
                                           + (f"[,{','.join(optional)}]" if optional else "")
                                           + f"; got {','.join(header)}")
            continue
        if len(cells) != len(header):
            raise _fail(where, number, f"expected {len(header)} fields ({','.join(header)}), got {len(cells)}")
        row = dict(zip(header, cells))
        if not row["client_id"]:
            raise _fail(where, number, "client_id is empty")
        rows.append((number, row))
    if header is None:
        raise _fail(where, None, f"empty file; expected the header {','.join(required)}")
    if not rows:
        raise _fail(where, None, "no clients in the file")
    return rows


def _key_line(lines: dict[str, int], key: Any) -> int | None:
    return lines.get(str(key))


def load_capacity(path: str | Path, fmt: str) -> dict[ClientId, Capacity]:
    """Client id → :class:`Capacity` from a FedScale (``fmt='fedscale'``) or CSV (``'csv'``) file."""
    p = Path(path)
    where = display_path(p)
    out: dict[ClientId, Capacity] = {}
    if fmt == "csv":
        rows = _csv_rows(p, where, CAPACITY_COLUMNS)
        ids = _client_ids(r["client_id"] for _, r in rows)
        for cid, (line, row) in zip(ids, rows):
            if cid in out:
                raise _fail(where, line, f"client {cid!r} appears twice")
            out[cid] = Capacity(_positive(row["compute_ms_per_sample"], "compute_ms_per_sample", where, line),
                                _positive(row["uplink_kbps"], "uplink_kbps", where, line),
                                _positive(row["downlink_kbps"], "downlink_kbps", where, line))
        return out
    raw, lines = _read_mapping(p, where)
    for key, cid in zip(raw, _client_ids(raw)):
        rec, at = raw[key], _key_line(lines, key)
        if not isinstance(rec, Mapping):
            raise _fail(where, at, f"client {key!r}: expected {{'computation': ms, 'communication': kbps}}, "
                                     f"got {type(rec).__name__}")
        for field in ("computation", "communication"):
            if field not in rec:
                raise _fail(where, at, f"client {key!r}: missing field {field!r}")
        if cid in out:
            raise _fail(where, at, f"client {key!r} appears twice")
        comm = _positive(rec["communication"], f"client {key!r}: communication", where, at)
        out[cid] = Capacity(_positive(rec["computation"], f"client {key!r}: computation", where, at), comm, comm)
    return out


def _intervals(pairs: list[tuple[float, float, int | None]], period: float | None, where: str,
               who: str, clip: bool) -> tuple[tuple[float, float], ...]:
    """Check, sort, merge touching, and fit into [0, period)."""
    for start, end, at in pairs:
        if period is not None and not clip and end > period:
            raise _fail(where, at, f"{who}: interval [{start:g}, {end:g}) ends after period_s {period:g}")
        if start < 0:
            raise _fail(where, at, f"{who}: interval starts before 0 ({start:g})")
        if end <= start:
            raise _fail(where, at, f"{who}: interval end {end:g} <= start {start:g}")
    ordered = sorted(pairs, key=lambda p: (p[0], p[1]))
    merged: list[list[float]] = []
    for k, (start, end, at) in enumerate(ordered):
        if merged and start < merged[-1][1]:
            prev = ordered[k - 1]
            raise _fail(where, at, f"{who}: interval [{start:g}, {end:g}) overlaps [{prev[0]:g}, {prev[1]:g})")
        if merged and start == merged[-1][1]:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    if period is not None:
        merged = [[s, min(e, period)] for s, e in merged if s < period]
    return tuple((float(s), float(e)) for s, e in merged)


def load_availability(path: str | Path, fmt: str) -> dict[ClientId, Availability]:
    """Client id → :class:`Availability` from a FedScale (``'fedscale'``) or CSV (``'csv'``) file."""
    p = Path(path)
    where = display_path(p)
    out: dict[ClientId, Availability] = {}
    if fmt == "csv":
        rows = _csv_rows(p, where, AVAILABILITY_COLUMNS, ("period_s",))
        ids = _client_ids(r["client_id"] for _, r in rows)
        pairs: dict[ClientId, list[tuple[float, float, int | None]]] = {}
        periods: dict[ClientId, tuple[float | None, int]] = {}
        for cid, (row_line, row) in zip(ids, rows):
            at: int | None = row_line
            start = _number(row["start_s"], "start_s", where, at)
            end = _number(row["end_s"], "end_s", where, at)
            period = _positive(row["period_s"], "period_s", where, at) if row.get("period_s") else None
            if cid in periods and periods[cid][0] != period:
                raise _fail(where, at, f"client {cid!r}: period_s differs from line {periods[cid][1]}")
            periods.setdefault(cid, (period, row_line))
            pairs.setdefault(cid, []).append((start, end, at))
        for cid, items in pairs.items():
            period = periods[cid][0]
            out[cid] = Availability(_intervals(items, period, where, f"client {cid!r}", clip=False), period)
        return out
    raw, lines = _read_mapping(p, where)
    for key, cid in zip(raw, _client_ids(raw)):
        rec, at = raw[key], _key_line(lines, key)
        who = f"client {key!r}"
        if not isinstance(rec, Mapping):
            raise _fail(where, at, f"{who}: expected {{'active': [..], 'inactive': [..], 'finish_time': s}}, "
                                     f"got {type(rec).__name__}")
        for field in ("active", "inactive", "finish_time"):
            if field not in rec:
                raise _fail(where, at, f"{who}: missing field {field!r}")
        active, inactive = rec["active"], rec["inactive"]
        if not isinstance(active, (list, tuple, np.ndarray)) or not isinstance(inactive, (list, tuple, np.ndarray)):
            raise _fail(where, at, f"{who}: active and inactive must be lists of seconds")
        period = _positive(rec["finish_time"], f"{who}: finish_time", where, at)
        starts = [_number(x, f"{who}: active", where, at) for x in active]
        ends = [_number(x, f"{who}: inactive", where, at) for x in inactive]
        if len(starts) == len(ends) + 1:
            ends.append(period)  # online until the end of the trace
        elif len(starts) != len(ends):
            raise _fail(where, at, f"{who}: {len(starts)} active times but {len(ends)} inactive times "
                                     "(each session needs a start and an end)")
        if cid in out:
            raise _fail(where, at, f"client {key!r} appears twice")
        out[cid] = Availability(_intervals([(s, e, at) for s, e in zip(starts, ends)], period, where, who,
                                           clip=True), period)
    return out


# -- writing (round trips, and for users converting their own measurements) ----------------------------

def write_capacity_csv(path: str | Path, capacities: Mapping[ClientId, Capacity]) -> None:
    """Our capacity CSV."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CAPACITY_COLUMNS)
        for cid, c in capacities.items():
            w.writerow([cid, repr(c.compute_ms_per_sample), repr(c.uplink_kbps), repr(c.downlink_kbps)])


def write_capacity_fedscale(path: str | Path, capacities: Mapping[ClientId, Capacity], *, as_json: bool = False) -> None:
    """FedScale's ``client_device_capacity`` (pickle, or JSON); needs uplink == downlink."""
    data = {}
    for cid, c in capacities.items():
        if c.uplink_kbps != c.downlink_kbps:
            raise ValueError(f"client {cid!r}: FedScale's format has one bandwidth; uplink != downlink")
        data[cid] = {"computation": c.compute_ms_per_sample, "communication": c.uplink_kbps}
    _dump(path, data, as_json)


def write_availability_csv(path: str | Path, availability: Mapping[ClientId, Availability]) -> None:
    """Our availability CSV (with ``period_s`` when any client has one)."""
    periodic = any(a.period_s is not None for a in availability.values())
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([*AVAILABILITY_COLUMNS, "period_s"] if periodic else AVAILABILITY_COLUMNS)
        for cid, a in availability.items():
            for s, e in a.intervals:
                tail = ["" if a.period_s is None else repr(a.period_s)] if periodic else []
                w.writerow([cid, repr(s), repr(e), *tail])


def write_availability_fedscale(path: str | Path, availability: Mapping[ClientId, Availability], *,
                                as_json: bool = False) -> None:
    """FedScale's ``client_behave_trace`` (pickle, or JSON); every client needs a period."""
    data = {}
    for cid, a in availability.items():
        if a.period_s is None:
            raise ValueError(f"client {cid!r}: FedScale's format is periodic (finish_time); give period_s")
        data[cid] = {"duration": a.period_s, "inactive": [e for _, e in a.intervals], "finish_time": a.period_s,
                     "active": [s for s, _ in a.intervals], "model": "hierfl"}
    _dump(path, data, as_json)


def _dump(path: str | Path, data: dict[Any, Any], as_json: bool) -> None:
    if as_json:
        Path(path).write_text(json.dumps({str(k): v for k, v in data.items()}, indent=1), encoding="utf-8")
    else:
        with open(path, "wb") as fh:
            pickle.dump(data, fh)
