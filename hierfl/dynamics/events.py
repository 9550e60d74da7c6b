"""Scenario events (``events:``): changes at given virtual times, one registered plug-in per kind.

An entry of ``events:`` is ``{at_s: <seconds>, <kind>: {...}}`` with exactly one kind. Each kind
is a config class registered in :data:`EVENTS` under its YAML key, with two hooks:

* :meth:`EventKind.problems` — load-time checks against the scenario's devices and edge servers;
* :meth:`EventKind.apply` — what the event does to the :class:`~hierfl.core.dynamics.Dynamics`
  being built (slowdown windows, link windows, away intervals), called in time order.

Class flags say what protocols must support: ``churn`` (devices go offline or come back) and
``takes_devices_offline``. Device selectors are resolved once, at build time, from the stream
``(seed, "events", i)`` of event ``i``, so which devices an event touches is part of the
scenario's deterministic world. Adding a kind: one module with one registered class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt, create_model, model_validator

from hierfl.config.base import ConfigModel, rename_alias
from hierfl.config.errors import Problem
from hierfl.config.late import Late
from hierfl.config.registry import Registry
from hierfl.core.dynamics import Availability, Dynamics, merge_intervals, select
from hierfl.core.rng import stream
from hierfl.core.world import World

__all__ = ["EVENTS", "EventKind", "DeviceEvent", "Selector", "Facts", "DynamicsDraft", "EventEntry",
           "event_entry_model", "event_entry_field", "resolve_selector"]

# the order in which an ``events:`` entry lists its kinds (its fields, as written to config.yaml),
# kept whatever module registers first (the fault and attack kinds live in their feature packages)
EVENTS: Registry = Registry("event kind", order=("slowdown", "link", "edge_link", "leave", "join",
                                                 "edge_fail", "cloud_fail", "attack"))


class Selector(ConfigModel):
    """Which devices an event touches: the intersection of the given criteria, then a seeded sample."""

    ids: list[NonNegativeInt] | None = Field(default=None, description="device ids")
    tier: str | list[str] | None = Field(default=None, description="a tier name or a list of them")
    edge: NonNegativeInt | list[NonNegativeInt] | None = Field(default=None, description="edge server (cluster) ids")
    fraction: float | None = Field(default=None, gt=0.0, le=1.0, description="then a seeded sample of this share of the matching devices")
    count: PositiveInt | None = Field(default=None, description="then a seeded sample of this many")

    @model_validator(mode="before")
    @classmethod
    def _cluster_alias(cls, data: Any) -> Any:
        # `cluster: k` reads as the devices of edge server (leader group) k, as the issue text words it
        return rename_alias(data, "cluster", "edge")

    @model_validator(mode="after")
    def _one_size(self) -> Selector:
        if self.fraction is not None and self.count is not None:
            raise ValueError("set either fraction or count, not both")
        return self


def resolve_selector(sel: Selector, world: World, seed: int, index: int) -> list[int]:
    """Device ids an event's selector matches (seeded sample for ``fraction`` / ``count``)."""
    n = world.num_devices
    groups = []
    if sel.tier is not None:
        tiers = [sel.tier] if isinstance(sel.tier, str) else list(sel.tier)
        assert world.tier is not None
        groups.append(np.isin(world.tier.astype(str), tiers))
    if sel.edge is not None:
        edges = [sel.edge] if isinstance(sel.edge, int) else list(sel.edge)
        groups.append(np.isin(world.edge_of, edges))
    return select(n, sel.ids, groups, sel.fraction, sel.count, lambda: stream(seed, "events", index))


@dataclass(frozen=True)
class Facts:
    """What load-time event checks know about the scenario."""

    num_devices: int
    num_edges: int
    tiers: list[str]          # every tier name a selector may use (shipped and custom)


@dataclass
class DynamicsDraft:
    """The dynamics being built: events apply themselves to it in time order, then :meth:`finish`."""

    dyn: Dynamics
    world: World
    seed: int
    away: list[list[tuple[float, float]]] = field(default_factory=list)   # per device: timed absences
    open_leave: dict[int, float] = field(default_factory=dict)            # device → start of an open leave

    def __post_init__(self) -> None:
        if not self.away:
            self.away = [[] for _ in range(self.world.num_devices)]

    def finish(self) -> Dynamics:
        """Close open leaves at infinity and merge each device's absences into its availability."""
        for d, start in self.open_leave.items():
            self.away[d].append((start, math.inf))
        self.open_leave = {}
        self.dyn.availability = Availability(self.dyn.availability.base, [merge_intervals(a) for a in self.away])
        return self.dyn


