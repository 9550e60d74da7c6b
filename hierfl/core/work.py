"""How much work a local training job is, and how long jobs and transfers take (pure formulas).

The emulator's timing model (documented in the README):

* compute time  = samples processed / speed_sps
* transfer time = latency_ms / 1000 + bytes · 8 / (bandwidth_mbps · 10⁶)
* model bytes   = 4 × parameter count (float32)

``samples_processed`` is the number of per-sample gradient evaluations the local trainer
really performs, so virtual time and the real computation agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "TrainSpec", "effective_batch", "num_steps", "samples_processed",
    "compute_time_s", "transfer_time_s", "model_bytes",
]


@dataclass(frozen=True)
class TrainSpec:
    """One local training job: minibatch SGD for ``epochs`` epochs or ``steps`` steps."""

    epochs: int | None = 1
    steps: int | None = None
    batch_size: int | None = 32     # None = full batch (FedSGD)
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if (self.epochs is None) == (self.steps is None):
            raise ValueError("exactly one of epochs / steps must be set")
        if (self.epochs or self.steps or 0) < 1:
            raise ValueError("epochs / steps must be >= 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError("batch_size must be >= 1 or None")


def effective_batch(n: int, spec: TrainSpec) -> int:
    """The batch size actually used on ``n`` samples: ``min(batch_size or n, n)``."""
    if n < 1:
        raise ValueError(f"a device needs at least one sample, got {n}")
    return min(spec.batch_size or n, n)


def num_steps(n: int, spec: TrainSpec) -> int:
    """SGD steps of one job: ``epochs · ⌈n / b⌉`` or ``steps``."""
    if spec.steps is not None:
        return spec.steps
    assert spec.epochs is not None
    return spec.epochs * math.ceil(n / effective_batch(n, spec))


def samples_processed(n: int, spec: TrainSpec) -> int:
    """Per-sample gradient evaluations of one job: ``epochs · n`` or ``steps · b``."""
    if spec.steps is not None:
        return spec.steps * effective_batch(n, spec)
    assert spec.epochs is not None
    effective_batch(n, spec)  # validates n
    return spec.epochs * n


def compute_time_s(samples: int, speed_sps: float) -> float:
    """Seconds to process ``samples`` at ``speed_sps`` samples per second."""
    if speed_sps <= 0:
        raise ValueError(f"speed must be > 0, got {speed_sps}")
    return samples / speed_sps


def transfer_time_s(num_bytes: int, bandwidth_mbps: float, latency_ms: float) -> float:
    """Seconds to move ``num_bytes`` over a link: latency plus serialisation at the bandwidth."""
    if bandwidth_mbps <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth_mbps}")
    if latency_ms < 0:
        raise ValueError(f"latency must be >= 0, got {latency_ms}")
    return latency_ms / 1000.0 + num_bytes * 8.0 / (bandwidth_mbps * 1e6)


def model_bytes(num_params: int) -> int:
    """Bytes of one model transfer: float32 parameters."""
    return 4 * int(num_params)
