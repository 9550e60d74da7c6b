"""Device behaviours as plug-ins: what a Byzantine device (the ``attack`` event kind) or a
compromised edge server (``aggregation.edge_behavior``) sends instead of its honest model.

A behaviour changes what is sent, never when. The transforms are in :mod:`hierfl.robust.math`;
the device hosts apply them (:class:`hierfl.runtime.roles.DeviceHost`), the aggregators form the
colluding ones (ALIE).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, PositiveFloat

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.robust import math as R

__all__ = ["BEHAVIORS", "BehaviorConfig"]

BEHAVIORS: Registry = Registry("device behavior")


class BehaviorConfig(ConfigModel):
    """Base of the device behaviours: what a Byzantine device sends instead of its honest model.

    ``transform`` (device host or edge server) maps the honest result ``v`` trained from ``start``
    to what is sent; ``flips_labels`` trains on permuted labels instead; ``colluding`` behaviours
    (ALIE) are formed at the aggregator from the honest updates of the same aggregation.
    """

    name: str
    flips_labels: ClassVar[bool] = False
    colluding: ClassVar[bool] = False

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The vector sent (float32); the identity for data-poisoning and colluding behaviours."""
        return v


@BEHAVIORS.register
class SignFlip(BehaviorConfig):
    """``{name: sign_flip, s: 1.0}``: send ``start − s·(v − start)``."""

    name: Literal["sign_flip"] = "sign_flip"
    s: PositiveFloat = Field(default=1.0, description="scale of the reversed update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reverse the update."""
        return R.sign_flip(v.astype(np.float64), start.astype(np.float64), self.s).astype(np.float32)


@BEHAVIORS.register
class Gaussian(BehaviorConfig):
    """``{name: gaussian, sigma: 1.0}``: send ``start + N(0, σ²I)`` (seeded by the job)."""

    name: Literal["gaussian"] = "gaussian"
    sigma: PositiveFloat = Field(default=1.0, description="σ of the noise that replaces the update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noise instead of the update."""
        return R.gaussian_update(start.astype(np.float64), self.sigma, rng).astype(np.float32)


@BEHAVIORS.register
class Scale(BehaviorConfig):
    """``{name: scale, s: 10.0}``: send ``start + s·(v − start)`` (model replacement)."""

    name: Literal["scale"] = "scale"
    s: PositiveFloat = Field(default=10.0, description="boost of the update")

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Boost the update."""
        return R.scale_update(v.astype(np.float64), start.astype(np.float64), self.s).astype(np.float32)


@BEHAVIORS.register
class LabelFlip(BehaviorConfig):
    """``{name: label_flip}``: train on labels ``C − 1 − y`` (data poisoning)."""

    name: Literal["label_flip"] = "label_flip"
    flips_labels: ClassVar[bool] = True


@BEHAVIORS.register
class Alie(BehaviorConfig):
    """``{name: alie, z: 1.0}``: colluders send ``μ − z·σ`` (per coordinate) of the honest updates of the
    same aggregation (Baruch et al. 2019; the omniscient variant: the aggregator forms it)."""

    name: Literal["alie"] = "alie"
    colluding: ClassVar[bool] = True
    z: float = Field(default=1.0, ge=0.0, description="how many standard deviations from the mean")


@BEHAVIORS.register
class FreeRider(BehaviorConfig):
    """``{name: free_rider}``: send the start model back (no work, full weight)."""

    name: Literal["free_rider"] = "free_rider"

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The start model."""
        return np.array(start, dtype=np.float32, copy=True)


@BEHAVIORS.register
class NonFinite(BehaviorConfig):
    """``{name: nonfinite}``: send NaN everywhere."""

    name: Literal["nonfinite"] = "nonfinite"

    def transform(self, v: np.ndarray, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """NaN."""
        return np.full(v.shape, np.nan, dtype=np.float32)
