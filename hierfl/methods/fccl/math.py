"""FCCL: what a device job does and costs, the round's public batches and the collaboration target (pure).

W. Huang, M. Ye, B. Du, "Learn from Others and Be Yourself in Heterogeneous Federated Learning",
CVPR 2022; the rules follow the authors' code (``WenkeHuang/FCCL``: ``fccl/Idea/Ours/FCCL.py``,
``fccl/Idea/utils_idea.py``), docs/explanation/algorithms.md §8.2.

Each party ``k`` keeps three models on its device: the model it trains ``θ_k``, the snapshot of it
taken at the end of the previous round ``θ_k^{t−1}`` and the model it pre-trained on its private
data alone ``θ_k^*``. A round is a collaborative phase over the round's public subset ``A_t``
(cross-correlation of normalised logits with the parties' mean, one Adam step per public batch),
then a local phase on the private data with dual-domain distillation from the two frozen models.

Cost of a job, in forward passes per sample (training = 3: forward + backward; a frozen teacher's
forward = 1; :func:`passes`)::

    pretrain   3                       (private data, epochs)
    logits     1 (+1: the previous snapshot's logits on the batch, self_target previous, per_batch)
    collab     2 per_batch (the backward of the forward the logits job ran) | 3 per_round
    local      3 + 2                   (student, plus the two teachers' forwards)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hierfl.core.method import JobMethod
from hierfl.core.public import public_subset

__all__ = ["FCCL_KINDS", "FCCLJob", "batch_positions", "num_batches", "own_target"]

FCCL_KINDS: tuple[str, ...] = ("pretrain", "logits", "collab", "local")


@dataclass(frozen=True)
class FCCLJob(JobMethod):
    """One FCCL device job (hashable: it travels in a ``TrainSpec``).

    ``kind``: ``pretrain`` (cross-entropy on the private data from a fresh initialisation drawn from
    ``init_seed``; its result is kept as the device's intra-domain teacher and first snapshot),
    ``logits`` (the model's logits on public batch ``batch`` of the round, or on all of ``A_t`` when
    ``batch`` is None, plus the previous snapshot's when ``self_target`` is ``previous``), ``collab``
    (one Adam step per public batch on the cross-correlation loss toward the target built from the
    summed logits it is given) or ``local`` (the private epochs with dual-domain distillation; its
    result becomes the device's next snapshot). ``rows``: the public split's ``[start, stop)`` rows
    in the host's arrays; ``subset_size``/``subset_seed``: the round's ``A_t``; ``per_batch``: the
    exchange granularity the job belongs to; ``inter_teacher``: the local phase's inter-domain teacher,
    the previous round's snapshot (``previous``) or the model the job starts from, as the collaborative
    phase left it (``collaborated``).
    """

    kind: str
    rows: tuple[int, int] = (0, 0)
    subset_size: int = 0
    subset_seed: int = 0
    batch_size: int = 1
    batch: int | None = None
    per_batch: bool = True
    self_target: str = "previous"
    inter_teacher: str = "previous"
    parties: int = 1
    lambda_col: float = 0.0051
    lr: float = 1e-3
    weight_decay: float = 0.0
    lambda_loc: float = 1.0
    init_seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FCCL_KINDS:
            raise ValueError(f"FCCLJob: kind must be one of {', '.join(FCCL_KINDS)}, got {self.kind!r}")
        if self.self_target not in ("previous", "current"):
            raise ValueError(f"FCCLJob: self_target must be previous or current, got {self.self_target!r}")
        if self.inter_teacher not in ("previous", "collaborated"):
            raise ValueError(f"FCCLJob: inter_teacher must be previous or collaborated, got {self.inter_teacher!r}")
        if self.parties < 1 or self.batch_size < 1:
            raise ValueError(f"FCCLJob: need parties >= 1 and batch_size >= 1, got {self.parties}, {self.batch_size}")
        for key in ("lambda_col", "lr", "weight_decay", "lambda_loc"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"FCCLJob: {key} must be a finite number >= 0, got {value!r}")

    @property
    def public(self) -> bool:
        """Whether the job works on the public split (logits, collab) rather than the private data."""
        return self.kind in ("logits", "collab")

    def samples(self) -> int:
        """Public samples the job touches: its batch, or all of ``A_t``."""
        size = min(self.subset_size, self.rows[1] - self.rows[0])
        if self.batch is None:
            return size
        return max(0, min(self.batch_size, size - self.batch * self.batch_size))

    def passes(self) -> int:
        """Forward-pass equivalents per sample (see the module's table)."""
        if self.kind == "pretrain":
            return 3
        if self.kind == "local":
            return 5
        if self.kind == "logits":
            return 2 if (self.per_batch and self.self_target == "previous") else 1
        return 2 if self.per_batch else 3

    def cost_key(self) -> tuple[str, int, int]:
        """What decides the job's duration (its subset seed does not): ``(kind, public samples, passes)``."""
        return (self.kind, self.samples() if self.public else 0, self.passes())

    def work_of(self, private_processed: int) -> float:
        """The job's work in training-sample equivalents (3 passes = 1): ``samples × passes / 3``, with the
        private samples processed (epochs × n) for ``pretrain`` and ``local``."""
        samples = self.samples() if self.public else private_processed
        return samples * self.passes() / 3.0

    # -- as a job method (hierfl.core.method): the device keeps its teacher snapshots in its host ------
    keeps_device_state: ClassVar[bool] = True
    state_names: ClassVar[tuple[str, ...]] = ("fccl_star", "fccl_prev", "fccl_z", "fccl_self")
    custom_work: ClassVar[bool] = True

    def uniform_work(self, spec: Any) -> float | None:
        """A public-data job costs the same on every device."""
        return self.work_of(0) if self.public else None

    def work_samples(self, n: int, spec: Any) -> float:
        """A private-data job: its passes per private sample processed (teacher forwards included)."""
        from hierfl.core.work import samples_processed

        return self.work_of(samples_processed(n, spec))

    def result_width(self, num_params: int, num_classes: int, input_size: int) -> int:
        """A logits job returns ``samples × classes`` values; the others the model."""
        return self.samples() * num_classes if self.kind == "logits" else num_params


def num_batches(subset_size: int, batch_size: int) -> int:
    """Public batches of a round: ``⌈|A_t| / B_p⌉``."""
    return -(-int(subset_size) // int(batch_size))


def batch_positions(job: FCCLJob, pool: int) -> list[np.ndarray]:
    """The round's public batches as positions into the public split (``pool`` samples): ``A_t`` drawn
    from ``subset_seed`` (a plain draw: the public data may be unlabelled), shuffled with the same
    generator, cut into batches of ``batch_size``; only batch ``batch`` when it is set. Both the
    protocol and the device derive them from the seed, so no index is ever sent."""
    rng = np.random.default_rng(job.subset_seed)
    chosen = public_subset(np.zeros(pool, dtype=np.int64), job.subset_size, rng, stratified=False)
    order = rng.permutation(chosen)
    cuts = [order[s: s + job.batch_size] for s in range(0, order.size, job.batch_size)]
    return cuts if job.batch is None else [cuts[job.batch]]


def own_target(mean: np.ndarray, own_now: np.ndarray, own_self: np.ndarray, parties: int) -> np.ndarray:
    """Party ``k``'s collaboration target from the parties' mean logits it received:
    ``(Σ_j Z_j − Z_k + Z_self)/K = mean + (Z_self − Z_k)/K``.

    ``Z_k`` is what the party uploaded; ``Z_self`` its previous snapshot's logits (``self_target:
    previous``, the CVPR code) or its current ones (``current``, the FCCL+ code: the target is then
    the plain mean). float64 arithmetic, returned as float32.
    """
    if parties < 1:
        raise ValueError(f"the target averages over K >= 1 parties, got {parties}")
    t = np.asarray(mean, dtype=np.float64) + (np.asarray(own_self, dtype=np.float64)
                                               - np.asarray(own_now, dtype=np.float64)) / parties
    return t.astype(np.float32)
