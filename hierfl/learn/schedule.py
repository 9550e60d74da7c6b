"""A learning rate's schedule over rounds: the scenario's ``training.lr_schedule`` (the local rate as a function of
the round a job belongs to) and a server optimizer's ``lr_schedule`` (its rate over its aggregator's rounds).

A job's round ``r`` is the number of cloud aggregations the run has completed when the job starts. In a
synchronous protocol that is the (0-based) round the job trains in; in an asynchronous one it is the
version of the cloud model at the job's start — the model the job starts from, or the one its edge model
descends from. A job then trains with its learning rate (``training.lr``, or the rate a protocol gives its
own jobs) times ``factor(r)``, a pure function of ``r`` (never of time or of the model):

* ``constant``: 1 (the default; a run without a schedule);
* ``exponential``: ``gamma^r`` (e.g. 0.998, the per-round client decay in the reference code of some drift-correcting and data-free distillation methods);
* ``step``: ``factor^⌊r / every⌋``;
* ``cosine``: ``floor + (1 − floor)·(1 + cos(π·min(r, rounds)/rounds))/2`` — cosine annealing (Loshchilov &
  Hutter, "SGDR", ICLR 2017) from the full rate to ``floor`` times it over ``rounds`` rounds, ``floor`` after.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from hierfl.config.base import ConfigModel, ReadWith, name_shorthand

__all__ = ["LRScheduleConfig"]


class LRScheduleConfig(ConfigModel):
    """``training.lr_schedule: {name: exponential, gamma: 0.998}`` (or ``step``, ``cosine``; ``constant`` by default)."""

    name: Literal["constant", "exponential", "step", "cosine"] = Field(
        default="constant", description="constant | exponential (gamma^r) | step (factor^(r // every)) | "
                                        "cosine (to floor over rounds); r = the job's round")
    gamma: float = Field(default=0.998, gt=0.0, le=1.0,
                         description="exponential: the per-round factor (design default 0.998: the per-round client "
                                     "decay of some methods' reference code)")
    every: PositiveInt = Field(default=30, description="step: rounds between two decays (design default 30)")
    factor: float = Field(default=0.1, gt=0.0, le=1.0, description="step: the factor of each decay (design default 0.1)")
    rounds: PositiveInt = Field(default=100, description="cosine: rounds the annealing takes (design default 100)")
    floor: float = Field(default=0.0, ge=0.0, lt=1.0,
                         description="cosine: the factor reached after `rounds` rounds (a fraction of the rate)")

    read_only_with: ClassVar[dict[str, ReadWith]] = {
        "gamma": ReadWith("name", ("exponential",)), "every": ReadWith("name", ("step",)),
        "factor": ReadWith("name", ("step",)), "rounds": ReadWith("name", ("cosine",)),
        "floor": ReadWith("name", ("cosine",)),
    }

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return name_shorthand(data)  # lr_schedule: constant

    @property
    def constant(self) -> bool:
        """Whether every round trains at its full rate (no job's spec changes)."""
        return self.name == "constant"

    def scale(self, round_: int) -> float:
        """``factor(r)``: what a job of round ``round_`` multiplies its learning rate by."""
        if self.name == "exponential":
            return float(self.gamma ** round_)
        if self.name == "step":
            return float(self.factor ** (round_ // self.every))
        if self.name == "cosine":
            t = min(round_, self.rounds) / self.rounds
            return self.floor + (1.0 - self.floor) * (1.0 + math.cos(math.pi * t)) / 2.0
        return 1.0
