"""The public plug-in API: what a user's own method, policy or dataset is written against.

A plug-in is a Python file (or an installed module) that imports from here, subclasses a config
model and registers it by the name used in YAML::

    from typing import Literal
    from hierfl.plugin import STRAGGLERS, StragglerPolicy

    HIERFL_API = "1"          # optional: the plug-in API major version it was written for

    @STRAGGLERS.register
    class FirstHalf(StragglerPolicy):
        \"\"\"``straggler: first_half``: a round closes when half its devices are in.\"\"\"

        name: Literal["first_half"] = "first_half"
        ...

It is loaded with ``hierfl run scenario.yaml --plugin my_method.py``, a scenario's ``plugins:``
key, ``hierfl.run(..., plugins=[...])`` or the entry-point group ``hierfl.plugins`` of an
installed package; everywhere a scenario is validated and in every Ray worker
(:mod:`hierfl.config.plugins`). ``hierfl check my_method.py`` runs the conformance suite on it
(:mod:`hierfl.plugin.testing`).

Every name below is imported on first use, so ``import hierfl.plugin`` costs nothing and never
imports Ray or torch; ``from hierfl.plugin import PROTOCOLS`` imports only what defines it.

Versioning: ``API_VERSION`` is ``"MAJOR.MINOR"``. A minor version adds names; a major version
changes or removes one. A plug-in module may declare ``HIERFL_API = "1"`` (or ``"1.0"``): a
different major version is refused when it loads.
"""

from __future__ import annotations

import importlib
from typing import Any

from hierfl.config.plugins import API_VERSION  # the standard library and the config layer only: import-light

# public name -> the module that defines it (imported on first use)
_EXPORTS: dict[str, str] = {
    # registries: one per open set
    "Registry": "hierfl.config.registry",
    "PROTOCOLS": "hierfl.protocols.base",
    "TRAINERS": "hierfl.learn.trainers",
    "STRAGGLERS": "hierfl.policies.straggler",
    "RECLUSTER": "hierfl.policies.recluster",
    "STALENESS": "hierfl.policies.staleness",
    "DATASETS": "hierfl.data.datasets",
    "PARTITIONERS": "hierfl.data.partition",
    "MODELS": "hierfl.models",
    "GROUPINGS": "hierfl.topology.grouping",
    "GENERATORS": "hierfl.topology.generators",
    "DEVICE_GRAPHS": "hierfl.topology.devgraph",
    "EVENTS": "hierfl.dynamics.events",
    "AVAILABILITY": "hierfl.dynamics.availability",
    "SERVER_OPTIMIZERS": "hierfl.learn.serveropt",
    "AGGREGATION_RULES": "hierfl.robust.rules",
    "BEHAVIORS": "hierfl.robust.behaviours",
    "DISTRIBUTIONS": "hierfl.devices.dists",
    "EXECUTORS": "hierfl.executors",
    "SERVER_TASKS": "hierfl.learn.server_tasks",
    "CHANNELS": "hierfl.channels.rules",
    "server_task": "hierfl.learn.server_tasks",
    # what a server task receives and returns (its context names the run's device: ctx.device)
    "ServerContext": "hierfl.learn.server_tasks",
    "ServerResult": "hierfl.learn.server_tasks",
    "SUBPROTOCOLS": "hierfl.subprotocol.config",
    # configuration
    "ConfigModel": "hierfl.config.base",
    "Problem": "hierfl.config.errors",
    # protocols: config, object, the environment they see, events and their payloads
    "ProtocolConfig": "hierfl.protocols.base",
    "Protocol": "hierfl.protocols.base",
    "DeviceMsg": "hierfl.protocols.base",
    "AggregationPoint": "hierfl.policies.straggler",
    "Barrier": "hierfl.protocols.straggler",
    "planned_spec": "hierfl.protocols.straggler",
    "Env": "hierfl.env.api",
    "Job": "hierfl.env.api",
    "Term": "hierfl.env.api",
    "Telemetry": "hierfl.env.api",
    "Event": "hierfl.kernel.engine",
    "Priority": "hierfl.kernel.engine",
    "Payload": "hierfl.env.events",
    "Timer": "hierfl.env.events",
    "DeviceLost": "hierfl.env.events",
    "DRIVER_EVENTS": "hierfl.env.events",
    "RoundEmpty": "hierfl.env.records",
    "TrainSpec": "hierfl.core.work",
    "MessageLayout": "hierfl.core.message",
    "Part": "hierfl.core.message",
    "MODEL_ONLY": "hierfl.core.message",
    "CONTROLLED": "hierfl.core.message",
    # the other plug-in kinds' bases
    "TrainerConfig": "hierfl.learn.trainers",
    "JobMethod": "hierfl.core.method",
    "JobContext": "hierfl.core.method",
    "StateStore": "hierfl.core.method",
    "DeviceVectors": "hierfl.learn.kept",
    "runner": "hierfl.core.method",
    "StragglerPolicy": "hierfl.policies.straggler",
    "ReclusterConfig": "hierfl.policies.recluster",
    "StalenessConfig": "hierfl.policies.staleness",
    "DatasetConfig": "hierfl.data.datasets",
    "Dataset": "hierfl.data.datasets",
    "PartitionConfig": "hierfl.data.partition",
    "ModelConfig": "hierfl.models",
    "GroupingConfig": "hierfl.topology.grouping",
    "GroupingInputs": "hierfl.topology.grouping",
    "GeneratorConfig": "hierfl.topology.generators",
    "DeviceGraphConfig": "hierfl.topology.devgraph",
    "EventKind": "hierfl.dynamics.events",
    "DeviceEvent": "hierfl.dynamics.events",
    "AvailabilityConfig": "hierfl.dynamics.availability",
    "ServerOptimizerConfig": "hierfl.learn.serveropt",
    "RuleConfig": "hierfl.robust.rules",
    "RuleContext": "hierfl.core.aggregate",
    "BehaviorConfig": "hierfl.robust.behaviours",
    "DistConfig": "hierfl.devices.dists",
    "Channel": "hierfl.channels.rules",
    "SubProtocolConfig": "hierfl.subprotocol.config",
    "SubRound": "hierfl.subprotocol.math",
    "RoundView": "hierfl.subprotocol.math",
    "SubProtocolDone": "hierfl.env.events",
    "rng_stream": "hierfl.core.rng",
    "bernoulli_cohort": "hierfl.core.sampling",
    # protocol.sampling: bernoulli in a protocol of one's own (the keys, the draw, the check)
    "coin_cohort": "hierfl.protocols.cohort",
    "coin_problems": "hierfl.protocols.cohort",
    "sampling_field": "hierfl.protocols.cohort",
    "empty_cohort_field": "hierfl.protocols.cohort",
    # loading plug-ins from Python (the CLI's --plugin, a scenario's plugins:)
    "load_plugins": "hierfl.config.plugins",
    "load_plugin": "hierfl.config.plugins",
    "loaded_plugins": "hierfl.config.plugins",
    "PluginRef": "hierfl.config.plugins",
    "ENTRY_POINT_GROUP": "hierfl.config.plugins",
}
_RENAMED = {"rng_stream": "stream"}  # public name -> the defining module's own name

__all__ = ["API_VERSION", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    # lazily: a plug-in that registers a straggler policy never pays for the protocols' imports
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hierfl.plugin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
