"""The world as it is now: who is online, which servers are up, how slow each device is at this
instant, and what a job or an upload would take if it started now (``env.live``).

The static world (:class:`~hierfl.core.world.World`) says what was built; this view adds the run's
dynamics at the current virtual time. Every query costs what it says: ``available()`` with no
argument and ``online_count`` read a kept index (:class:`~hierfl.core.dynamics.OnlineIndex`), never
a scan of the population.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from hierfl.core.dynamics import OnlineIndex, factor_at

if TYPE_CHECKING:
    from hierfl.core.jobs import Endpoint
    from hierfl.core.work import TrainSpec

__all__ = ["Live"]


class Live:
    """Queries about devices and servers at the current virtual time (see the module docstring)."""

    def __init__(self, world: Any, dyn: Any, queue: Any, transfers: Any, spec: TrainSpec) -> None:
        self._world = world
        self.dyn = dyn
        self._queue = queue
        self._transfers = transfers
        self._spec = spec
        # everyone's online state, kept by a heap of state changes (None: nobody is ever offline)
        n = world.num_devices
        self._online = None if dyn.availability.trivial else OnlineIndex(dyn.availability, range(n))

    @property
    def now(self) -> float:
        """The virtual time now."""
        return float(self._queue.now)

    @property
    def churn(self) -> bool:
        """Whether any device can be offline at some time."""
        return not self.dyn.availability.trivial

    def is_up(self, device: int) -> bool:
        """Whether ``device`` is available now."""
        return self.dyn.availability.is_up(device, self.now)

    def server_up(self, server: Endpoint) -> bool:
        """Whether the edge server or cloud ``server`` is up now."""
        return server not in self._transfers.down

    def _everyone(self) -> OnlineIndex:
        assert self._online is not None
        self._online.advance(self.now)
        return self._online

    def available(self, devices: Any = None) -> list[int]:
        """The devices (all, or those given) that are available now, sorted."""
        if devices is None:
            if self._online is None:
                return list(range(self._world.num_devices))
            return self._everyone().online()
        if self._online is None:
            return sorted(int(d) for d in devices)
        return sorted(int(d) for d in devices if self.dyn.availability.is_up(int(d), self.now))

    def online_count(self) -> int:
        """How many devices are online now."""
        return self._world.num_devices if self._online is None else self._everyone().count_online

    def online_index(self, devices: Any = ()) -> OnlineIndex:
        """An index of the online state of ``devices``, starting now."""
        return OnlineIndex(self.dyn.availability, devices, now=self.now)

    def next_up(self, devices: Any = None) -> float:
        """The earliest time ≥ now at which one of ``devices`` (all by default) is available."""
        if devices is None:
            return self.now if self._online is None else self._everyone().next_online()
        return min((self.dyn.availability.next_up(int(d), self.now) for d in devices), default=math.inf)

    def compute_factor(self, device: int) -> float:
        """``device``'s slowdown factor now."""
        return factor_at(self.dyn.windows[device], self.now)

    def current_compute_s(self, spec: TrainSpec | None = None) -> np.ndarray:
        """(N,) seconds one job of ``spec`` would take on each device if started now (at today's slowdown)."""
        spec = spec or self._spec
        return np.array([self._world.compute_s(d, spec) * factor_at(self.dyn.windows[d], self.now)
                         for d in range(self._world.num_devices)])

    def current_upload_s(self) -> np.ndarray:
        """(N,) seconds one model upload device → its server would take if started now (no contention)."""
        return np.array([self._world.upload_s(d) for d in range(self._world.num_devices)])