class EventKind(ConfigModel):
    """Base of the event kinds: ``name`` is the YAML key of the kind."""

    name: ClassVar[str]
    churn: ClassVar[bool] = False
    """The event changes which devices are online (refused by protocols that do not model drop-outs)."""
    takes_devices_offline: ClassVar[bool] = False
    """The event takes devices offline mid-run."""
    infra_fault: ClassVar[bool] = False
    """The event fails an edge server or the cloud (refused by protocols without ``supports_infra_faults``)."""

    def problems(self, key: str, facts: Facts) -> list[Problem]:
        """Load-time problems of this event at ``key`` (``events.<i>.<kind>``)."""
        return []

    def apply(self, at_s: float, index: int, key: str, draft: DynamicsDraft) -> None:
        """Apply the event, which happens at ``at_s`` and is entry ``index`` of ``events:``."""
        raise NotImplementedError

    @staticmethod
    def end(at_s: float, for_s: float | None) -> float:
        """When an effect that lasts ``for_s`` (None: for good) ends."""
        return at_s + for_s if for_s is not None else math.inf


class DeviceEvent(EventKind):
    """An event on the devices its ``select`` matches."""

    select: Selector = Selector()

    def problems(self, key: str, facts: Facts) -> list[Problem]:
        """The selector names known tiers, existing edge servers and existing devices."""
        problems: list[Problem] = []
        sel = self.select
        allowed = ", ".join(facts.tiers)
        tiers = [sel.tier] if isinstance(sel.tier, str) else (sel.tier or [])
        for t in tiers:
            if t not in facts.tiers and t != "custom":
                problems.append(Problem(f"{key}.select.tier", f"unknown tier; allowed: {allowed}", t))
        edges = [sel.edge] if isinstance(sel.edge, int) else (sel.edge or [])
        e_count = facts.num_edges
        for e in edges:
            if e >= e_count:
                problems.append(Problem(f"{key}.select.edge", f"no such edge server; allowed: 0..{e_count - 1}"
                                        if e_count else "the scenario has no edge servers", e))
        for d in sel.ids or []:
            if d >= facts.num_devices:
                problems.append(Problem(f"{key}.select.ids", f"no such device; allowed: 0..{facts.num_devices - 1}", d))
        return problems

    def apply(self, at_s: float, index: int, key: str, draft: DynamicsDraft) -> None:
        """Resolve the selector (warn when it matches nothing), then :meth:`apply_to` the devices."""
        devices = resolve_selector(self.select, draft.world, draft.seed, index)
        if not devices:
            draft.dyn.warnings.append(f"{key}.select matches no device; the event does nothing")
        self.apply_to(devices, at_s, draft)

    def apply_to(self, devices: list[int], at_s: float, draft: DynamicsDraft) -> None:
        """What the event does to each selected device."""
        raise NotImplementedError


class EventEntry(ConfigModel):
    """One entry of ``events:``: at ``at_s`` exactly one registered kind happens."""

    at_s: NonNegativeFloat = Field(description="virtual time the event happens at (before stop.virtual_time_s)")

    @model_validator(mode="before")
    @classmethod
    def _known_kinds(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key != "at_s" and key not in EVENTS:
                    raise ValueError(EVENTS.unknown(key))
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> EventEntry:
        names = [cls.name for cls in EVENTS.classes()]
        kinds = [k for k in names if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"an event needs exactly one of: {', '.join(names)}"
                             + (f" (got {', '.join(kinds)})" if kinds else ""))
        return self

    @property
    def kind(self) -> str:
        """Which kind of event this is (its YAML key)."""
        return next(cls.name for cls in EVENTS.classes() if getattr(self, cls.name) is not None)

    @property
    def spec(self) -> EventKind:
        """The event's kind config, whose hooks check and apply it."""
        return getattr(self, self.kind)  # type: ignore[no-any-return]


def _summary(cls: type) -> str:
    """The first line of a class's docstring (an event kind's description in the schema)."""
    return (cls.__doc__ or "").strip().split("\n")[0]


_ENTRY_MODELS: dict[tuple[type, ...], type[EventEntry]] = {}


def event_entry_model() -> type[EventEntry]:
    """The ``events:`` entry model: ``at_s`` plus one optional field per registered kind (registration order).

    One model per set of kinds: a plug-in's event kind makes a new model with its field, which the
    scenario schema picks up through :func:`event_entry_field` when it is refreshed.
    """
    kinds = tuple(EVENTS.classes())
    model = _ENTRY_MODELS.get(kinds)
    if model is None:
        fields: dict[str, Any] = {cls.name: (cls | None, Field(default=None, description=_summary(cls)))
                                  for cls in kinds}
        model = create_model("EventConfig", __base__=EventEntry, __module__=__name__, **fields)
        _ENTRY_MODELS[kinds] = model
    globals()["EventConfig"] = model  # importable (and picklable) by its name: the current one
    return model


def event_entry_field() -> Any:
    """Field type of one ``events:`` entry, late-bound: the entry model of the kinds registered when
    the schema is (re)built (:mod:`hierfl.config.late`)."""
    def build() -> Any:
        EVENTS.used = True
        return event_entry_model()

    return Annotated[event_entry_model(), Late(build, lambda: (*EVENTS.classes(), event_entry_model()), EVENTS)]
