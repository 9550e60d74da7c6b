"""Staleness-function plug-ins (``staleness: {name: …}``): configs selecting a σ(τ) of :mod:`hierfl.core.staleness`.

docs/explanation/algorithms.md §1.4; the math and its citations are in :mod:`hierfl.core.staleness`. A config is
called like the function it selects: ``σ = cfg(τ)``. A method package registers its own σ here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.staleness import constant, exponential, hinge, polynomial

__all__ = ["STALENESS", "StalenessConfig", "ConstantStaleness", "PolynomialStaleness", "HingeStaleness",
           "ExponentialStaleness"]

STALENESS: Registry = Registry("staleness function")


class StalenessConfig(ConfigModel):
    """Base of the staleness-function configs: ``σ = cfg(τ)``."""

    def __call__(self, tau: int) -> float:
        """σ(τ)."""
        raise NotImplementedError


@STALENESS.register
class ConstantStaleness(StalenessConfig):
    """``{name: constant}``: σ ≡ 1 (no staleness discount)."""

    name: Literal["constant"] = "constant"

    def __call__(self, tau: int) -> float:
        """σ(τ) = 1."""
        return constant(tau)


@STALENESS.register
class PolynomialStaleness(StalenessConfig):
    """``{name: polynomial, a: 0.5}``: σ(τ) = (τ + 1)^(−a)."""

    name: Literal["polynomial"] = "polynomial"
    a: float = Field(default=0.5, ge=0.0, le=100.0, description="decay exponent")

    def __call__(self, tau: int) -> float:
        """(τ + 1)^(−a)."""
        return polynomial(tau, self.a)


@STALENESS.register
class HingeStaleness(StalenessConfig):
    """``{name: hinge, a: 10, b: 4}``: full weight up to ``b``, then 1/(a(τ−b)+1)."""

    name: Literal["hinge"] = "hinge"
    a: float = Field(default=10.0, ge=0.0, description="slope after the hinge")
    b: float = Field(default=4.0, ge=0.0, description="staleness tolerated at full weight")

    def __call__(self, tau: int) -> float:
        """1 if τ ≤ b else 1/(a(τ−b)+1)."""
        return hinge(tau, self.a, self.b)


@STALENESS.register
class ExponentialStaleness(StalenessConfig):
    """``{name: exponential, lam: 0.5}``: σ(τ) = e^(−lam·τ)."""

    name: Literal["exponential"] = "exponential"
    lam: float = Field(default=0.5, ge=0.0, description="decay rate per version")

    def __call__(self, tau: int) -> float:
        """e^(−lam·τ)."""
        return exponential(tau, self.lam)
