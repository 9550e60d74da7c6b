"""Reading run directories (``metrics.jsonl``, ``summary.json``, ``config.yaml``, ``trace.json``).

Pure file parsing with no plotting dependency; see ARCHITECTURE.md §7 for the file contract.
A run that crashed leaves a truncated last metrics line and an unterminated trace array; both
are read up to the last complete record, while damage anywhere else is reported with the file
and line number.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = [
    "RunReadError",
    "X_AXES",
    "read_metrics",
    "read_summary",
    "run_name",
    "run_labels",
    "eval_series",
    "read_trace",
]

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
TRACE_FILE = "trace.json"

#: Allowed values of the ``x`` argument and the metrics key each one reads.
X_AXES: dict[str, str] = {"time": "t", "round": "round"}

# Keys of an eval line that are bookkeeping, not metrics worth plotting.
_NON_METRIC_KEYS = frozenset({"event"})


class RunReadError(ValueError):
    """A run-directory file is missing, corrupt or lacks what was asked for."""


def _read_metrics_numbered(run_dir: Path) -> list[tuple[int, dict[str, Any]]]:
    """Parse ``metrics.jsonl`` into ``(line_number, record)`` pairs (1-based line numbers)."""
    path = Path(run_dir) / METRICS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunReadError(f"{path}: file not found (is {Path(run_dir)} a run directory?)") from None
    except OSError as exc:
        raise RunReadError(f"{path}: cannot read: {exc}") from exc

    lines = [(no, line) for no, line in enumerate(text.splitlines(), start=1) if line.strip()]
    records: list[tuple[int, dict[str, Any]]] = []
    for index, (lineno, line) in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if index == len(lines) - 1:
                # A crashed run may have written only part of its last line.
                break
            raise RunReadError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise RunReadError(
                f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}"
            )
        records.append((lineno, record))
    return records


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Read every record of a run's ``metrics.jsonl``.

    Parameters
    ----------
    run_dir : Path
        The run directory.

    Returns
    -------
    list of dict
        One dict per line, in file order. Blank lines and an unparsable final line (a run
        that crashed mid-write) are skipped.

    Raises
    ------
    RunReadError
        If the file is missing, or a line other than the last is not a JSON object; the
        message names the file and line number.
    """
    return [record for _, record in _read_metrics_numbered(run_dir)]


def read_summary(run_dir: Path) -> dict[str, Any]:
    """Read a run's ``summary.json``.

    Parameters
    ----------
    run_dir : Path
        The run directory.

    Returns
    -------
    dict
        The summary, or ``{}`` if the file does not exist (a run still going or crashed).

    Raises
    ------
    RunReadError
        If the file exists but is not a JSON object.
    """
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunReadError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    if not isinstance(summary, dict):
        raise RunReadError(f"{path}: expected a JSON object, got {type(summary).__name__}")
    return summary


def _dir_name(run_dir: Path) -> str:
    """The last component of a directory path, resolving ``.`` and the like."""
    path = Path(run_dir)
    return path.name or path.resolve().name


def run_name(run_dir: Path) -> str:
    """Return the run's name.

    Parameters
    ----------
    run_dir : Path
        The run directory.

    Returns
    -------
    str
        The top-level ``name`` of ``config.yaml`` if it is a non-empty string, otherwise the
        directory name.

    Raises
    ------
    RunReadError
        If ``config.yaml`` exists but is not valid YAML.
    """
    path = Path(run_dir) / CONFIG_FILE
    if path.is_file():
        try:
            config = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise RunReadError(f"{path}: invalid YAML: {exc}") from exc
        if isinstance(config, dict):
            name = config.get("name")
            if isinstance(name, str) and name.strip():
                return name
    return _dir_name(run_dir)


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """Return one distinct legend label per run directory.

    Parameters
    ----------
    run_dirs : sequence of Path
        The run directories, in plotting order.

    Returns
    -------
    list of str
        The run name, or for runs sharing a name ``"name (dir)"`` where ``dir`` is the
        shortest path suffix that tells them apart (``#k`` is appended if even the paths are
        identical).
    """
    paths = [Path(d) for d in run_dirs]
    names = [run_name(p) for p in paths]
    labels = list(names)
    for name in set(names):
        group = [i for i, n in enumerate(names) if n == name]
        if len(group) < 2:
            continue
        parts = [paths[i].resolve().parts for i in group]
        depth = 1
        longest = max(len(p) for p in parts)
        distinct = len(set(parts))
        while depth < longest and len({p[-depth:] for p in parts}) < distinct:
            depth += 1
        for i, p in zip(group, parts):
            labels[i] = f"{name} ({Path(*p[-depth:]).as_posix()})"
    counts = {label: labels.count(label) for label in labels}
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):
        if counts[label] > 1:  # the same directory passed twice
            seen[label] = seen.get(label, 0) + 1
            labels[i] = f"{label} #{seen[label]}"
    return labels


def _as_float(value: Any) -> float:
    """Convert a JSON number (or null) to float, null becoming NaN."""
    return float("nan") if value is None else float(value)


