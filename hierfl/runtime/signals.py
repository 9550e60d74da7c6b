"""SIGTERM handled exactly like Ctrl-C (reliability).

A batch scheduler, ``timeout`` or ``kill`` ends a run with SIGTERM. Python's default action kills
the process at once: no ``summary.json``, a ``trace.json`` without its closing bracket, and on
Ray a native crash dump. While :func:`sigterm_as_interrupt` is active, SIGTERM raises
``KeyboardInterrupt`` in the main thread instead, so the run stops the way Ctrl-C stops it: the
metrics so far, a valid trace, ``summary.json`` with ``status: interrupted``, exit status 130.

``ray.init`` installs its own SIGTERM handler in the driver; :func:`reassert` puts ours back
after it (the executor calls it once Ray is up).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["sigterm_as_interrupt", "reassert", "active"]

_active = False


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def active() -> bool:
    """Whether SIGTERM is being turned into ``KeyboardInterrupt`` now."""
    return _active


def reassert() -> None:
    """Re-install the handler if it is active (after a library such as Ray replaced it)."""
    if _active and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` (main thread only; a no-op elsewhere)."""
    global _active
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.signal(signal.SIGTERM, _raise_interrupt)
    _active = True
    try:
        yield
    finally:
        _active = False
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
