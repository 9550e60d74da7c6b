"""Seeded value distributions for per-device profile fields, registered by their ``dist:`` name.

Each distribution is a plug-in of :data:`DISTRIBUTIONS` (``constant``, ``uniform``,
``lognormal``, ``choice``) with two hooks: :meth:`~DistConfig.sample` (``size`` float64 draws
from a given generator) and :meth:`~DistConfig.lower_bound` (the smallest value it can give, so
a field that must be positive is checked at load time). In YAML a bare number means ``constant``::

    speed_sps: 200
    speed_sps: {dist: uniform, low: 50, high: 400}
    speed_sps: {dist: lognormal, median: 200, sigma: 0.5}
    speed_sps: {dist: choice, values: [50, 200, 800], weights: [0.5, 0.3, 0.2]}
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

__all__ = ["DISTRIBUTIONS", "Dist", "DistConfig", "ConstantDist", "UniformDist", "LogNormalDist", "ChoiceDist"]


def _scalar_to_constant(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    if isinstance(value, dict) and "dist" not in value and "value" in value:
        return {"dist": "constant", **value}
    return value


DISTRIBUTIONS: Registry = Registry("distribution", key="dist", shorthand=_scalar_to_constant)


class DistConfig(ConfigModel):
    """Base of the distribution configs."""

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        raise NotImplementedError

    def lower_bound(self) -> float:
        """The smallest value this distribution can produce."""
        raise NotImplementedError


@DISTRIBUTIONS.register
class ConstantDist(DistConfig):
    """Every device gets ``value``."""

    dist: Literal["constant"] = "constant"
    value: float = Field(description="the value every device gets")

    @classmethod
    def example(cls) -> ConstantDist:
        """A minimal valid config (conformance tests)."""
        return cls(value=2.0)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        return np.full(size, float(self.value))

    def lower_bound(self) -> float:
        """The smallest value this distribution can produce."""
        return float(self.value)


@DISTRIBUTIONS.register
class UniformDist(DistConfig):
    """Uniform on ``[low, high]``."""

    dist: Literal["uniform"] = "uniform"
    low: float = Field(description="lower bound (inclusive)")
    high: float = Field(description="upper bound")

    @classmethod
    def example(cls) -> UniformDist:
        """A minimal valid config (conformance tests)."""
        return cls(low=1.0, high=3.0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformDist:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        return rng.uniform(self.low, self.high, size)

    def lower_bound(self) -> float:
        """The smallest value this distribution can produce."""
        return float(self.low)


@DISTRIBUTIONS.register
class LogNormalDist(DistConfig):
    """``median · exp(sigma · N(0, 1))`` — heavy-tailed speeds as in FedScale's lognormal option."""

    dist: Literal["lognormal"] = "lognormal"
    median: PositiveFloat = Field(description="median of the lognormal (median·e^(σZ))")
    sigma: NonNegativeFloat = Field(description="σ of the underlying normal (0 = constant)")

    @classmethod
    def example(cls) -> LogNormalDist:
        """A minimal valid config (conformance tests)."""
        return cls(median=2.0, sigma=0.5)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        return self.median * np.exp(self.sigma * rng.standard_normal(size))

    def lower_bound(self) -> float:
        """Strictly positive (the infimum is 0 but never reached)."""
        return float(np.nextafter(0.0, 1.0))


@DISTRIBUTIONS.register
class ChoiceDist(DistConfig):
    """One of ``values``, with probabilities ``weights`` (uniform if omitted)."""

    dist: Literal["choice"] = "choice"
    values: list[float] = Field(min_length=1, description="the values to choose from")
    weights: list[NonNegativeFloat] | None = Field(default=None, description="their probabilities (null = equal; normalised)")

    @classmethod
    def example(cls) -> ChoiceDist:
        """A minimal valid config (conformance tests)."""
        return cls(values=[1.0, 5.0, 9.0], weights=[0.0, 1.0, 1.0])

    @model_validator(mode="after")
    def _weights(self) -> ChoiceDist:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights has {len(self.weights)} entries but values has {len(self.values)}")
            if sum(self.weights) <= 0:
                raise ValueError("weights must not all be zero")
        return self

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        p = None if self.weights is None else np.asarray(self.weights) / sum(self.weights)
        return np.asarray(self.values, dtype=np.float64)[rng.choice(len(self.values), size=size, p=p)]

    def lower_bound(self) -> float:
        """The smallest value this distribution can produce."""
        if self.weights is None:
            return float(min(self.values))
        return float(min(v for v, w in zip(self.values, self.weights) if w > 0))


Dist = DISTRIBUTIONS.union()
"""A distribution field: a number, or a mapping with ``dist:`` naming a registered distribution."""
