"""Local learning: flat parameter vectors, deterministic initialisation, local SGD, evaluation."""

from hierfl.learn.local import (
    LocalTrainer,
    TrainSpec,
    count_params,
    effective_batch,
    forward_flops,
    init_params,
    num_steps,
    param_layout,
    samples_processed,
)

__all__ = [
    "LocalTrainer",
    "TrainSpec",
    "count_params",
    "effective_batch",
    "forward_flops",
    "init_params",
    "num_steps",
    "param_layout",
    "samples_processed",
]
