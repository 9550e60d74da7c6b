"""Server optimizers: how an aggregator turns an aggregated delta into its next model (pure numpy).

ALGORITHMS.md §5.7 — the FedOpt family of Reddi et al., "Adaptive Federated Optimization",
ICLR 2021 (arXiv 2003.00295), and FedAvgM of Hsu, Qi, Brown, "Measuring the Effects of
Non-Identical Data Distribution for Federated Visual Classification" (arXiv 1909.06335). The
aggregator receives ``Δ_t`` (the protocol's aggregate minus the model it started from, e.g.
``Σ n_i y_i / Σ n_i − x_t`` for FedAvg) and steps, with ``m_{−1} = 0``, ``v_{−1} = τ²``:

* ``fedavg``     ``x ← x + η Δ``                               (η = 1: plain averaging)
* ``fedavgm``    ``m ← β m + Δ``;  ``x ← x + η m``
* ``fedadagrad`` ``m ← β1 m + (1 − β1) Δ``;  ``v ← v + Δ²``
* ``fedadam``    ``m`` as above;  ``v ← β2 v + (1 − β2) Δ²``
* ``fedyogi``    ``m`` as above;  ``v ← v − (1 − β2) Δ² ⊙ sign(v − Δ²)``
* adaptive update ``x ← x + η m / (√v + τ)`` element-wise, **no bias correction**.

Deltas, moments and the update are computed in float64 (state ``m``, ``v`` is float64); the
new model is returned as float32. Everything here is a pure function of its arguments;
:class:`OptState` is the per-aggregator state a role keeps between steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.registry import Registry

__all__ = [
    "SERVER_OPTIMIZERS", "ServerOptimizerConfig", "ServerOptimizerSection", "OptState",
    "FedAvgOpt", "FedAvgMOpt", "FedAdagradOpt", "FedAdamOpt", "FedYogiOpt",
    "fedavg_step", "fedavgm_step", "adaptive_step", "adagrad_second_moment", "adam_second_moment",
    "yogi_second_moment", "first_moment",
]

SERVER_OPTIMIZERS: Registry = Registry("server optimizer")


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def fedavg_step(x: np.ndarray, delta: np.ndarray, lr: float) -> np.ndarray:
    """Server SGD: ``x + η Δ`` (float32)."""
    return (_f64(x) + lr * _f64(delta)).astype(np.float32)


def fedavgm_step(x: np.ndarray, delta: np.ndarray, m: np.ndarray | None, lr: float,
                 beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Server SGD with momentum (FedAvgM): ``m ← β m + Δ``, ``x ← x + η m``; returns ``(x, m)``."""
    d = _f64(delta)
    m_new = d.copy() if m is None else beta * m + d
    return (_f64(x) + lr * m_new).astype(np.float32), m_new


def first_moment(delta: np.ndarray, m: np.ndarray | None, beta1: float) -> np.ndarray:
    """``m ← β1 m + (1 − β1) Δ`` with ``m_{−1} = 0``."""
    d = _f64(delta)
    return (1.0 - beta1) * d if m is None else beta1 * m + (1.0 - beta1) * d


def _v_prev(v: np.ndarray | None, delta: np.ndarray, tau: float) -> np.ndarray:
    return np.full(np.shape(delta), tau * tau, dtype=np.float64) if v is None else v


def adagrad_second_moment(delta: np.ndarray, v: np.ndarray | None, tau: float) -> np.ndarray:
    """FedAdagrad: ``v ← v + Δ²`` with ``v_{−1} = τ²``."""
    d = _f64(delta)
    return _v_prev(v, d, tau) + d * d


def adam_second_moment(delta: np.ndarray, v: np.ndarray | None, beta2: float, tau: float) -> np.ndarray:
    """FedAdam: ``v ← β2 v + (1 − β2) Δ²`` with ``v_{−1} = τ²``."""
    d = _f64(delta)
    return beta2 * _v_prev(v, d, tau) + (1.0 - beta2) * d * d


def yogi_second_moment(delta: np.ndarray, v: np.ndarray | None, beta2: float, tau: float) -> np.ndarray:
    """FedYogi: ``v ← v − (1 − β2) Δ² ⊙ sign(v − Δ²)`` with ``v_{−1} = τ²``."""
    d2 = _f64(delta) ** 2
    prev = _v_prev(v, d2, tau)
    return prev - (1.0 - beta2) * d2 * np.sign(prev - d2)


def adaptive_step(x: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, tau: float) -> np.ndarray:
    """``x + η m / (√v + τ)`` element-wise, no bias correction (float32)."""
    return (_f64(x) + lr * m / (np.sqrt(v) + tau)).astype(np.float32)


@dataclass
class OptState:
    """What one aggregator's optimizer remembers between steps (float64 moments)."""

    m: np.ndarray | None = None
    v: np.ndarray | None = None
    steps: int = 0


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

    cloud: SERVER_OPTIMIZERS.union() = FedAvgOpt()  # type: ignore[valid-type]
    edge: SERVER_OPTIMIZERS.union() = FedAvgOpt()  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _cloud_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str) or (isinstance(value, dict) and "name" in value):
            return {"cloud": value}
        return value

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
