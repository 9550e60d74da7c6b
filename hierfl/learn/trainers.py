"""Local-trainer plug-ins (``training.trainer``): what a device's job optimises and what it sends back.

This module holds the registry, the base class every trainer config subclasses and the two trainers that
are no method of their own: ``sgd`` (minibatch SGD with ``training.momentum`` and
``training.weight_decay``, the default) and ``none`` (timing only). Each method's trainer lives in its
own package under :mod:`hierfl.methods` (``config.py``) and registers here when imported (the
scenario schema imports them all).

These are config models only (no torch): the runtime reads :meth:`TrainerConfig.spec_fields`
through :class:`~hierfl.core.work.TrainSpec`, and a trainer whose jobs do more than plain training
hands them a job method (:mod:`hierfl.core.method`) there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry
from hierfl.core.message import MODEL_ONLY, MessageLayout

__all__ = ["TRAINERS", "TrainerConfig", "SGDTrainer", "NoTrainer", "one_model"]

TRAINERS: Registry = Registry("trainer")


class TrainerConfig(ConfigModel):
    """Base of the local-trainer configs.

    Class attributes state what the trainer needs from the rest of the scenario (checked at load
    time by :mod:`hierfl.scenario.checks`): ``needs_control_variates`` — a protocol that carries
    control variates; ``needs_every_update`` — why every trained update must arrive
    (no straggler policy that drops updates, no devices going offline), or None.
    """

    needs_control_variates: ClassVar[bool] = False
    needs_every_update: ClassVar[str | None] = None
    # why the aggregator reads each device's update on its own (secure aggregation, which reveals only
    # their sum, is refused), or None
    reads_each_update: ClassVar[str | None] = None
    # no model is trained or evaluated (timing-only runs): accuracy targets make no sense
    timing_only: ClassVar[bool] = False
    # what of a model this trainer's own loops on the torch module (outside the plain local loop) cannot
    # honour, feature → why: "dropout" (random layers: such a loop would draw their masks from torch's
    # global generator) and "running_stats" (floating-point buffers: batch norm's running statistics).
    # Checked against `model` at build time (hierfl.assemble.loops); empty: every model trains
    module_loops: ClassVar[Mapping[str, str]] = {}

    def module_loop_limits(self, scenario: Any) -> Mapping[str, str]:
        """The :attr:`module_loops` of this configuration in ``scenario`` (a setting may switch a loop off)."""
        return type(self).module_loops

    @property
    def layout(self) -> MessageLayout:
        """What every model message of a run with this trainer carries (:mod:`hierfl.core.message`): the model
        alone by default; its :meth:`~hierfl.core.message.MessageLayout.nbytes` sizes every model transfer."""
        return MODEL_ONLY

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`~hierfl.core.work.TrainSpec` fields this trainer sets."""
        return {}

    # the key a job method's settings that do not fit the model are reported at (JobMethod.initial_vector)
    layer_key: ClassVar[str | None] = None

    def round_rule(self, members: int, tier: str) -> Any:
        """The rule an aggregator of ``tier`` applies at the end of a synchronous round of updates from
        ``members`` devices, in place of a server optimizer (a drift correction), or None (plain averaging)."""
        return None

    @property
    def edge_controls(self) -> bool:
        """Whether an edge server keeps its own server control ``c_e`` for its devices, instead of
        relaying its devices' control deltas to the cloud's ``c`` (plain control variates)."""
        return False

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """``(key path, message, value)`` of each setting elsewhere in the scenario this trainer refuses."""
        return []

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """A job's work relative to plain SGD on the same samples (``TrainSpec.work_factor``): 1 unless the
        trainer's loss costs extra passes. ``call(fn, *args)`` runs a model function (FLOPs) where torch is."""
        return 1.0



@TRAINERS.register
class NoTrainer(TrainerConfig):
    """``trainer: none``: timing only. Every time, selection, staleness, queue and counter is what a
    training run of the same scenario gives, but no job is run (an update is the model the job
    started from) and no model is evaluated (evaluation lines carry ``accuracy: null``). For system
    studies at 10^5–10^6 devices: round times, queue lengths, contention, churn."""

    timing_only: ClassVar[bool] = True
    name: Literal["none"] = "none"

    def spec_fields(self) -> dict[str, Any]:
        """``train: false``."""
        return {"train": False}


@TRAINERS.register
class SGDTrainer(TrainerConfig):
    """``trainer: sgd``: plain minibatch SGD (momentum and weight decay from ``training:``)."""

    name: Literal["sgd"] = "sgd"

def one_model(scenario: Any, name: str) -> list[tuple[str, str, Any]]:
    """Per-device architectures (``models:``) are refused: the trainer's model feature is ``model``'s."""
    if getattr(scenario, "models", None):
        return [("models", f"{name} trains the one architecture of `model`; allowed: no per-device models",
                 sorted(scenario.models))]
    return []
