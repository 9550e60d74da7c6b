"""What every role shares: the run's model spec tuple and its accessors, the non-finite flag, and the arithmetic
of packed rows (averages and combinations of models picked from arrays or their rows)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hierfl.core.aggregate import WeightedSum, linear_combination

__all__ = ['ModelSpec', 'models_of', 'fast_path_of', 'device_of', 'on_cpu', 'cpu_batching_of', 'precision_of', 'group_max_of', 'NONFINITE', 'flag_nonfinite', 'OutOfDeviceMemory', 'out_of_memory_text', 'average_rows', 'combine_packed', 'delta_packed']


ModelSpec = tuple[Any, ...]
"""(model config, input shape, number of classes, torch threads[, fast path[, device[, precision[, CPU batching]]]]).

The optional fifth element (``runtime.fast_path``, default ``False``) turns on the opt-in batched
fast path: executors group jobs and hosts train a group's jobs together (``logreg``/``mlp`` on CPU:
:mod:`hierfl.learn.batched`; every other model, and every model on CUDA: :mod:`hierfl.learn.vmapped`);
the numbers then differ from the one-job-at-a-time path within float tolerance. The optional sixth
(``runtime.device``: ``cpu``, ``cuda`` or ``auto``, default ``cpu``) is the torch device of training, one
job at a time and batched, and of evaluation, resolved in each host's own process. The optional seventh
(``runtime.precision``: ``fp32`` or ``bf16``, default ``fp32``) is the precision of every forward
pass, one job, a group or an evaluation (:mod:`hierfl.learn.precision`). The optional eighth
(``runtime.cpu_batching``: ``auto`` or ``vmap``, default ``auto``) says which models a CPU host
trains in groups: ``auto`` only Linear/ReLU chains, every other model job by job. The optional ninth
(``models:``) is the tuple of the run's further model configs: a job whose ``spec.model`` is ``k >= 1``
runs the ``k``-th of them (model 0 is the first element). The optional tenth (``runtime.group_max`` as resolved
at start, :mod:`hierfl.learn.group_cap`) is the most jobs in one fast-path group.
"""


def models_of(model: ModelSpec) -> tuple[Any, ...]:
    """Every model config of a :data:`ModelSpec`: the first element, then the optional ninth's."""
    return (model[0], *(model[8] if len(model) > 8 and model[8] else ()))


def fast_path_of(model: ModelSpec) -> bool:
    """Whether a :data:`ModelSpec` turns the batched fast path on (its optional fifth element)."""
    return bool(model[4]) if len(model) > 4 else False


def device_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.device`` (its optional sixth element; ``cpu`` without one)."""
    return str(model[5]) if len(model) > 5 and model[5] else "cpu"


def on_cpu(model: ModelSpec) -> ModelSpec:
    """The :data:`ModelSpec` with ``runtime.device`` ``cpu``: for a role that reserved no GPU under Ray
    (the cloud, in the driver or an actor), which computes on the CPU whatever the device hosts use."""
    return model if device_of(model) == "cpu" else (*model[:5], "cpu", *model[6:])


def cpu_batching_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.cpu_batching`` (its optional eighth element; ``auto`` without one)."""
    return str(model[7]) if len(model) > 7 and model[7] else "auto"


def group_max_of(model: ModelSpec) -> int:
    """The :data:`ModelSpec`'s resolved group cap (its optional tenth element; without one, which only a spec made
    by hand lacks, :data:`hierfl.learn.batched.GROUP_MAX`)."""
    from hierfl.learn.batched import GROUP_MAX

    return int(model[9]) if len(model) > 9 and model[9] else GROUP_MAX


def precision_of(model: ModelSpec) -> str:
    """The :data:`ModelSpec`'s ``runtime.precision`` (its optional seventh element; ``fp32`` without one)."""
    return str(model[6]) if len(model) > 6 and model[6] else "fp32"


NONFINITE = "nonfinite"
"""Key of a job's stats set (to 1.0) when its result holds NaN or Inf; absent otherwise."""


