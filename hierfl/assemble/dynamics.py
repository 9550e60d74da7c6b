"""Resolve ``devices.availability`` / ``dropout`` / ``jitter_sigma`` and ``events:`` into :class:`Dynamics`.

The availability model gives each device its base timeline (its ``timelines`` hook: Markov
timelines draw from one stream per device, ``(seed, "availability", i)``; a trace is read once).
Events then apply themselves in time order (ties: YAML order) through their ``apply`` hook;
selectors are resolved once, here, from the ``(seed, "events", i)`` stream of event ``i``, so
which devices an event touches is part of the scenario's deterministic world.
"""

from __future__ import annotations

from hierfl.core.dynamics import Availability, Dynamics
from hierfl.core.world import World
from hierfl.dynamics import DynamicsDraft
from hierfl.scenario.schema import Scenario

__all__ = ["build_dynamics", "availability_labels"]


def build_dynamics(scenario: Scenario, world: World) -> Dynamics:
    """Everything that changes in time, from the scenario."""
    n, seed = world.num_devices, scenario.seed
    dyn = Dynamics.static(n)
    dev = scenario.devices
    dyn.dropout = dev.dropout
    dyn.jitter_sigma = dev.jitter_sigma
    dyn.availability = Availability(dev.availability.timelines(n, world.tier, seed))
    draft = DynamicsDraft(dyn, world, seed)
    events = scenario.events
    for i in sorted(range(len(events)), key=lambda i: (events[i].at_s, i)):
        event = events[i]
        event.spec.apply(event.at_s, i, f"events.{i}.{event.kind}", draft)
    return draft.finish()


def availability_labels(scenario: Scenario, dynamics: Dynamics) -> list[str]:
    """Per device, what ``devices.csv`` says about its availability (the model's label, or ``always``)."""
    return scenario.devices.availability.labels(dynamics.availability.base)
