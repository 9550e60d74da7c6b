"""Heterogeneity in time, as plug-ins: availability models and scenario event kinds.

Importing this package registers every shipped kind, in the order the ``events:`` schema lists
them (:data:`EVENTS` keeps that order whichever module is imported first). A new event kind is
one module here with one class registered in :data:`EVENTS`; the kinds of a cross-cutting
feature live in its own package and are imported here: ``edge_fail`` and ``cloud_fail`` in
:mod:`hierfl.faults.events`, ``attack`` in :mod:`hierfl.robust.events`.
"""

# isort: off  -- the order of registration (EVENTS lists the shipped kinds in its declared order)
from hierfl.dynamics import slowdown  # noqa: F401
from hierfl.dynamics import links  # noqa: F401
from hierfl.dynamics import churn  # noqa: F401
from hierfl.faults import events as _fault_events  # noqa: F401
from hierfl.robust import events as _attack_events  # noqa: F401
# isort: on
from hierfl.dynamics.availability import (
    AVAILABILITY,
    AlwaysAvailability,
    AvailabilityConfig,
    AvailabilityTraceConfig,
    MarkovAvailability,
)
from hierfl.dynamics.churn import JoinEvent, LeaveEvent
from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft, EventKind, Facts, Selector, event_entry_field, event_entry_model
from hierfl.dynamics.links import EdgeLinkEvent, LinkEvent
from hierfl.dynamics.slowdown import SlowdownEvent

__all__ = ["AVAILABILITY", "AlwaysAvailability", "AvailabilityConfig", "AvailabilityTraceConfig", "MarkovAvailability",
           "EVENTS", "DeviceEvent", "DynamicsDraft", "EventKind", "Facts", "Selector", "event_entry_model", "event_entry_field",
           "SlowdownEvent", "LinkEvent", "EdgeLinkEvent", "LeaveEvent", "JoinEvent"]