def flag_nonfinite(result: np.ndarray, stats: dict[str, float]) -> dict[str, float]:
    """Mark ``stats`` when ``result`` is not finite: one ``isfinite`` pass per update, on the host that
    made it (the driver never downloads an update; it reads the flag with the stats it waits for).
    The key is added only when set, so finite runs' outputs are unchanged."""
    if not np.isfinite(result).all():
        stats = dict(stats)
        stats[NONFINITE] = 1.0
    return stats


def _pick(array: np.ndarray, row: int | None) -> np.ndarray:
    """A whole vector, or one row (zero-copy view) of a batch of results."""
    return array if row is None else array[row]


def average_rows(weights: list[float], index: list[int], rows: list[int | None],
                 *arrays: np.ndarray) -> np.ndarray:
    """Weighted average of model ``k`` = ``arrays[index[k]]`` (row ``rows[k]``), summed in the given order."""
    acc = WeightedSum()
    for k, w in enumerate(weights):
        acc.add(_pick(arrays[index[k]], rows[k]), w)
    return acc.result()

def combine_packed(coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                   minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
    """:func:`~hierfl.core.aggregate.linear_combination` of packed terms: term ``j`` is
    ``coefs[j] · (arrays[plus[j]] − arrays[minus[j]])`` (rows picked; ``minus[j] < 0``: no subtrahend)."""
    # (_pick inline: one term per update of an asynchronous aggregation)
    terms = [(c, arrays[p] if pr is None else arrays[p][pr],
              None if m < 0 else arrays[m] if mr is None else arrays[m][mr])
             for c, p, pr, m, mr in zip(coefs, plus, plus_rows, minus, minus_rows)]
    return linear_combination(terms)


def delta_packed(coefs: list[float], plus: list[int], plus_rows: list[int | None], minus: list[int],
                 minus_rows: list[int | None], *arrays: np.ndarray) -> np.ndarray:
    """Like :func:`combine_packed`, in float64: the delta a server optimizer steps with."""
    terms = [(c, _pick(arrays[p], pr), None if m < 0 else _pick(arrays[m], mr))
             for c, p, pr, m, mr in zip(coefs, plus, plus_rows, minus, minus_rows)]
    return linear_combination(terms, dtype=np.float64)


class OutOfDeviceMemory(RuntimeError):
    """A host's accelerator ran out of memory training a fast-path group (``torch.cuda.OutOfMemoryError``).

    Raised by :meth:`hierfl.runtime.device_host.DeviceHost.train_group` with a message naming the group's
    size, ``runtime.device`` and the settings that lower the memory a group needs; the driver ends the
    run with that message (under Ray the exception arrives wrapped in Ray's task error: its ``cause``)."""


def out_of_memory_text(jobs: int, device: str, configured: str, group_max: int, detail: str) -> str:
    """The message of :class:`OutOfDeviceMemory`: a group of ``jobs`` jobs on ``device`` (``runtime.device``
    ``configured``) did not fit; ``detail``: torch's own first line (what it tried to allocate)."""
    first = detail.strip().splitlines()[0] if detail.strip() else ""
    first = first if len(first) <= 240 else first[:240] + "…"
    # (a group of one cannot be split: the cap is then no way out)
    smaller = f"runtime.group_max: a number below {jobs} (smaller groups), " if jobs > 1 else ""
    return (f"CUDA out of memory training a fast-path group of {jobs} jobs on {device} "
            f"(runtime.device: {configured}){': ' + first if first else ''}. A group holds its jobs' parameters, "
            f"optimizer state and activations at once: the jobs the run starts together, at most runtime.group_max "
            f"= {group_max} (auto: what the device's total memory was estimated to hold; config.yaml records it), "
            "and fewer devices per round make smaller groups. To need less GPU memory: "
            f"{smaller}runtime.precision: bf16 (activations in bfloat16), a larger runtime.gpus_per_host with fewer "
            "runtime.workers (fewer hosts, each with its own copy of the data, share a GPU), "
            "runtime.fast_path: false (every job alone, on the CPU), or runtime.device: cpu "
            "(runtime.cpu_batching: auto then trains a CNN or LSTM job by job there)")
