"""Build-time refusal of models that a trainer's or protocol's own loops on the torch module cannot honour.

Plain jobs (the local loop, one job at a time or batched) draw dropout masks from each job's seeded
stream and carry batch normalisation's running statistics in the model vector. Trainers and protocols
that run loops of their own on the module (distillation and output exchange, meta-learning, server-side
training) declare what they cannot honour (``module_loops`` on :class:`~hierfl.learn.trainers.TrainerConfig`
and :class:`~hierfl.protocols.base.ProtocolConfig`): with dropout their masks would come from torch's
global generator, so a run would no longer repeat bit for bit on every executor; running statistics would
be misread (a layer split by names, parameters loaded without the buffers). Such a combination is refused
here, before the run starts, at the key of the trainer or protocol, naming the model's key.

No torch here: ``features(cfg)`` builds the model where torch is (the build's ``model_call``), and only when
some declaration asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hierfl.config.errors import Problem

__all__ = ["FEATURES", "module_loop_problems"]

FEATURES: Mapping[str, tuple[str, str, str]] = {
    "dropout": ("dropout", "would draw from torch's global generator, not each job's stream", "dropout p=0"),
    "running_stats": ("running statistics", "would be misread", "no batch norm (no float buffers)"),
}
"""The model features a declaration may name: what a message calls them, what would go wrong, what is allowed."""

_ALLOWED = {
    "training.trainer": "trainer sgd (the plain local loop)",
    "protocol.name": "a protocol whose jobs use the plain local loop (one declaring no module_loops)",
    "privacy.dp_sgd": "privacy.dp_sgd: null",
}


def module_loop_problems(scenario: Any, features: Callable[[Any], dict[str, list[str]]]) -> list[Problem]:
    """One problem per (declaring trainer or protocol, model, feature) the model has and the declaration refuses.

    ``features(model_cfg)`` is :func:`hierfl.learn.randomness.model_features` run for that model config;
    it is called once per model key and only when the trainer or the protocol declares something.
    """
    declared = [(key, cfg.name, dict(cfg.module_loop_limits(scenario)))
                for key, cfg in (("training.trainer", scenario.training.trainer), ("protocol.name", scenario.protocol))]
    # a section whose per-sample computation on the module cannot honour some features (sample-level DP-SGD)
    privacy = getattr(scenario, "privacy", None)
    limits = getattr(privacy, "module_loop_limits", None)
    if limits is not None and limits(scenario):
        declared.append(("privacy.dp_sgd", "dp_sgd", dict(limits(scenario))))
    declared = [d for d in declared if d[2]]
    if not declared:
        return []
    for _, name, limits in declared:
        unknown = sorted(set(limits) - set(FEATURES))
        if unknown:  # a plug-in's typo must not silently allow everything
            raise ValueError(f"{name} declares module_loops {unknown}; known features: {sorted(FEATURES)}")
    models = [("model", scenario.model), *((f"models.{tier}", m) for tier, m in sorted(scenario.models.items()))]
    problems = []
    for model_key, model_cfg in models:
        found = features(model_cfg)
        for key, name, limits in declared:
            for feature, why in limits.items():
                items = found.get(feature) or []
                if not items:
                    continue
                what, wrong, instead = FEATURES[feature]
                shown = items[0] + (f" and {len(items) - 1} more" if len(items) > 1 else "")
                problems.append(Problem(key, f"{name}: {why}, so `{model_key}`'s {what} ({shown}) {wrong}; allowed: "
                                        f"{instead} at `{model_key}`, or {_ALLOWED[key]}", name))
    return problems
