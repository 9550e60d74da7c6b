"""Non-finite updates left out under ``robustness.on_nonfinite: drop`` (the section: :mod:`hierfl.scenario.nonfinite`).

A job whose result holds NaN or Inf is remembered by its handle (weakly, where the handle allows);
every aggregation it is given to leaves it out, counts it once and reports it once. An aggregation
point whose every update of a round was left out keeps the model it started from.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from hierfl.core.jobs import Job, Term
from hierfl.driver.errors import DivergedError
from hierfl.env.records import NonFiniteUpdate

if TYPE_CHECKING:
    from hierfl.output.telemetry import RunTelemetry

__all__ = ["NonFinite"]


class NonFinite:
    """The run's dropped non-finite updates and, per aggregation point, what it kept and left out."""

    def __init__(self, drop: bool, telemetry: RunTelemetry, clock: Any) -> None:
        self.drop = drop
        self.telemetry = telemetry
        self.counters = telemetry.counters
        self._clock = clock
        self._bad: dict[int, list[Any]] = {}
        self._folded: dict[tuple[str, int], list[int]] = {}

    @property
    def now(self) -> float:
        """The virtual time now."""
        return float(self._clock.now)

    def __bool__(self) -> bool:
        """Whether any update was dropped so far (nothing to filter otherwise)."""
        return bool(self._bad)

    def mark(self, job: Job) -> None:
        """``job``'s result holds NaN or Inf and is left out of every aggregation it is given to."""
        handle = job.params
        try:  # a weak reference where the handle allows one: a dropped update is not kept alive by this
            ref: Any = weakref.ref(handle)
        except TypeError:
            ref = lambda h=handle: h  # noqa: E731
        self._bad[id(handle)] = [ref, job.device, job.job, False]

    def marked(self, handle: Any) -> bool:
        """Whether ``handle`` is a non-finite update to leave out (nothing counted: a transfer channel asks)."""
        entry = self._bad.get(id(handle)) if self._bad else None
        return entry is not None and entry[0]() is handle

    def left_out(self, handle: Any, tier: str) -> bool:
        """Whether ``handle`` is a dropped non-finite update (counted and reported the first time)."""
        if not self._bad or handle is None:
            return False
        entry = self._bad.get(id(handle))
        if entry is None:
            return False
        if entry[0]() is not handle:  # a new object at a recycled address
            del self._bad[id(handle)]
            return False
        if not entry[3]:
            entry[3] = True
            self.counters["nonfinite_dropped"] = self.counters.get("nonfinite_dropped", 0) + 1
            self.telemetry.instant(("device", entry[1]), "nonfinite_dropped", self.now, job=entry[2], tier=tier)
            self.telemetry.record(NonFiniteUpdate(entry[1], entry[2], tier))
        return True

    def fold(self, key: tuple[str, int], handle: Any) -> bool:
        """Count an update given to aggregator ``key``; False if it is left out (non-finite, ``drop``)."""
        if not self.drop:
            return True
        kept = not self.left_out(handle, key[0])
        self._folded.setdefault(key, [0, 0])[0 if kept else 1] += 1
        return kept

    def nothing_folded(self, key: tuple[str, int]) -> bool:
        """Whether every update given to ``key`` since its last commit was left out (and resets the count)."""
        kept, out = self._folded.pop(key, (0, 0))
        return out > 0 and kept == 0

    def finite_terms(self, tier: str, terms: list[Term]) -> list[Term]:
        """``terms`` without those built on a dropped update.

        A delta term ``c·(a − b)`` is simply left out (as if that update never arrived). Plain terms
        ``c·a`` form a mix (an asynchronous ``(1−α)·x + α·y``): the kept ones are rescaled to the mix's
        total, so leaving ``y`` out gives ``x``, not ``(1−α)·x``.
        """
        if not self._bad:
            return terms
        keep: list[Term] = []
        plain_total = plain_kept = 0.0
        dropped = False
        for c, a, b in terms:
            out = self.left_out(a, tier) or self.left_out(b, tier)
            if b is None:
                plain_total += c
            if out:
                dropped = True
                continue
            if b is None:
                plain_kept += c
            keep.append((c, a, b))
        if not dropped:
            return terms
        if plain_total != plain_kept:
            if plain_kept == 0:
                raise DivergedError(f"t={self.now:.6g}s {tier}: every model of an aggregation is a dropped non-finite "
                                    "update; nothing finite is left to aggregate")
            scale = plain_total / plain_kept
            keep = [(c * scale, a, b) if b is None else (c, a, b) for c, a, b in keep]
        return keep
