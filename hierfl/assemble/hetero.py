"""Per-device model heterogeneity (``models:``): which model each device runs, its FLOPs, and layout checks.

A scenario's ``model`` is every device's model unless ``models:`` names another one for the
device's tier. Output-exchange methods, which distil through class scores on shared data, are written for
exactly this: every participant
designs its own network and only the label space is shared. Weight averaging, on the other hand,
needs one parameter layout everywhere, so the build refuses a tier's model whose layout differs
from ``model``'s when the protocol exchanges weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hierfl.config.errors import Problem
from hierfl.learn.local import forward_flops
from hierfl.models import ModelConfig
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.schema import Scenario

__all__ = ["DeviceModels", "device_models", "layout_problems"]


@dataclass(frozen=True)
class DeviceModels:
    """The distinct models of a run and which one each device runs.

    ``configs[0]`` is the scenario's ``model``; ``keys[k]`` is the YAML key that chose
    ``configs[k]`` (``model``, or ``models.<tier>`` for the first tier that named it); ``of_device``
    maps each device to its index in ``configs``.
    """

    configs: tuple[ModelConfig, ...]
    keys: tuple[str, ...]
    of_device: np.ndarray

    @property
    def heterogeneous(self) -> bool:
        """Whether more than one architecture runs."""
        return len(self.configs) > 1

    def tiers_of(self, index: int, tiers: np.ndarray) -> list[str]:
        """The tiers whose devices run ``configs[index]`` (in order of first appearance)."""
        seen: dict[str, None] = {}
        for t, k in zip(tiers, self.of_device):
            if int(k) == index:
                seen[str(t)] = None
        return list(seen)

    def forward_flops(self, call: Callable[..., Any], input_shape: tuple[int, ...], num_classes: int) -> np.ndarray:
        """Per device, its model's forward FLOPs per sample (each distinct model measured once)."""
        per_model = np.array([float(call(forward_flops, cfg, input_shape, num_classes)) for cfg in self.configs])
        return per_model[self.of_device]


def device_models(scenario: Scenario, tiers: np.ndarray) -> DeviceModels:
    """Which model each device runs: its tier's entry of ``models:``, else ``model``."""
    configs: list[ModelConfig] = [scenario.model]
    keys = ["model"]
    index_of_tier: dict[str, int] = {}
    for tier, cfg in scenario.models.items():
        if cfg in configs:  # the same architecture as another key: one model, one layout
            index_of_tier[tier] = configs.index(cfg)
            continue
        index_of_tier[tier] = len(configs)
        configs.append(cfg)
        keys.append(f"models.{tier}")
    of_device = np.array([index_of_tier.get(str(t), 0) for t in tiers], dtype=np.int64)
    return DeviceModels(tuple(configs), tuple(keys), of_device)


def layout_problems(scenario: Scenario, models: DeviceModels, layouts: list[list[tuple[str, tuple[int, ...]]]],
                    tiers: np.ndarray) -> list[Problem]:
    """A weight-averaging protocol's refusal of layouts that differ from ``model``'s (naming the tiers).

    ``layouts[k]`` is the ``(name, shape)`` list of ``models.configs[k]``. A model that no device
    runs is not compared (nothing of it would be averaged).
    """
    proto = scenario.protocol
    if type(proto).exchanges != "weights" or not models.heterogeneous:
        return []
    base = layouts[0]
    problems = []
    for k in range(1, len(models.configs)):
        used = models.tiers_of(k, tiers)
        if not used or layouts[k] == base:
            continue
        base_tiers = models.tiers_of(0, tiers) or ["(none)"]
        problems.append(Problem(
            models.keys[k],
            f"protocol {proto.name} averages weights, but tier(s) {', '.join(used)} run a model of "
            f"{_size(layouts[k])} parameters in {len(layouts[k])} tensors while tier(s) {', '.join(base_tiers)} run "
            f"`model` ({_size(base)} parameters in {len(base)} tensors): the layouts differ; allowed: a model with "
            f"`model`'s layout, or a protocol that exchanges outputs ({_output_protocols()})"))
    return problems


def _output_protocols() -> str:
    names = [n for n in PROTOCOLS.names() if PROTOCOLS.get(n).exchanges == "outputs"]
    return ", ".join(names) if names else "none shipped yet"


def _size(layout: list[tuple[str, tuple[int, ...]]]) -> int:
    return int(sum(int(np.prod(shape)) for _, shape in layout))
