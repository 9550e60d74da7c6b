"""Scenario sections of the learning run: ``training`` (local SGD), ``evaluation`` and ``stop``."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from hierfl.config.base import ConfigModel, ReadWith, rename_alias
from hierfl.learn.trainers import TRAINERS, SGDTrainer
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)
from hierfl.policies.straggler import MIN_INTERVAL_S
from hierfl.learn.schedule import LRScheduleConfig


class TrainingConfig(ConfigModel):
    """Local training on each device: minibatch SGD (or Adam / AdamW), a learning-rate schedule, gradient clipping."""

    epochs: PositiveInt | None = Field(default=None, description="local epochs per job (1 when neither epochs nor steps is set)")
    steps: PositiveInt | None = Field(default=None, description="local SGD steps per job instead of epochs")
    batch_size: PositiveInt | None = Field(default=32, description="null = full batch (one gradient step per epoch)")
    lr: PositiveFloat = Field(default=0.01, description="local learning rate")
    momentum: float = Field(default=0.0, ge=0.0, lt=1.0, description="SGD momentum")
    weight_decay: float = Field(default=0.0, ge=0.0,
                                description="weight decay: L2 (sgd, adam), decoupled w ← w·(1 − lr·wd) (adamw)")
    optimizer: Literal["sgd", "adam", "adamw"] = Field(
        default="sgd", description="local optimizer, torch's arithmetic (state: optimizer_state): sgd "
                                   "(torch.optim.SGD: momentum, nesterov, weight_decay), adam / adamw "
                                   "(torch.optim.Adam / AdamW: betas, eps, weight_decay)")
    nesterov: bool = Field(default=False, description="sgd: Nesterov momentum (needs momentum > 0)")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="adam / adamw: the moments' decay rates")
    eps: float = Field(default=1e-8, gt=0.0, description="adam / adamw: added to the denominator")
    optimizer_state: Literal["job", "per_device"] = Field(
        default="job", description="job: the optimizer's state (momentum buffer, Adam's moments) is fresh for every "
                                   "job; per_device: each device keeps it across its jobs (in its host, "
                                   "checkpointed, forgotten with migration.device_state: reset)")
    lr_schedule: LRScheduleConfig = Field(
        default=LRScheduleConfig(), description="the learning rate per round (a job's round: the cloud aggregations "
                                                "done when it starts); constant by default")
    clip_norm: float | None = Field(
        default=None, gt=0.0, description="max-norm clipping of each local step's whole gradient "
                                          "(torch.nn.utils.clip_grad_norm_); null: none")
    trainer: TRAINERS.union() = Field(  # type: ignore[valid-type]
        default=SGDTrainer(), description="local trainer plug-in (see Trainers)")

    @model_validator(mode="before")
    @classmethod
    def _local_steps_alias(cls, data: Any) -> Any:
        # `local_steps` (the name ARCHITECTURE.md's example uses) is `steps`
        return rename_alias(data, "local_steps", "steps")

    read_only_with: ClassVar[dict[str, ReadWith]] = {
        "momentum": ReadWith("optimizer", ("sgd",)), "eps": ReadWith("optimizer", ("adam", "adamw")),
    }

    def ignored_settings(self) -> list[tuple[str, str, Any]]:
        """``read_only_with``'s, and ``betas`` without Adam, ``nesterov`` without SGD momentum (refused)."""
        out = super().ignored_settings()
        if self.non_default("betas") and self.optimizer == "sgd":
            out.append(("betas", "read only with optimizer: adam, adamw; with optimizer: sgd it would be ignored; "
                        "remove it (or set optimizer: adam)", list(self.betas)))
        if self.nesterov and (self.optimizer != "sgd" or self.momentum == 0):
            out.append(("nesterov", f"Nesterov's form of SGD momentum: with optimizer: {self.optimizer} and momentum: "
                        f"{self.momentum:g} it would be ignored; allowed with optimizer: sgd and momentum > 0",
                        self.nesterov))
        return out

    @model_validator(mode="after")
    def _one_budget(self) -> TrainingConfig:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("set either epochs or steps, not both")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {list(self.betas)}")
        if self.optimizer_state == "per_device" and self.trainer.spec_fields().get("method") is not None:
            raise ValueError(f"optimizer_state per_device keeps the state of plain training jobs; trainer "
                             f"{self.trainer.name} runs jobs of its own; allowed: job")
        if self.clip_norm is not None and self.trainer.spec_fields().get("clip_norm") is not None:
            raise ValueError(f"clip_norm is set both here and by trainer {self.trainer.name} (its own clip_norm); "
                             "set it in one place")
        return self

    def spec_fields(self) -> dict[str, Any]:
        """The optimiser's :class:`~hierfl.core.work.TrainSpec` fields (the trainer's clip norm, if it sets one,
        wins: both set is refused above)."""
        fields: dict[str, Any] = {"optimizer": self.optimizer, "nesterov": self.nesterov,
                                  "betas": tuple(float(b) for b in self.betas), "eps": float(self.eps),
                                  "optimizer_state": "device" if self.optimizer_state == "per_device" else "job"}
        if self.clip_norm is not None:
            fields["clip_norm"] = float(self.clip_norm)
        return fields

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
