"""``leave`` and ``join`` events: the selected devices go offline, and come back."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PositiveFloat

from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft

__all__ = ["LeaveEvent", "JoinEvent"]


@EVENTS.register
class LeaveEvent(DeviceEvent):
    """The selected devices leave (unavailable) for ``for_s`` seconds, or until a ``join`` (null)."""

    name: ClassVar[str] = "leave"
    churn: ClassVar[bool] = True
    takes_devices_offline: ClassVar[bool] = True

    for_s: PositiveFloat | None = Field(default=None, description="how long the devices stay away (null = until a join event)")

    @classmethod
    def example(cls) -> LeaveEvent:
        """A minimal valid config (conformance tests)."""
        return cls(for_s=10.0)

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """A timed absence, or an open one that a later ``join`` (or the end of the run) closes."""
        for d in devices:
            if self.for_s is not None:
                draft.away[d].append((at_s, at_s + self.for_s))
            elif d not in draft.open_leave:
                draft.open_leave[d] = at_s


@EVENTS.register
class JoinEvent(DeviceEvent):
    """The selected devices that left come back."""

    name: ClassVar[str] = "join"
    churn: ClassVar[bool] = True

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """Close an open leave at ``at_s``; a join also ends a timed leave early."""
        for d in devices:
            if d in draft.open_leave:
                draft.away[d].append((draft.open_leave.pop(d), at_s))
            draft.away[d] = [(s, min(e, at_s) if s < at_s else e) for s, e in draft.away[d]]
