"""The server-optimizer configs of Reddi et al. 2021 and Hsu et al. 2019 (``server_optimizer: {cloud: …, edge: …}``).

docs/explanation/algorithms.md §5.7 — ``fedavg`` (server SGD; η = 1 is plain averaging, the default of every
tier), ``fedavgm`` (server momentum, Hsu, Qi, Brown, arXiv 1909.06335), and the adaptive ``fedadagrad``,
``fedadam``, ``fedyogi`` of Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (arXiv 2003.00295). The
math is in :mod:`hierfl.methods.fedopt.math`; each config here is registered in
:data:`hierfl.learn.serveropt.SERVER_OPTIMIZERS` and steps through its rule.

Every optimizer's rate may follow a schedule (``lr_schedule:``, the kinds of ``training.lr_schedule``)
keyed by the aggregator's own round: its ``s``-th step (``s`` = the aggregations it has completed before,
:attr:`hierfl.core.serveropt.OptState.steps`) uses ``η·factor(s)``. Reddi et al. tune a constant η; a
decaying server rate is the knob their appendix and later work (e.g. Charles et al., "On large-cohort
training for federated learning", NeurIPS 2021) sweep. ``constant`` (the default) leaves ``η`` as given, bit
for bit.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat

from hierfl.core.serveropt import OptState
from hierfl.learn.schedule import LRScheduleConfig
from hierfl.learn.serveropt import SERVER_OPTIMIZERS, ServerOptimizerConfig
from hierfl.methods.fedopt.math import (
    adagrad_second_moment,
    adam_second_moment,
    adaptive_step,
    fedavg_step,
    fedavgm_step,
    first_moment,
    yogi_second_moment,
)

__all__ = ["ScheduledOpt", "FedAvgOpt", "FedAvgMOpt", "FedAdagradOpt", "FedAdamOpt", "FedYogiOpt"]


class ScheduledOpt(ServerOptimizerConfig):
    """A server optimizer whose rate ``η`` follows ``lr_schedule`` over its aggregator's rounds."""

    lr_schedule: LRScheduleConfig = Field(
        default=LRScheduleConfig(), description="the server rate's schedule over this aggregator's rounds (its "
                                                "completed aggregations s): η·factor(s); the kinds of "
                                                "training.lr_schedule; constant by default")

    def rate(self, state: OptState) -> float:
        """``η·factor(s)`` for the step after ``s = state.steps`` steps (``η`` itself, bit for bit, when constant)."""
        if self.lr_schedule.constant:
            return float(self.lr)
        return float(self.lr) * self.lr_schedule.scale(state.steps)


@SERVER_OPTIMIZERS.register
class FedAvgOpt(ScheduledOpt):
    """``{name: fedavg, lr: 1.0}``: ``x ← x + η Δ``; η = 1 is plain averaging (the default everywhere)."""

    name: Literal["fedavg"] = "fedavg"
    lr: PositiveFloat = Field(default=1.0, description="server learning rate η")

    @property
    def plain_average(self) -> bool:
        """η = 1 at every round: the step is the aggregate itself."""
        return self.lr == 1.0 and self.lr_schedule.constant

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``x + η Δ``."""
        lr = self.rate(state)
        state.steps += 1
        return fedavg_step(x, delta, lr)


@SERVER_OPTIMIZERS.register
class FedAvgMOpt(ScheduledOpt):
    """``{name: fedavgm, lr: 1.0, beta: 0.9}``: server momentum (Hsu et al. 2019)."""

    name: Literal["fedavgm"] = "fedavgm"
    lr: PositiveFloat = Field(default=1.0, description="server learning rate η [D]")
    beta: float = Field(default=0.9, ge=0.0, lt=1.0, description="momentum β [V3]")

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``m ← β m + Δ``; ``x + η m``."""
        new, state.m = fedavgm_step(x, delta, state.m, self.rate(state), self.beta)
        state.steps += 1
        return new


class _AdaptiveOpt(ScheduledOpt):
    lr: PositiveFloat = Field(default=0.01, description="server learning rate η [D: Flower's FedYogi default]")
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0, description="first-moment decay β1 [V3]")
    tau: PositiveFloat = Field(default=1e-3, description="adaptivity τ (also v_{-1} = τ²) [V3]")

    def _second(self, delta: np.ndarray, v: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``m``, ``v`` updates, then ``x + η m / (√v + τ)``."""
        lr = self.rate(state)
        state.m = first_moment(delta, state.m, self.beta1)
        state.v = self._second(delta, state.v)
        state.steps += 1
        return adaptive_step(x, state.m, state.v, lr, self.tau)


@SERVER_OPTIMIZERS.register
class FedAdagradOpt(_AdaptiveOpt):
    """``{name: fedadagrad, lr: 0.01, beta1: 0.0, tau: 1e-3}``."""

    name: Literal["fedadagrad"] = "fedadagrad"
    beta1: float = Field(default=0.0, ge=0.0, lt=1.0, description="first-moment decay β1 (0 for Adagrad) [V3]")

    def _second(self, delta: np.ndarray, v: np.ndarray | None) -> np.ndarray:
        return adagrad_second_moment(delta, v, self.tau)


class _DecayingSecondMoment(_AdaptiveOpt):
    beta2: float = Field(default=0.99, ge=0.0, lt=1.0, description="second-moment decay β2 [V3]")


@SERVER_OPTIMIZERS.register
class FedAdamOpt(_DecayingSecondMoment):
    """``{name: fedadam, lr: 0.01, beta1: 0.9, beta2: 0.99, tau: 1e-3}``."""

    name: Literal["fedadam"] = "fedadam"

    def _second(self, delta: np.ndarray, v: np.ndarray | None) -> np.ndarray:
        return adam_second_moment(delta, v, self.beta2, self.tau)


@SERVER_OPTIMIZERS.register
class FedYogiOpt(_DecayingSecondMoment):
    """``{name: fedyogi, lr: 0.01, beta1: 0.9, beta2: 0.99, tau: 1e-3}``."""

    name: Literal["fedyogi"] = "fedyogi"

    def _second(self, delta: np.ndarray, v: np.ndarray | None) -> np.ndarray:
        return yogi_second_moment(delta, v, self.beta2, self.tau)
