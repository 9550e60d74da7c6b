"""Trace files in a scenario: which file, which format, and how its clients map to the N devices.

``mapping`` (default ``first``):

* ``first`` — the first N client ids in sorted order (numeric when every id is an integer);
* ``random`` — N distinct clients drawn uniformly (seeded stream ``devices.capacity_trace`` or
  ``devices.availability_trace``), device ``i`` gets the ``i``-th draw;
* ``cycle`` — device ``i`` gets sorted client ``i mod C``: clients are reused when the trace has
  fewer clients (C) than devices (FedScale itself wraps client ids modulo the trace length).

A trace with fewer clients than devices and a mapping other than ``cycle`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PrivateAttr, ValidationInfo, field_serializer, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import ConfigError, Problem
from hierfl.config.files import display_path, read_cached, resolve_file
from hierfl.core.rng import stream
from hierfl.traces.formats import Availability, Capacity, ClientId, TraceError, load_capacity

__all__ = ["TraceFileConfig", "CapacityTraceConfig", "map_clients", "device_capacities",
           "availability_for_devices"]

Mapping = Literal["first", "random", "cycle"]


def map_clients(ids: Sequence[ClientId], n: int, mapping: str, rng: np.random.Generator | None,
                where: str) -> list[ClientId]:
    """The client id of each of ``n`` devices; raises :class:`TraceError` when there are too few clients."""
    ordered = sorted(ids)  # ids of one file are all int or all str
    c = len(ordered)
    if c == 0:
        raise TraceError(f"{where}: no clients in the trace")
    if c < n and mapping != "cycle":
        raise TraceError(f"{where}: the trace has {c} clients but devices.count is {n}; mapping {mapping!r} "
                         f"needs at least {n} clients. Use mapping: cycle (device i gets client i mod {c} in "
                         "sorted order, so clients are reused) or fewer devices")
    if mapping == "first":
        return ordered[:n]
    if mapping == "cycle":
        return [ordered[i % c] for i in range(n)]
    if rng is None:
        raise ValueError("mapping 'random' needs a random generator")
    return [ordered[int(k)] for k in rng.choice(c, size=n, replace=False)]


def device_capacities(trace: dict[ClientId, Capacity], n: int, mapping: str, rng: np.random.Generator | None,
                      where: str) -> dict[str, np.ndarray]:
    """``speed_sps``, ``uplink_mbps``, ``downlink_mbps`` per device from a capacity trace."""
    clients = map_clients(list(trace), n, mapping, rng, where)
    caps = [trace[c] for c in clients]
    return {"speed_sps": np.array([c.speed_sps for c in caps], dtype=np.float64),
            "uplink_mbps": np.array([c.uplink_mbps for c in caps], dtype=np.float64),
            "downlink_mbps": np.array([c.downlink_mbps for c in caps], dtype=np.float64)}


def availability_for_devices(trace: dict[ClientId, Availability], n: int, mapping: str,
                             rng: np.random.Generator | None, where: str) -> dict[int, Availability]:
    """Device index → :class:`Availability` (intervals and period) from an availability trace."""
    clients = map_clients(list(trace), n, mapping, rng, where)
    return {i: trace[c] for i, c in enumerate(clients)}


def _format_of(file: str) -> str:
    return "csv" if file.lower().endswith(".csv") else "fedscale"


class TraceFileConfig(ConfigModel):
    """A trace file: ``file`` (found like topology files), ``format`` and ``mapping``.

    Validation only resolves the file (it must exist); its content is parsed when a load-time
    check or a builder asks for it (:meth:`trace`), once per file through
    :func:`~hierfl.config.files.read_cached`. ``format`` defaults to ``csv`` for ``*.csv`` files
    and to ``fedscale`` (pickle or JSON) otherwise.
    """

    reader: ClassVar[Callable[[Path, str], dict[ClientId, Any]]] = staticmethod(load_capacity)

    file: str = Field(min_length=1, description="the trace file (relative to the scenario)")
    format: Literal["fedscale", "csv"] | None = Field(default=None, description="fedscale or csv (null = by the file's extension)")
    mapping: Mapping = Field(default="first", description="how trace rows map to devices: first, random (seeded), cycle")
    _path: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _default_format(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("format") is None and isinstance(data.get("file"), str):
            data = {**data, "format": _format_of(data["file"])}
        return data

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> TraceFileConfig:
        self._path = resolve_file(self.file, info.context)  # ValueError lists the places tried
        return self

    @field_serializer("file")
    def _absolute(self, value: str) -> str:
        # the resolved scenario (a run's config.yaml) names the file it read, so it runs again from anywhere
        return str(self._path) if self._path is not None else value

    @property
    def where(self) -> str:
        """The file, for messages."""
        return display_path(self._path) if self._path is not None else self.file

    def trace(self) -> dict[ClientId, Any]:
        """The parsed trace (client id → record), read once per file; raises :class:`TraceError`."""
        if self._path is None:  # built without validation (model_construct): find it now
            self._path = resolve_file(self.file)
        try:
            return read_cached(self._path, type(self).reader, self.format or _format_of(self.file))
        except OSError as exc:
            raise TraceError(f"{self.where}: cannot read the file: {exc}") from None

    def check(self, n: int, key: str) -> list[Problem]:
        """Problems of reading this trace (at ``key``) and of mapping it onto ``n`` devices (at ``key.mapping``)."""
        try:
            c = len(self.trace())
        except TraceError as exc:
            return [Problem(key, str(exc))]
        if c < n and self.mapping != "cycle":
            return [Problem(f"{key}.mapping", f"{self.where}: the trace has {c} clients but devices.count is {n}; "
                            f"mapping {self.mapping!r} needs at least {n}. Use mapping: cycle (device i gets client "
                            f"i mod {c} in sorted order) or fewer devices", self.mapping)]
        return []

    def _mapped(self, n: int, seed: int, stream_name: str, key: str,
                per_device: Callable[..., Any]) -> Any:
        rng = stream(seed, stream_name) if self.mapping == "random" else None
        try:
            return per_device(self.trace(), n, self.mapping, rng, self.where)
        except TraceError as exc:
            raise ConfigError([Problem(key, str(exc))]) from None


class CapacityTraceConfig(TraceFileConfig):
    """``devices.capacity_trace``: compute speed and link bandwidths of every device from a trace.

    Overrides ``speed_sps`` (= 1000 / (3 · computation ms)), ``uplink_mbps`` and ``downlink_mbps``
    (= kbps · 1024 / 10⁶) for every device; latency is still drawn from ``devices.latency_ms``.
    """

    def device_profiles(self, n: int, seed: int) -> dict[str, np.ndarray]:
        """Per-device ``speed_sps``, ``uplink_mbps``, ``downlink_mbps``; raises :class:`ConfigError`."""
        return self._mapped(n, seed, "devices.capacity_trace", "devices.capacity_trace",  # type: ignore[no-any-return]
                            device_capacities)
