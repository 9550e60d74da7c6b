"""Server-optimizer plug-ins (``server_optimizer: {cloud: …, edge: …}``): FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi.

docs/explanation/algorithms.md §5.7 — the FedOpt family of Reddi et al., "Adaptive Federated Optimization",
ICLR 2021 (arXiv 2003.00295), and FedAvgM of Hsu, Qi, Brown (arXiv 1909.06335). The math is in
:mod:`hierfl.core.serveropt`; each config here selects it by name and steps through it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.core.serveropt import (
    OptState,
    adagrad_second_moment,
    adam_second_moment,
    adaptive_step,
    fedavg_step,
    fedavgm_step,
    first_moment,
    yogi_second_moment,
)

__all__ = ["SERVER_OPTIMIZERS", "ServerOptimizerConfig", "ServerOptimizerSection", "FedAvgOpt", "FedAvgMOpt",
           "FedAdagradOpt", "FedAdamOpt", "FedYogiOpt"]

SERVER_OPTIMIZERS: Registry = Registry("server optimizer")


class ServerOptimizerConfig(ConfigModel):
    """Base of the server-optimizer configs: ``step`` maps (model, delta, state) to the next model."""

    lr: float

    @property
    def plain_average(self) -> bool:
        """True when a step is exactly "take the aggregate" (FedAvg with η = 1): the emulator then keeps
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


@SERVER_OPTIMIZERS.register
class FedAvgOpt(ServerOptimizerConfig):
    """``{name: fedavg, lr: 1.0}``: ``x ← x + η Δ``; η = 1 is plain averaging (the default everywhere)."""

    name: Literal["fedavg"] = "fedavg"
    lr: PositiveFloat = Field(default=1.0, description="server learning rate η")

    @property
    def plain_average(self) -> bool:
        """η = 1: the step is the aggregate itself."""
        return self.lr == 1.0

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``x + η Δ``."""
        state.steps += 1
        return fedavg_step(x, delta, self.lr)


@SERVER_OPTIMIZERS.register
class FedAvgMOpt(ServerOptimizerConfig):
    """``{name: fedavgm, lr: 1.0, beta: 0.9}``: server momentum (Hsu et al. 2019)."""

    name: Literal["fedavgm"] = "fedavgm"
    lr: PositiveFloat = Field(default=1.0, description="server learning rate η [D]")
    beta: float = Field(default=0.9, ge=0.0, lt=1.0, description="momentum β [V3]")

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``m ← β m + Δ``; ``x + η m``."""
        new, state.m = fedavgm_step(x, delta, state.m, self.lr, self.beta)
        state.steps += 1
        return new


class _AdaptiveOpt(ServerOptimizerConfig):
    lr: PositiveFloat = Field(default=0.01, description="server learning rate η [D: Flower's FedYogi default]")
    beta1: float = Field(default=0.9, ge=0.0, lt=1.0, description="first-moment decay β1 [V3]")
    tau: PositiveFloat = Field(default=1e-3, description="adaptivity τ (also v_{-1} = τ²) [V3]")

    def _second(self, delta: np.ndarray, v: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def step(self, x: np.ndarray, delta: np.ndarray, state: OptState) -> np.ndarray:
        """``m``, ``v`` updates, then ``x + η m / (√v + τ)``."""
        state.m = first_moment(delta, state.m, self.beta1)
        state.v = self._second(delta, state.v)
        state.steps += 1
        return adaptive_step(x, state.m, state.v, self.lr, self.tau)


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


class ServerOptimizerSection(ConfigModel):
    """``server_optimizer: {cloud: …, edge: …}`` — the optimizer of each aggregation tier.

    ``cloud`` steps the global model wherever a protocol aggregates it; ``edge`` steps each
    leader's model in protocols whose leaders aggregate (HierFAVG, AHFL). Both default to
    ``fedavg`` with η = 1, i.e. plain averaging. A bare name or a single optimizer mapping is
    shorthand for the cloud: ``server_optimizer: fedadam`` = ``{cloud: {name: fedadam}}``.
    """

    cloud: SERVER_OPTIMIZERS.union() = Field(default=FedAvgOpt(), description="server optimizer of the cloud's aggregation")  # type: ignore[valid-type]
    edge: SERVER_OPTIMIZERS.union() = Field(default=FedAvgOpt(), description="server optimizer of the edge servers' aggregations")  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _cloud_shorthand(cls, value: Any) -> Any:
        return cloud_shorthand(value)

    def at(self, tier: str) -> ServerOptimizerConfig | None:
        """The optimizer of ``tier`` (``cloud`` or ``edge``), or None when it is plain averaging."""
        opt: ServerOptimizerConfig = self.cloud if tier == "cloud" else self.edge
        return None if opt.plain_average else opt

    def check(self, tiers: tuple[str, ...], protocol: str) -> list[Problem]:
        """A non-default optimizer at a tier where ``protocol`` aggregates no model would be ignored: an error."""
        problems = []
        for tier in ("cloud", "edge"):
            if self.at(tier) is not None and tier not in tiers:
                allowed = ", ".join(tiers) if tiers else "none"
                problems.append(Problem(f"server_optimizer.{tier}",
                                        f"protocol {protocol!r} has no {tier} aggregation that takes a server "
                                        f"optimizer; tiers it supports: {allowed}", getattr(self, tier).name))
        return problems
