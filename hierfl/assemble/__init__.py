"""Builders: a validated scenario → the objects of a run (world, dynamics, grouping, data, initial model).

Builders, not validators, read the files a scenario names and create runtime objects:

* :mod:`hierfl.assemble.world` — devices (profiles, tiers, capacity traces), topology (file or
  generator), shared capacities;
* :mod:`hierfl.assemble.grouping` — the device → edge server map, through the grouping plug-in;
* :mod:`hierfl.assemble.dynamics` — availability timelines and events, through their plug-ins' hooks;
* :mod:`hierfl.assemble.assemble` — :func:`build`, which runs them all.
"""

from hierfl.assemble.assemble import Built, build, train_spec
from hierfl.assemble.world import tier_counts

__all__ = ["Built", "build", "train_spec", "tier_counts"]
