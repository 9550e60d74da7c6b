"""Seeded value distributions for per-device profile fields (``constant | uniform | lognormal | choice``).

In YAML a bare number means ``constant``::

    speed_sps: 200
    speed_sps: {dist: uniform, low: 50, high: 400}
    speed_sps: {dist: lognormal, median: 200, sigma: 0.5}
    speed_sps: {dist: choice, values: [50, 200, 800], weights: [0.5, 0.3, 0.2]}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import BeforeValidator, Field, NonNegativeFloat, PositiveFloat, model_validator

from hierfl.config.base import ConfigModel

__all__ = ["Dist", "ConstantDist", "UniformDist", "LogNormalDist", "ChoiceDist"]


class ConstantDist(ConfigModel):
    """Every device gets ``value``."""

    dist: Literal["constant"] = "constant"
    value: float

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        return np.full(size, float(self.value))

    def lower_bound(self) -> float:
        """The smallest value this distribution can produce."""
        return float(self.value)


class UniformDist(ConfigModel):
    """Uniform on ``[low, high]``."""

    dist: Literal["uniform"]
    low: float
    high: float

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


class LogNormalDist(ConfigModel):
    """``median · exp(sigma · N(0, 1))`` — heavy-tailed speeds as in FedScale's lognormal option."""

    dist: Literal["lognormal"]
    median: PositiveFloat
    sigma: NonNegativeFloat

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws as float64."""
        return self.median * np.exp(self.sigma * rng.standard_normal(size))

    def lower_bound(self) -> float:
        """Strictly positive (the infimum is 0 but never reached)."""
        return float(np.nextafter(0.0, 1.0))


class ChoiceDist(ConfigModel):
    """One of ``values``, with probabilities ``weights`` (uniform if omitted)."""

    dist: Literal["choice"]
    values: list[float] = Field(min_length=1)
    weights: list[NonNegativeFloat] | None = None

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


def _scalar_to_constant(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    if isinstance(value, dict) and "dist" not in value and "value" in value:
        return {"dist": "constant", **value}
    return value


Dist = Annotated[
    Union[ConstantDist, UniformDist, LogNormalDist, ChoiceDist],  # noqa: UP007
    Field(discriminator="dist"),
    BeforeValidator(_scalar_to_constant),
]
"""A distribution field: a number, or a mapping with ``dist: constant|uniform|lognormal|choice``."""
