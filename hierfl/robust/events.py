"""``attack`` events: from ``at_s`` on (for ``for_s`` seconds, or for good) the selected devices are
Byzantine and send what their ``behavior`` makes of their update (:data:`~hierfl.robust.behaviours.BEHAVIORS`).

Only the update changes: the jobs take the same virtual time and the transfers the same bytes, so
an attack never moves an event (the timing of a run with and without it is identical).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PositiveFloat

from hierfl.dynamics.events import EVENTS, DeviceEvent, DynamicsDraft
from hierfl.robust.behaviours import BEHAVIORS, SignFlip

__all__ = ["AttackEvent"]


@EVENTS.register
class AttackEvent(DeviceEvent):
    """``{at_s: 0, attack: {select: {fraction: 0.2}, behavior: {name: sign_flip, s: 1}, for_s: null}}``."""

    name: ClassVar[str] = "attack"

    behavior: BEHAVIORS.union() = Field(description="what the selected devices send instead of their honest update")  # type: ignore[valid-type]
    for_s: PositiveFloat | None = Field(default=None, description="duration in virtual seconds (null = to the end of the run)")

    @classmethod
    def example(cls) -> AttackEvent:
        """A minimal valid config (conformance tests)."""
        return cls(behavior=SignFlip(), for_s=10.0)

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """A behaviour window on each device (a later event overrides an earlier one where they overlap)."""
        end = self.end(at_s, self.for_s)
        for d in devices:
            draft.dyn.attacks.setdefault(int(d), []).append((at_s, end, self.behavior))
