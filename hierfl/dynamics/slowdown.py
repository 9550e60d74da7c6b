"""``slowdown`` events: the selected devices compute slower for a while (thermal throttling, contention)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PositiveFloat

from hierfl.core.dynamics import Window
from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft

__all__ = ["SlowdownEvent"]


@EVENTS.register
class SlowdownEvent(DeviceEvent):
    """The selected devices compute ``factor``× slower for ``for_s`` seconds (null = until the end)."""

    name: ClassVar[str] = "slowdown"

    factor: PositiveFloat = Field(description="compute becomes this many times slower (< 1 = faster)")
    for_s: PositiveFloat | None = Field(default=None, description="duration in virtual seconds (null = to the end of the run)")

    @classmethod
    def example(cls) -> SlowdownEvent:
        """A minimal valid config (conformance tests)."""
        return cls(factor=4.0, for_s=10.0)

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """A compute-slowdown window on each device."""
        for d in devices:
            draft.dyn.windows[d].append(Window(at_s, self.end(at_s, self.for_s), self.factor))
