"""Heterogeneity in time, as plug-ins: availability models and scenario event kinds.

Importing this package registers every shipped kind (in the order the ``events:`` schema lists
them). A new event kind is one module here with one class registered in :data:`EVENTS`.
"""

# isort: off  -- registration order is the order in which `events:` entries list their kinds
from hierfl.dynamics import slowdown  # noqa: F401
from hierfl.dynamics import links  # noqa: F401
from hierfl.dynamics import churn  # noqa: F401
from hierfl.dynamics import faults  # noqa: F401
from hierfl.dynamics import attack  # noqa: F401
# isort: on
from hierfl.dynamics.availability import (
    AVAILABILITY,
    AlwaysAvailability,
    AvailabilityConfig,
    AvailabilityTraceConfig,
    MarkovAvailability,
)
from hierfl.dynamics.attack import AttackEvent
from hierfl.dynamics.churn import JoinEvent, LeaveEvent
from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft, EventKind, Facts, Selector, event_entry_model
from hierfl.dynamics.faults import CloudFailEvent, EdgeFailEvent
from hierfl.dynamics.links import EdgeLinkEvent, LinkEvent
from hierfl.dynamics.slowdown import SlowdownEvent

__all__ = ["AVAILABILITY", "AlwaysAvailability", "AvailabilityConfig", "AvailabilityTraceConfig", "MarkovAvailability",
           "EVENTS", "DeviceEvent", "DynamicsDraft", "EventKind", "Facts", "Selector", "event_entry_model",
           "SlowdownEvent", "LinkEvent", "EdgeLinkEvent", "LeaveEvent", "JoinEvent",
           "EdgeFailEvent", "CloudFailEvent", "AttackEvent"]
