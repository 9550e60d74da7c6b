"""Availability models (``devices.availability``): when each device is online, as plug-ins by name.

* ``always`` — every device is always available (the default);
* ``markov`` — a two-state on/off Markov process per device, exponential up and down periods,
  drawn from the stream ``(seed, "availability", device)``;
* ``trace`` — online intervals per device from a FedScale or CSV availability trace
  (:mod:`hierfl.traces`).

A model's hooks: :meth:`AvailabilityConfig.timelines` (the builder's per-device timelines, None =
always up), :meth:`AvailabilityConfig.problems` (load-time checks against the devices) and the
class flag ``churn`` (devices may go offline: protocols that do not model drop-outs refuse it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.core.dynamics import IntervalTimeline, MarkovTimeline
from hierfl.core.rng import stream
from hierfl.traces.config import TraceFileConfig, availability_for_devices
from hierfl.traces.formats import Availability, load_availability

__all__ = ["AVAILABILITY", "steady_names", "AvailabilityConfig", "AlwaysAvailability", "MarkovAvailability",
           "AvailabilityTraceConfig", "Timeline", "ALWAYS"]

AVAILABILITY: Registry = Registry("availability model")

Timeline = IntervalTimeline | MarkovTimeline | None
"""A device's base availability: None is always up."""

ALWAYS = "always"
"""The label of a device that is always available (``devices.csv``)."""


class AvailabilityConfig(ConfigModel):
    """Base of the availability models."""

    churn: ClassVar[bool] = True
    """Whether devices may go offline under this model."""

    @property
    def label(self) -> str:
        """What ``devices.csv`` says about a device this model gives a timeline."""
        return str(getattr(self, "name"))

    def timelines(self, n: int, tiers: np.ndarray | None, seed: int) -> list[Timeline]:
        """Each device's base timeline (None: always up); raises :class:`ConfigError` naming the key."""
        return [None] * n

    def labels(self, timelines: Sequence[Timeline]) -> list[str]:
        """Per device: this model's label, or ``always`` where it gave no timeline."""
        return [self.label if t is not None else ALWAYS for t in timelines]

    def problems(self, n: int, tiers: Sequence[str], key: str) -> list[Problem]:
        """Load-time problems for ``n`` devices whose known tiers are ``tiers`` (``key``: this section)."""
        return []


def steady_names() -> list[str]:
    """Names of the models under which no device ever goes offline (``churn`` false)."""
    return [n for n in AVAILABILITY.names() if not AVAILABILITY.get(n).churn]


@AVAILABILITY.register
class AlwaysAvailability(AvailabilityConfig):
    """Every device is always available."""

    churn: ClassVar[bool] = False

    name: Literal["always"] = "always"


@AVAILABILITY.register
class MarkovAvailability(AvailabilityConfig):
    """Two-state on/off Markov process per device: exponential up and down periods."""

    name: Literal["markov"] = "markov"
    mean_up_s: PositiveFloat = Field(description="mean online period, virtual seconds (exponential)")
    mean_down_s: PositiveFloat = Field(description="mean offline period, virtual seconds (exponential)")
    start: Literal["stationary", "up"] = Field(
        default="stationary", description="first state: drawn with P(up) = up/(up+down), or up")
    tiers: list[str] | None = Field(default=None, description="only devices of these tiers churn (null = all)")

    @classmethod
    def example(cls) -> MarkovAvailability:
        """A minimal valid config (conformance tests)."""
        return cls(mean_up_s=30.0, mean_down_s=10.0)

    def timelines(self, n: int, tiers: np.ndarray | None, seed: int) -> list[Timeline]:
        """One Markov timeline per churning device, from the stream ``(seed, "availability", d)``."""
        out: list[Timeline] = [None] * n
        for d in range(n):
            if self.tiers is None or (tiers is not None and str(tiers[d]) in self.tiers):
                out[d] = MarkovTimeline(self.mean_up_s, self.mean_down_s, stream(seed, "availability", d),
                                        start_up=True if self.start == "up" else None)
        return out

    def problems(self, n: int, tiers: Sequence[str], key: str) -> list[Problem]:
        """Tiers named in ``tiers`` must exist."""
        allowed = ", ".join(tiers)
        return [Problem(f"{key}.tiers", f"unknown tier; allowed: {allowed}", name)
                for name in self.tiers or [] if name not in tiers and name != "custom"]


@AVAILABILITY.register
class AvailabilityTraceConfig(TraceFileConfig, AvailabilityConfig):
    """``{name: trace, file: …}``: online intervals per device from an availability trace."""

    reader: ClassVar[Any] = staticmethod(load_availability)

    name: Literal["trace"] = "trace"

    @classmethod
    def example(cls) -> AvailabilityTraceConfig:
        """The shipped example trace (conformance tests)."""
        return cls.model_validate({"name": "trace", "file": "traces/example_availability.csv", "mapping": "cycle"})

    def device_intervals(self, n: int, seed: int, key: str = "devices.availability") -> dict[int, Availability]:
        """Device index → :class:`Availability`; raises :class:`ConfigError` naming ``key``."""
        return self._mapped(n, seed, "devices.availability_trace", key,  # type: ignore[no-any-return]
                            availability_for_devices)

    def timelines(self, n: int, tiers: np.ndarray | None, seed: int) -> list[Timeline]:
        """The trace's intervals (repeating every ``period_s`` when the trace has one)."""
        out: list[Timeline] = [None] * n
        for d, a in self.device_intervals(n, seed).items():
            out[d] = IntervalTimeline(list(a.intervals), a.period_s)
        return out

    def problems(self, n: int, tiers: Sequence[str], key: str) -> list[Problem]:
        """The file must parse and have enough clients for ``mapping``."""
        return self.check(n, key)