def eval_series(
    run_dir: Path, metric: str = "accuracy", x: str = "time"
) -> tuple[np.ndarray, np.ndarray]:
    """Return a metric over time or cloud rounds from the run's evaluation lines.

    Parameters
    ----------
    run_dir : Path
        The run directory.
    metric : str
        Key of the ``eval`` lines to read, e.g. ``"accuracy"``, ``"loss"``, ``"bytes_cloud"``.
    x : {"time", "round"}
        ``"time"`` reads ``t`` (virtual seconds); ``"round"`` reads ``round`` (cloud
        aggregations so far).

    Returns
    -------
    (xs, ys) : tuple of numpy.ndarray
        Float arrays of equal length, in file order, one entry per ``eval`` line that carries
        ``metric``.

    Raises
    ------
    ValueError
        If ``x`` is not one of the allowed values.
    RunReadError
        If the run has no ``eval`` lines, no ``eval`` line carries ``metric`` (the message lists
        the metrics that exist), or an ``eval`` line lacks the x key or has a non-numeric value.
    """
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not supported; allowed: {', '.join(map(repr, X_AXES))}")
    x_key = X_AXES[x]
    path = Path(run_dir) / METRICS_FILE
    evals = [(no, r) for no, r in _read_metrics_numbered(run_dir) if r.get("event") == "eval"]
    if not evals:
        raise RunReadError(f"{path}: no 'eval' lines (the run has not evaluated yet?)")
    with_metric = [(no, r) for no, r in evals if metric in r]
    if not with_metric:
        available = sorted({k for _, r in evals for k in r if k not in _NON_METRIC_KEYS})
        raise RunReadError(
            f"{path}: no 'eval' line has metric {metric!r}; available: {', '.join(available)}"
        )
    xs: list[float] = []
    ys: list[float] = []
    for lineno, record in with_metric:
        if x_key not in record:
            raise RunReadError(f"{path}:{lineno}: 'eval' line lacks {x_key!r} (needed for x={x!r})")
        try:
            xs.append(_as_float(record[x_key]))
            ys.append(_as_float(record[metric]))
        except (TypeError, ValueError) as exc:
            raise RunReadError(
                f"{path}:{lineno}: non-numeric {x_key!r}={record[x_key]!r} or "
                f"{metric!r}={record[metric]!r}"
            ) from exc
    return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


def _skip_ws(text: str, pos: int) -> int:
    """Index of the first non-whitespace character at or after ``pos``."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _line_of(text: str, pos: int) -> int:
    """1-based line number of character ``pos``."""
    return text.count("\n", 0, pos) + 1


def _more_events_after(text: str, pos: int, decoder: json.JSONDecoder) -> bool:
    """Whether a complete JSON object starts somewhere after ``pos`` (damage is not at the end)."""
    start = text.find("{", pos + 1)
    while start != -1:
        try:
            decoder.raw_decode(text, start)
            return True
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return False


def read_trace(run_dir: Path) -> list[dict[str, Any]]:
    """Read a run's ``trace.json`` (Chrome trace-event array format).

    Parameters
    ----------
    run_dir : Path
        The run directory.

    Returns
    -------
    list of dict
        The trace events in file order. A crashed run's file is accepted: the closing ``]``
        may be missing, a trailing comma may follow the last event, and a final event cut off
        mid-write is dropped. The ``{"traceEvents": [...]}`` object form is accepted too.

    Raises
    ------
    RunReadError
        If the file is missing, or is damaged anywhere but at its end; the message names the
        file and line.
    """
    path = Path(run_dir) / TRACE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunReadError(f"{path}: file not found (was tracing enabled for this run?)") from None
    except OSError as exc:
        raise RunReadError(f"{path}: cannot read: {exc}") from exc

    pos = _skip_ws(text, 0)
    if pos < len(text) and text[pos] == "{":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RunReadError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        events = whole.get("traceEvents") if isinstance(whole, dict) else None
        if not isinstance(events, list):
            raise RunReadError(f"{path}: JSON object without a 'traceEvents' list")
        return [e for e in events if isinstance(e, dict)]
    if pos >= len(text) or text[pos] != "[":
        raise RunReadError(f"{path}:{_line_of(text, pos)}: expected '[' to start the event array")

    decoder = json.JSONDecoder()
    events_out: list[dict[str, Any]] = []
    pos += 1
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text) or text[pos] == "]":
            break  # closed, or the run stopped before writing ']'
        try:
            event, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if _more_events_after(text, pos, decoder):
                raise RunReadError(
                    f"{path}:{_line_of(text, pos)}: invalid trace event: {exc.msg}"
                ) from exc
            break  # the last event was cut off mid-write
        if not isinstance(event, dict):
            raise RunReadError(
                f"{path}:{_line_of(text, pos)}: expected a JSON object, got {type(event).__name__}"
            )
        events_out.append(event)
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] != "]":
            raise RunReadError(
                f"{path}:{_line_of(text, pos)}: expected ',' or ']' after an event, "
                f"got {text[pos]!r}"
            )
    return events_out
