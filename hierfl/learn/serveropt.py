"""Server-optimizer plug-ins (``server_optimizer: {cloud: …, edge: …}``): their registry and base.

A server optimizer turns an aggregated delta into an aggregator's next model (docs/explanation/algorithms.md
§5.7). The shipped optimizers register here from their method package; the scenario's section that picks
one per tier is :class:`hierfl.scenario.serveropt.ServerOptimizerSection`.
"""

from __future__ import annotations

import numpy as np

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.serveropt import OptState

__all__ = ["SERVER_OPTIMIZERS", "ServerOptimizerConfig"]

SERVER_OPTIMIZERS: Registry = Registry("server optimizer")


class ServerOptimizerConfig(ConfigModel):
    """Base of the server-optimizer configs: ``step`` maps (model, delta, state) to the next model."""

    lr: float

    @property
    def plain_average(self) -> bool:
        """True when a step is exactly "take the aggregate" (server SGD with η = 1): the emulator then keeps
        the aggregate bit for bit instead of computing ``x + 1·(avg − x)``."""
        return False

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """The next model (float32); updates ``state`` in place."""
        raise NotImplementedError

    def round_step(self, x: np.ndarray | None, avg: np.ndarray, count: int, state: OptState) -> np.ndarray:
        """The end of a synchronous round: step ``x`` with ``Δ = avg − x`` (``count``: the round's
        updates, which a drift-correcting round rule needs and an optimizer does not)."""
        if x is None:
            raise ValueError("a server optimizer needs the model the round started from")
        return self.step(x, avg.astype(np.float64) - np.asarray(x, dtype=np.float64), state)

    def take_control(self, control_sum: np.ndarray | None, state: OptState) -> bool:
        """Whether this round rule steps its aggregator's own control with the round's control sum: an
        optimizer keeps none (the control sum of plain control variates waits for the upload)."""
        return False
