"""Protocol plug-in base: a protocol reacts to virtual-time events and calls pure math.

Like Ray Tune's schedulers, a protocol is a plain object with ``on_<event>`` callbacks that
tests drive without Ray. It never blocks on the real clock: it asks the context to start
work (which the executor runs in parallel) and schedules the event that consumes the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.core.engine import Event
from hierfl.registry import Registry

if TYPE_CHECKING:  # the runtime depends on protocols, never the reverse
    from hierfl.config.schema import Scenario
    from hierfl.emulator import Context

__all__ = ["PROTOCOLS", "ProtocolConfig", "Protocol"]

PROTOCOLS: Registry = Registry("protocol")


class ProtocolConfig(ConfigModel):
    """Base of every protocol's config model."""

    def check(self, scenario: Scenario) -> list[Problem]:
        """Cross-section problems (e.g. a hierarchical protocol without edge servers)."""
        return []

    def create(self, ctx: Context) -> Protocol:
        """Build the protocol object for one run."""
        raise NotImplementedError


class Protocol:
    """A federated-learning protocol driven by events."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def start(self) -> None:
        """Schedule the first events at virtual time 0."""
        raise NotImplementedError

    def handle(self, event: Event) -> None:
        """Dispatch ``event`` to ``on_<kind>``."""
        handler = getattr(self, "on_" + event.kind, None)
        if handler is None:
            raise RuntimeError(f"{type(self).__name__} has no handler for event {event.kind!r}")
        handler(event)

    def state(self) -> dict[str, Any]:
        """Serialisable protocol state (model handles excluded)."""
        return {}
