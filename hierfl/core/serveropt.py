"""The state an aggregator's server optimizer keeps between steps (pure: numpy arrays and counters).

A server optimizer turns an aggregated delta into the aggregator's next model; the registered
optimizers and their rules are plug-ins (:mod:`hierfl.learn.serveropt` holds their registry and
base; the shipped ones, docs/explanation/algorithms.md §5.7, are a method package). :class:`OptState`
is what one aggregator remembers for its optimizer and round rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OptState"]


@dataclass
class OptState:
    """What one aggregator's optimizer remembers between steps (float64 moments)."""

    m: np.ndarray | None = None
    v: np.ndarray | None = None
    steps: int = 0
    # a drift-correcting round rule's H = Σ_i h_i at this aggregator (the devices' drifts); None until its first round
    drift: np.ndarray | None = None
    # a round rule with an edge-scoped control: the edge's own c_e (float32); None until its first round
    control: np.ndarray | None = None
