"""Scenario sections of the learning run: ``training`` (local SGD), ``evaluation`` and ``stop``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from hierfl.config.base import ConfigModel, rename_alias
from hierfl.learn.trainers import TRAINERS, SGDTrainer
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.policies.straggler import MIN_INTERVAL_S


class TrainingConfig(ConfigModel):
    """Local training on each device: minibatch SGD."""

    epochs: PositiveInt | None = Field(default=None, description="local epochs per job (1 when neither epochs nor steps is set)")
    steps: PositiveInt | None = Field(default=None, description="local SGD steps per job instead of epochs")
    batch_size: PositiveInt | None = Field(default=32, description="null = full batch (one gradient step per epoch)")
    lr: PositiveFloat = Field(default=0.01, description="local learning rate")
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0, description="SGD momentum")
    weight_decay: float = Field(default=0.0, ge=0.0, description="L2 weight decay")
    optimizer: Literal["sgd"] = Field(default="sgd", description="local optimizer (sgd)")
    trainer: TRAINERS.union() = Field(  # type: ignore[valid-type]
        default=SGDTrainer(), description="local trainer plug-in (see Trainers)")

    @model_validator(mode="before")
    @classmethod
    def _local_steps_alias(cls, data: Any) -> Any:
        # `local_steps` (the name ARCHITECTURE.md's example uses) is `steps`
        return rename_alias(data, "local_steps", "steps")

    @model_validator(mode="after")
    def _one_budget(self) -> TrainingConfig:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("set either epochs or steps, not both")
        return self

    @property
    def local_epochs(self) -> int | None:
        """Epochs per job (1 when neither epochs nor steps is set)."""
        return self.epochs if self.epochs is not None or self.steps is not None else 1


class EvaluationConfig(ConfigModel):
    """When the global model is evaluated on the held-out test set."""

    every_s: PositiveFloat | None = Field(default=None, description="null = only at start and end")
    target_accuracy: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="the accuracy time_to_target_s and rounds_to_target are measured against (the run goes on; "
                    "stop.target_accuracy stops it)")
    # personalisation: what per-device evaluation (data.local_test_fraction) costs the devices in virtual time
    device_eval_cost: Literal["free", "forward"] = Field(
        default="free", description="free: per-device evaluation takes no virtual time; forward: each device is "
                                    "busy for a forward pass over its held-out rows (hierfl.driver.eval_cost)")

    @field_validator("every_s")
    @classmethod
    def _floor(cls, value: float | None) -> float | None:
        # 1e-9 s means billions of evaluations: a typo, never a plan (reliability)
        if value is not None and value < MIN_INTERVAL_S:
            raise ValueError(f"must be at least {MIN_INTERVAL_S:g} s (one evaluation per virtual millisecond)")
        return value


class StopConfig(ConfigModel):
    """When the run ends: whichever limit is reached first."""

    virtual_time_s: PositiveFloat | None = Field(default=None, description="virtual seconds to emulate")
    rounds: PositiveInt | None = Field(default=None, description="cloud aggregations")
    target_accuracy: float | None = Field(
        default=None, gt=0.0, le=1.0,
        description="stop the run at the first evaluation at or above this test accuracy (stop_reason "
                    "target_accuracy); time_to_target_s is measured against evaluation.target_accuracy")
    epsilon: PositiveFloat | None = Field(
        default=None, description="privacy budget (privacy.dp): the run ends before a cloud aggregation would "
                                  "spend more than this ε at privacy.dp.delta (stop_reason epsilon)")

    @model_validator(mode="after")
    def _some_limit(self) -> StopConfig:
        if self.virtual_time_s is None and self.rounds is None and self.epsilon is None:
            raise ValueError("set stop.virtual_time_s, stop.rounds or stop.epsilon (a run needs a bound)")
        return self
