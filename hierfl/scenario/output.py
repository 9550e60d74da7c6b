"""Scenario section ``output``: what a run writes besides its always-whole files (trace lanes, list
limits, counter sampling, TensorBoard)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveInt, field_validator

from hierfl.config.base import ConfigModel


class TraceDevices(ConfigModel):
    """``output.trace: {devices: K}``: every edge server and the cloud, plus K device lanes (a seeded sample)."""

    devices: PositiveInt = Field(description="device lanes kept in trace.json (a seeded sample)")


TRACE_AUTO_DEVICES = 200  # device lanes `output.trace: auto` keeps when there are more devices than that
LIST_LIMIT = 200  # `output.list_limit`'s default (hierfl.output.bounded)
TRACE_AUTO_COUNTER_S = 0.1  # `output.trace_counter_s: auto` once the trace samples device lanes


class OutputConfig(ConfigModel):
    """What the run writes besides the always-whole metrics, summary, devices.csv and clusters.jsonl."""

    trace: Literal["auto", "all", "none"] | TraceDevices = Field(
        default="auto", description=f"device lanes of trace.json: all, none, {{devices: K}} (a seeded sample), or "
                                    f"auto = all up to {TRACE_AUTO_DEVICES} devices, else a sample of that many")
    list_limit: PositiveInt | None = Field(
        default=LIST_LIMIT,
        description="per-update lists (ids, weights, staleness, participants, dropped_ids) longer than this "
                    "in a metrics line or trace event are written as a summary {count, min, max, mean}; "
                    "null: always whole")
    trace_counter_s: Literal["auto"] | NonNegativeFloat = Field(
        default="auto",
        description="queue-length counters in trace.json: at most about one sample per this many virtual "
                    "seconds per queue (values that lasted less are dropped); 0: every change; auto = 0 "
                    "while the trace keeps every device lane, else 0.1")
    tensorboard: bool = Field(
        default=False, description="also write the eval lines (accuracy, loss, staleness, queue lengths) as "
                                   "TensorBoard scalars in <run>/tensorboard, against round and virtual time; "
                                   "needs the tensorboard extra")

    @field_validator("tensorboard")
    @classmethod
    def _tensorboard_installed(cls, value: bool) -> bool:
        import importlib.util

        if value and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("needs the tensorboard package: pip install 'hierfl[tensorboard]'")
        return value

    def counter_s(self, trace_devices: set[int] | None) -> float:
        """``trace_counter_s`` resolved: ``auto`` is 0 when every device lane is kept, else 0.1 s."""
        if self.trace_counter_s != "auto":
            return float(self.trace_counter_s)
        return 0.0 if trace_devices is None else TRACE_AUTO_COUNTER_S

    def trace_devices(self, num_devices: int, seed: int) -> set[int] | None:
        """The device lanes to keep (None: all), drawn from stream ``("output.trace",)``."""
        if self.trace == "all":
            return None
        if self.trace == "none":
            return set()
        k = TRACE_AUTO_DEVICES if self.trace == "auto" else self.trace.devices
        if num_devices <= k:
            return None
        from hierfl.core.rng import stream

        return {int(d) for d in stream(seed, "output.trace").choice(num_devices, size=k, replace=False)}
