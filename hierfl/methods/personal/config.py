"""The ``training.trainer`` configs of the personalised trainers: ``fedper``, ``lg_fedavg``, ``fedmeta``,
``fedavgmeta`` (docs/explanation/algorithms.md §5.10, FedMeta arXiv 1802.07876). Each hands its jobs a
:class:`~hierfl.methods.personal.math.PersonalJob` (job runner: :mod:`hierfl.methods.personal.job`). What
stays on a device is never sent: a message carries only the global parameters.

These are config models only (no torch): the runtime reads :meth:`TrainerConfig.spec_fields`
through :class:`~hierfl.core.work.TrainSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from hierfl.config.base import rename_alias
from hierfl.core.message import MODEL, MODEL_ONLY, Part, MessageLayout
from hierfl.methods.personal.math import PersonalJob
from hierfl.learn.trainers import TRAINERS, TrainerConfig

__all__ = ["FedPerTrainer", "LGFedAvgTrainer", "FedMetaTrainer", "FedAvgMetaTrainer"]


LayerSplit = int | list[str]


def _layers(value: LayerSplit) -> int | tuple[str, ...]:
    return value if isinstance(value, int) else tuple(value)


class _PersonalBase(TrainerConfig):
    """Shared by the personalised trainers: the :class:`~hierfl.methods.personal.math.PersonalJob` of their jobs."""

    # a split by layers reads the model vector's layout as layers: running statistics, which follow every
    # parameter in it, would be taken for a layer of their own (hierfl.assemble.loops)
    module_loops: ClassVar[Mapping[str, str]] = {
        "running_stats": "it splits the model vector by layers, where they would count as a layer"}

    def personal_spec(self) -> PersonalJob:
        """What a job does on its device."""
        raise NotImplementedError

    def spec_fields(self) -> dict[str, Any]:
        """``method`` (its ``split_seed`` is set from the scenario seed by the build)."""
        return {"method": self.personal_spec()}


# Meta-SGD's global vector: θ, then the learned per-parameter step sizes α, averaged with it
STEP_SIZES = MessageLayout((Part(MODEL), Part("step_sizes")))


@TRAINERS.register
class FedPerTrainer(_PersonalBase):
    """``trainer: {name: fedper, head_layers: 1}``: FedPer (arXiv 1912.00818) — global base, local head.

    ``head_layers``: the last k layers (modules owning parameters), or a list of module names
    (``num_head_layers`` is an alias) [D: 1, docs/explanation/algorithms.md §5.10]."""

    name: Literal["fedper"] = "fedper"
    layer_key: ClassVar[str | None] = "training.trainer.head_layers"
    head_layers: int | list[str] = Field(default=1, description="local head: last k layers, or module names")

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        return rename_alias(data, "num_head_layers", "head_layers")

    @model_validator(mode="after")
    def _some_head(self) -> FedPerTrainer:
        if isinstance(self.head_layers, int) and self.head_layers < 1:
            raise ValueError("head_layers must be >= 1 (0 layers kept local is FedAvg: use trainer sgd)")
        if isinstance(self.head_layers, list) and not self.head_layers:
            raise ValueError("head_layers: name at least one module")
        return self

    def personal_spec(self) -> PersonalJob:
        """A split keeping the head."""
        return PersonalJob("split", _layers(self.head_layers), from_end=True)


@TRAINERS.register
class LGFedAvgTrainer(_PersonalBase):
    """``trainer: {name: lg_fedavg, global_layers: 2}``: LG-FedAvg (arXiv 2001.01523) — local
    representation, global top ``global_layers`` layers (or the list of module names that are
    global). The paper averages the global layers unweighted: set ``protocol.weighting: uniform``
    (FedAvg) as ``scenarios/lg_fedavg.yaml`` does [V: §5.10]."""

    name: Literal["lg_fedavg"] = "lg_fedavg"
    layer_key: ClassVar[str | None] = "training.trainer.global_layers"
    global_layers: int | list[str] = Field(default=2, description="global top: last k layers, or module names")
    warmup_rounds: int = Field(default=0, ge=0, description="first cloud rounds trained as plain FedAvg (the whole "
                                                            "model global); devices then start from that model")

    @model_validator(mode="before")
    @classmethod
    def _alias(cls, data: Any) -> Any:
        return rename_alias(data, "num_layers_keep", "global_layers")

    @model_validator(mode="after")
    def _some_global(self) -> LGFedAvgTrainer:
        if isinstance(self.global_layers, int) and self.global_layers < 1:
            raise ValueError("global_layers must be >= 1")
        if isinstance(self.global_layers, list) and not self.global_layers:
            raise ValueError("global_layers: name at least one module")
        return self

    def personal_spec(self) -> PersonalJob:
        """A split keeping everything but the top."""
        if isinstance(self.global_layers, int):
            return PersonalJob("split", self.global_layers, from_end=False, warmup_rounds=self.warmup_rounds)
        # names of global layers: resolved against the model by the host (the complement stays local)
        return PersonalJob("split", ("!",) + tuple(self.global_layers), from_end=False,
                            warmup_rounds=self.warmup_rounds)


class _MetaKnobs(_PersonalBase):
    """Support/query split, the inner step and optional personal layers (FedMeta + FedPer)."""

    # the support/query steps (and fine-tuning before a device is tested) are loops of their own through
    # functional_call, which would differentiate the running statistics as parameters
    module_loops: ClassVar[Mapping[str, str]] = {
        "dropout": "its support/query and test-time steps run loops of their own",
        "running_stats": "its support/query and test-time steps treat every entry as a parameter"}

    layer_key: ClassVar[str | None] = "training.trainer.head_layers"
    support_fraction: float = Field(default=0.2, gt=0.0, lt=1.0,
                                    description="share of each device's samples in its support set")
    inner_lr: float = Field(default=0.01, gt=0.0, allow_inf_nan=False,
                            description="α of the adaptation step (Meta-SGD: α's initial value)")
    inner_steps: int = Field(default=1, ge=1, description="adaptation steps on the support set")
    head_layers: int | list[str] = Field(default=0, description="personal layers kept on the device (FedPer): "
                                                                "last k layers or module names; 0 = none")

    @model_validator(mode="after")
    def _head(self) -> _MetaKnobs:
        if isinstance(self.head_layers, int) and self.head_layers < 0:
            raise ValueError("head_layers must be >= 0")
        return self


@TRAINERS.register
class FedMetaTrainer(_MetaKnobs):
    """``trainer: {name: fedmeta, learner: maml | meta_sgd, first_order: false, support_fraction: 0.2}``:
    FedMeta (Chen et al., arXiv 1802.07876) with MAML or Meta-SGD; ``head_layers`` > 0 keeps
    personal layers on the device (FedMeta + FedPer). The outer rate is ``training.lr``."""

    name: Literal["fedmeta"] = "fedmeta"
    learner: Literal["maml", "meta_sgd"] = Field(default="maml", description="maml (fixed α) or meta_sgd (learned α)")
    first_order: bool = Field(default=False, description="MAML without the second-order term")

    @property
    def layout(self) -> MessageLayout:
        """Meta-SGD's global vector carries the learned step sizes α after θ, averaged with it (with layers kept on
        the device, the job method's ``initial_vector`` sizes the messages: only the global values travel)."""
        return STEP_SIZES if self.learner == "meta_sgd" else MODEL_ONLY

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The meta-update is a plain gradient step at ``training.lr``: another optimiser or a clip would be ignored."""
        t = scenario.training
        return [(f"training.{key}", f"fedmeta's outer step is plain SGD at training.lr, so {key} would be ignored; "
                 "allowed: its default, or leave it out", getattr(t, key))
                for key in ("optimizer", "nesterov", "clip_norm") if t.non_default(key)]

    def personal_spec(self) -> PersonalJob:
        """The meta-learner."""
        return PersonalJob(self.learner, _layers(self.head_layers), from_end=True,
                            support_fraction=self.support_fraction, inner_lr=self.inner_lr,
                            inner_steps=self.inner_steps, first_order=self.first_order)


@TRAINERS.register
class FedAvgMetaTrainer(_MetaKnobs):
    """``trainer: {name: fedavgmeta, inner_lr: 0.01, inner_steps: 1}``: FedAvgMeta (FedMeta's baseline) —
    plain SGD jobs; evaluation fine-tunes on the device's support set first. ``head_layers`` > 0:
    with FedPer's personal layers. Without per-device evaluation (``data.local_test_fraction`` and
    ``data.test_devices`` 0) ``support_fraction``, ``inner_lr`` and ``inner_steps`` are refused."""

    name: Literal["fedavgmeta"] = "fedavgmeta"

    def module_loop_limits(self, scenario: Any) -> Mapping[str, str]:
        """Jobs are plain training; only the fine-tuning before a device is tested on its own data runs a loop of
        its own (none without per-device evaluation), and a split by layers (``head_layers``) reads the layout."""
        data = scenario.data
        if data.local_test_fraction > 0 or data.test_devices > 0:
            return type(self).module_loops
        return _PersonalBase.module_loops if self.head_layers else {}

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The fine-tuning knobs act only where devices are evaluated on their own data."""
        data = scenario.data
        if data.local_test_fraction > 0 or data.test_devices > 0:
            return []
        return [(f"training.trainer.{key}", "fedavgmeta fine-tunes a device only to evaluate it, and no device is "
                 "evaluated on its own (data.local_test_fraction: 0, data.test_devices: 0), so it would be ignored; "
                 "allowed: set data.local_test_fraction or data.test_devices (or leave it out)", getattr(self, key))
                for key in ("support_fraction", "inner_lr", "inner_steps") if self.non_default(key)]

    def personal_spec(self) -> PersonalJob:
        """Fine-tuning at evaluation."""
        return PersonalJob("finetune", _layers(self.head_layers), from_end=True,
                            support_fraction=self.support_fraction, inner_lr=self.inner_lr,
                            inner_steps=self.inner_steps)
