"""Watching the cluster under a run from a thread of its own.

When the raylet of the driver's node dies, Ray's core worker ends the driver's process the next
time it touches that raylet's object store: exit status 1, no Python exception, no ``finally``, no
``atexit`` (its log says "The connection to the plasma store is failed. Terminate the process").
A loss must therefore be seen from outside the calls into Ray: :class:`ClusterWatch` runs the
probe of the executor's cluster (:meth:`~hierfl.runtime.executor.ClusterLink.probe`) every
``every_s`` seconds on a daemon thread and calls ``on_lost`` once, with the probe's line, when the
cluster stops answering.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["ClusterWatch"]


class ClusterWatch:
    """Runs ``probe`` every ``every_s`` s until it reports a loss (then ``on_lost(line)``, once) or :meth:`stop`."""

    def __init__(self, probe: Callable[[], str | None], on_lost: Callable[[str], None], every_s: float = 0.2) -> None:
        self.probe, self.on_lost, self.every_s = probe, on_lost, every_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hierfl-cluster-watch", daemon=True)

    def start(self) -> ClusterWatch:
        """Begin watching (returns at once)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (idempotent; waits for a probe under way, at most a few seconds)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                line = self.probe()
            except Exception:  # noqa: BLE001 - a probe that fails to run says nothing about the cluster
                continue
            if line is not None and not self._stop.is_set():
                self.lost = line
                self.on_lost(line)
                return
