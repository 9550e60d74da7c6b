"""Carry: each device remembers its last update and adds a share of it to the next one.

A trainer plug-in with per-device state, written only against :mod:`hierfl.plugin` (the tutorial
``docs/tutorials/own-method.md``, part 5, walks through it). Load it with
``hierfl run scenario.yaml --plugin my_trainer.py --set training.trainer=carry``.

``training.trainer: {name: carry, beta: 0.5}``: a device's job trains as plain SGD from the model it
was given, ``w_sgd``, then sends ``w = w_sgd + β·u_prev``, where ``u_prev`` is the update it sent last
time (zeros before its first job); it keeps ``u = w − w_start`` for the next one. This is a momentum
across rounds kept on the device, a toy for the tutorial rather than a published method. ``u`` is
**per-device state**: hierfl keeps it in the device's home host, checkpoints it with the run,
counts it in ``summary.json``'s ``device_state`` and forgets it when a device is re-grouped with
``migration.device_state: reset``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from hierfl.plugin import TRAINERS, JobContext, JobMethod, TrainerConfig

HIERFL_API = "1"  # the plug-in API major version this file is written for


@dataclass(frozen=True)
class CarryJob(JobMethod):
    """One device job of Carry: plain SGD, then ``β`` times the device's previous update added on."""

    beta: float
    # the job reads and writes its device's state: it runs on the device's home host, never in a batch
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("carry_last",)

    def run(self, ctx: JobContext) -> tuple[np.ndarray, dict[str, float]]:
        plain = replace(ctx.spec, method=None)  # the same job as plain training: data order, lr, clipping
        trained, stats = ctx.trainer.train(ctx.params, ctx.x, ctx.y, plain, ctx.seed, rows=ctx.rows)
        last = ctx.state.get(ctx.device, "carry_last", trained)  # zeros before the device's first job
        sent = (trained + np.float32(self.beta) * last).astype(np.float32)
        ctx.state.put(ctx.device, carry_last=(sent - np.asarray(ctx.params, dtype=np.float32)).astype(np.float32))
        return ctx.finish(sent, stats)


@TRAINERS.register
class CarryTrainer(TrainerConfig):
    """``training.trainer: {name: carry, beta: 0.5}``: every job adds ``β`` times the device's last update."""

    name: Literal["carry"] = "carry"
    beta: float = Field(default=0.5, ge=0.0, lt=1.0, allow_inf_nan=False,
                        description="share of the device's previous update added to the next one")

    def spec_fields(self) -> dict[str, Any]:
        """Every job of the run is a Carry job."""
        return {"method": CarryJob(float(self.beta))}
