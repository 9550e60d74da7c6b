"""Scenario sections of where the emulation runs: ``runtime`` and its ``checkpoint``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from hierfl.config.base import ConfigModel
from hierfl.executors import EXECUTORS
import hierfl.methods  # noqa: F401  (every shipped method registers its plug-ins)


class CheckpointConfig(ConfigModel):
    """``runtime.checkpoint``: how often the driver saves a resumable checkpoint (``checkpoint.pkl``).

    A checkpoint is taken between two events, so it never changes a result; it is what
    ``hierfl resume`` continues from and what the driver rolls back to when a Ray actor or node
    is lost. One is always taken before the first event. ``every_s`` counts real (wall-clock)
    seconds; ``every_cloud_aggregations`` counts rounds; with both, whichever comes first.
    """

    enabled: bool = Field(default=True, description="false: no checkpoint, no resume, no recovery from lost actors")
    every_s: PositiveFloat | None = Field(default=60.0, ge=1.0,
                                          description="wall-clock seconds between checkpoints (at least 1)")
    every_cloud_aggregations: PositiveInt | None = Field(
        default=None, description="cloud aggregations (rounds) between checkpoints")
    max_recoveries: NonNegativeInt = Field(
        default=10, description="lost actors or nodes the driver recovers from before the run fails")


class RuntimeConfig(ConfigModel):
    """Where the emulation runs. Results do not depend on these settings, except ``fast_path`` (opt-in) and
    ``device``, whose numbers agree with the default path's within float tolerance, and ``precision``
    (``bf16``: accuracy within a stated tolerance of ``fp32``'s); emulated times, event order and counters
    never depend on any of them (docs/howto/batched-learning.md)."""

    executor: EXECUTORS.name_field() = Field(  # type: ignore[valid-type]
        default="ray", description="a registered executor (hierfl.executors): ray, local")
    workers: PositiveInt | Literal["auto"] = Field(default="auto", description="training processes (auto = the CPUs the Ray cluster offers)")
    address: str | None = Field(default=None, description="an existing Ray cluster, e.g. 'auto' or 'ray://host:10001'")
    torch_threads: PositiveInt = Field(default=1, description="torch threads per training job")
    fast_path: bool = Field(
        default=False, description="train a host's jobs in groups on stacked parameters (logreg/MLP on CPU: "
                                   "hand-written, 12-15x faster for small models; any model, and every model on "
                                   "CUDA: torch.func vmap); numbers differ from the default path within float "
                                   "tolerance but stay identical across executors and worker counts")
    device: Literal["cpu", "cuda", "auto"] = Field(
        default="cpu", description="torch device of training (jobs one at a time and runtime.fast_path's groups) "
                                   "and evaluation: cpu, cuda, or auto (cuda where torch.cuda.is_available(), else "
                                   "cpu); emulated times never depend on it, the numbers agree within float tolerance")
    precision: Literal["fp32", "bf16"] = Field(
        default="fp32", description="arithmetic of every forward pass (training, one job or batched, and "
                                    "evaluation): fp32, or bf16 (torch.autocast to bfloat16; parameters, "
                                    "gradients and optimizer state stay fp32); bf16 is faster on GPUs with "
                                    "bfloat16 tensor cores and on CPUs with AMX, changes accuracy within a "
                                    "stated tolerance, never emulated times")
    cpu_batching: Literal["auto", "vmap"] = Field(
        default="auto", description="with runtime.fast_path on a CPU: auto trains Linear/ReLU chains (logreg, "
                                    "mlp) in groups and every other model (cnn, char_lstm) job by job, exactly as "
                                    "without the fast path, because vmap's grouped convolutions and LSTMs are "
                                    "slower than one job after another on CPU kernels; vmap batches every model "
                                    "with torch.func on the CPU as on a GPU (for tests and benchmarks)")
    group_max: PositiveInt | Literal["auto"] = Field(
        default="auto", description="with runtime.fast_path: the most jobs in one group; auto resolves it once at "
                                    "start to as many jobs as fit in half the training device's total memory, from "
                                    "the model's size, the batch and the optimizer's state (at least 1, no fixed "
                                    "upper bound: a round whose jobs start together is one group when memory "
                                    "allows), and config.yaml records the number; groups never depend on free "
                                    "memory, timing or the number of workers")
    gpus_per_host: NonNegativeFloat = Field(
        default=0.0, description="Ray executor: GPUs reserved by each device host actor (a fraction in (0, 1] "
                                 "shares a GPU, floor(1/share) hosts per GPU; above 1 a whole number); 0 = none, "
                                 "and hosts then see no GPU. workers x gpus_per_host that the cluster's GPUs "
                                 "cannot place is refused at start (exit status 2)")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig,
                                         description="resumable checkpoints (hierfl resume) and recovery")
