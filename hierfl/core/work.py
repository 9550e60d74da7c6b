"""How much work a local training job is, and how long jobs and transfers take (pure formulas).

The emulator's timing model (docs/explanation/timing.md):

* compute time  = samples processed / speed_sps
* transfer time = latency_ms / 1000 + bytes · 8 / (bandwidth_mbps · 10⁶)
* model bytes   = 4 × parameter count (float32)

``samples_processed`` is the number of per-sample gradient evaluations the local trainer
really performs, so virtual time and the real computation agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hierfl.core.method import JobMethod
from hierfl.core.shared import SharedData

__all__ = [
    "OPTIMIZERS", "DpSgdSpec", "PublicTask", "TrainSpec", "job_samples", "plain_work_samples", "effective_batch", "num_steps", "samples_processed", "visible", "work_samples",
    "compute_time_s", "transfer_time_s", "model_bytes",
]


@dataclass(frozen=True)
class PublicTask(JobMethod):
    """A device job on the public split instead of the device's private data (output-exchange methods).

    ``kind``: ``scores`` (a forward pass: the device's class scores on the subset, 1 pass per sample),
    ``digest`` (train toward given target scores with ``loss``, 3 passes) or ``pretrain`` (train on
    the public labels with cross-entropy, 3 passes). ``rows`` is the public split's ``[start, stop)``
    in the host's training arrays; the subset is ``subset_size`` of them drawn with ``subset_seed``
    (:func:`hierfl.core.public.public_subset`), or all of them when ``subset_seed`` is None.
    ``init_seed``: the job starts from a fresh initialisation of the device's architecture drawn
    from this seed instead of the parameters it is given (a party's first job, whose architecture
    the run's initial model may not have).

    Methods robust to noisy labels add ``probs`` (a forward pass returning the class probabilities,
    softmax of the scores) and
    ``align`` (train toward given target probabilities, ``teacher_is_prob``). ``window``: the job
    touches only positions ``[start, stop)`` of the drawn subset, in an order shuffled by the same
    seed (one public batch of an exchange per batch). ``reuse_forward``: the training job's forward
    pass was already charged to the ``probs`` job before it (the code keeps that forward for the
    backward pass), so it costs 2 passes per sample instead of 3.
    """

    kind: str
    rows: tuple[int, int]
    subset_size: int
    subset_seed: int | None = None
    stratified: bool = True
    loss: str = "mae_logits"
    init_seed: int | None = None
    window: tuple[int, int] | None = None
    teacher_is_prob: bool = False
    reuse_forward: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("scores", "digest", "pretrain", "probs", "align"):
            raise ValueError(f"PublicTask: kind must be scores, digest, pretrain, probs or align, got {self.kind!r}")
        if not 0 <= self.rows[0] < self.rows[1] or self.subset_size < 1:
            raise ValueError(f"PublicTask: need rows start < stop and subset_size >= 1, got {self.rows}, "
                             f"{self.subset_size}")
        if self.window is not None and not 0 <= self.window[0] < self.window[1] <= self._drawn:
            raise ValueError(f"PublicTask: window must lie in [0, {self._drawn}] and be non-empty, got {self.window}")

    @property
    def _drawn(self) -> int:
        return min(self.subset_size, self.rows[1] - self.rows[0])

    @property
    def forward_only(self) -> bool:
        """Whether the job is a forward pass only (scores, probabilities)."""
        return self.kind in ("scores", "probs")

    @property
    def samples(self) -> int:
        """Public samples one pass over the task's data touches (its window's, if it has one)."""
        return self._drawn if self.window is None else self.window[1] - self.window[0]

    @property
    def passes(self) -> int:
        """Forward-pass equivalents per sample: 1 for scores (forward only), 3 for training (forward + backward),
        2 for training whose forward was charged before (``reuse_forward``)."""
        return 1 if self.forward_only else (2 if self.reuse_forward else 3)

    def uniform_work(self, spec: TrainSpec) -> float:
        """Its samples × epochs × passes / 3, the same on every device (its private data does not matter)."""
        if self.forward_only:
            return self.samples * self.passes / 3.0
        if self.passes != 3:  # a training job whose forward pass was charged before
            return samples_processed(self.samples, spec) * self.passes / 3.0
        return float(samples_processed(self.samples, spec))

    def result_width(self, num_params: int, num_classes: int, input_size: int) -> int:
        """A scores or probabilities job returns ``samples × classes`` values; a training job the model."""
        return self.samples * num_classes if self.forward_only else num_params


@dataclass(frozen=True)
class DpSgdSpec:
    """Sample-level DP-SGD of a job (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016).

    Every step samples its batch independently (``sampling``: ``fixed_size`` — ``b`` of the job's ``n`` samples
    uniformly without replacement; ``poisson`` — each sample with probability ``b/n``), clips each sample's
    gradient to L2 norm ``clip``, sums them, adds ``N(0, (noise_multiplier·clip)²)`` per coordinate and divides
    by ``b`` (the expected batch size under Poisson sampling). Set from ``privacy.dp_sgd``.
    """

    noise_multiplier: float
    clip: float
    sampling: str = "fixed_size"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0):
            raise ValueError(f"DpSgdSpec: noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"DpSgdSpec: clip must be a finite number > 0, got {self.clip!r}")
        if self.sampling not in ("fixed_size", "poisson"):
            raise ValueError(f"DpSgdSpec: sampling must be fixed_size or poisson, got {self.sampling!r}")


OPTIMIZERS = ("sgd", "adam", "adamw")
"""The local optimisers a job can use (``training.optimizer``)."""


@dataclass(frozen=True)
class TrainSpec:
    """What one local training job does: SGD hyper-parameters and its length.

    Exactly one of ``epochs`` / ``steps`` is set. ``batch_size=None`` means full batch (one step per epoch).
    The proximal coefficient a job uses is ``prox + mu`` (see :attr:`proximal`).
    """

    epochs: int | None = 1
    steps: int | None = None
    batch_size: int | None = 32
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox: float = 0.0  # ρ of a proximal term (ρ/2)‖w − w_start‖² (a protocol's own, Xie et al. 2019); 0 = none
    # local trainer (``training.trainer``): a proximal μ (Li et al. 2020) adds to ρ (same term, kept apart so a
    # protocol that sets its own ρ does not erase μ); control variates correct every gradient by c − c_i
    mu: float = 0.0
    control_variates: bool = False
    # timing only (``training.trainer: none``): the job takes its virtual time but is not run; its
    # update is the model it started from
    train: bool = True
    # a Byzantine device's behaviour (a ``hierfl.robust.behaviours`` config, hashable): the host
    # trains on flipped labels or transforms the result; None for an honest job
    attack: Any = None
    # streaming data (a protocol's ``stream``): the job sees only the first ``revealed`` samples of the
    # device (in its partition's order); None = all of them
    revealed: int | None = None
    # max-norm gradient clipping of each step's whole gradient (loss terms included, weight decay not),
    # as ``torch.nn.utils.clip_grad_norm_``; None = no clipping (drift correction's code clips at 10)
    clip_norm: float | None = None
    # the local optimiser (``training.optimizer``): ``sgd`` (``momentum``, ``nesterov``, ``weight_decay`` as
    # ``torch.optim.SGD``), ``adam`` / ``adamw`` (``betas``, ``eps``; ``weight_decay`` as L2 / decoupled, as
    # ``torch.optim.Adam`` / ``AdamW``); its state is fresh per job, or with ``optimizer_state: device`` kept
    # by the device's host across its plain training jobs (SGD's momentum buffer, Adam's moments and steps)
    optimizer: str = "sgd"
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    optimizer_state: str = "job"
    # which of the run's models the job's device runs (``models:``; 0 = ``model``): part of the spec so
    # that every grouping keyed by spec (the batched path, the Ray batches) keeps architectures apart
    model: int = 0
    # matched averaging's layer-wise sub-rounds: the first ``frozen`` entries of the flat vector (the matched layers,
    # which lead the layout) keep their values; the job trains only the rest. 0 = every parameter trains
    frozen: int = 0
    # a shared dataset D_g built at run time: the job trains on the device's rows plus the other
    # sharers' shares (hierfl.core.shared); None = the device's own rows only
    shared: SharedData | None = None
    # extra local compute a trainer's loss costs (a slim pass through the final block): a job's work is this many times
    # its samples processed (docs/explanation/timing.md); 1.0 for every other trainer
    work_factor: float = 1.0
    # a method's own job (hierfl.core.method): what the device runs instead of plain local training, what
    # it costs and returns, and the per-device state it keeps; None = plain local training
    method: JobMethod | None = None
    # sample-level DP-SGD (``privacy.dp_sgd``): per-sample clipped, noised gradients on independently sampled
    # batches (step mode only); None = plain minibatch gradients
    dp_sgd: DpSgdSpec | None = None

    def __post_init__(self) -> None:
        if (self.epochs is None) == (self.steps is None):
            raise ValueError(f"TrainSpec: set exactly one of epochs / steps, got epochs={self.epochs}, steps={self.steps}")
        for key in ("epochs", "steps", "batch_size", "revealed"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"TrainSpec: {key} must be a positive integer or None, got {value!r}")
        if self.dp_sgd is not None and self.steps is None:
            raise ValueError("TrainSpec: DP-SGD samples every step's batch on its own: it needs steps, not epochs")
        if self.shared is not None and self.revealed is not None:
            raise ValueError("TrainSpec: a shared dataset and streaming data (revealed) do not combine")
        if self.clip_norm is not None and not (math.isfinite(self.clip_norm) and self.clip_norm > 0):
            raise ValueError(f"TrainSpec: clip_norm must be a finite number > 0 or None, got {self.clip_norm!r}")
        if isinstance(self.frozen, bool) or not isinstance(self.frozen, (int, np.integer)) or self.frozen < 0:
            raise ValueError(f"TrainSpec: frozen must be an integer >= 0, got {self.frozen!r}")
        if not (math.isfinite(self.work_factor) and self.work_factor >= 1.0):
            raise ValueError(f"TrainSpec: work_factor must be a finite number >= 1, got {self.work_factor!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainSpec: optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.nesterov and (self.optimizer != "sgd" or not self.momentum > 0):
            raise ValueError("TrainSpec: nesterov needs optimizer sgd and momentum > 0")
        if self.optimizer != "sgd" and self.momentum != 0:
            raise ValueError(f"TrainSpec: momentum is SGD's; {self.optimizer} has betas")
        if not (len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas)):
            raise ValueError(f"TrainSpec: betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.optimizer_state not in ("job", "device"):
            raise ValueError(f"TrainSpec: optimizer_state must be job or device, got {self.optimizer_state!r}")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"TrainSpec: eps must be a finite number > 0, got {self.eps!r}")
        for key in ("lr", "momentum", "weight_decay", "prox", "mu"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"TrainSpec: {key} must be a finite number >= 0, got {value!r}")

    @property
    def keeps_device_state(self) -> bool:
        """Whether a job reads and writes state its device keeps in its host (its job method says so): such a
        job always runs on its device's home host and is never trained in a group. A plain job whose optimizer
        state is the device's (``optimizer_state: device``) is one too (a job method's job keeps none)."""
        if self.method is None:
            return self.optimizer_state == "device"
        return self.method.keeps_device_state

    @property
    def task(self) -> PublicTask | None:
        """The job's public-data task, if its method is one (a job on the public split instead of the device's
        private data: the same work on every device)."""
        return self.method if isinstance(self.method, PublicTask) else None

    @property
    def adaptive(self) -> bool:
        """Whether the job's optimiser is Adam or AdamW (moments instead of SGD's momentum buffer)."""
        return self.optimizer != "sgd"

    @property
    def proximal(self) -> float:
        """Coefficient of ``(·/2)‖w − w_start‖²``: the protocol's ρ plus the trainer's μ."""
        return self.prox + self.mu


def job_samples(n: int, device: int, spec: TrainSpec) -> int:
    """The samples ``device`` (holding ``n``) trains on in a job of ``spec``: its own, plus what a
    shared dataset adds to them (:meth:`SharedData.extra_for`)."""
    return n if spec.shared is None else n + spec.shared.extra_for(device)


def effective_batch(n: int, spec: TrainSpec) -> int:
    """Batch size actually used on ``n`` samples: ``min(batch_size or n, n)``."""
    if n < 1:
        raise ValueError(f"local training needs at least one sample, got n={n}")
    return min(spec.batch_size or n, n)


def num_steps(n: int, spec: TrainSpec) -> int:
    """Number of SGD steps: ``epochs * ceil(n / b)`` in epoch mode, else ``steps``."""
    b = effective_batch(n, spec)
    if spec.epochs is not None:
        return spec.epochs * -(-n // b)
    assert spec.steps is not None  # guaranteed by TrainSpec
    return spec.steps


def visible(n: int, spec: TrainSpec) -> int:
    """How many of a device's ``n`` samples a job sees: all, or the ``revealed`` first ones."""
    return n if spec.revealed is None else min(n, spec.revealed)


def samples_processed(n: int, spec: TrainSpec) -> int:
    """Samples the trainer computes gradients on: ``epochs * n`` or ``steps * b`` (``n``: the samples
    the job sees, :func:`visible`)."""
    n = visible(n, spec)
    b = effective_batch(n, spec)
    if spec.epochs is not None:
        return spec.epochs * n
    assert spec.steps is not None
    return spec.steps * b


def plain_work_samples(n: int, spec: TrainSpec) -> float:
    """Plain local training's work: :func:`samples_processed`, times ``spec.work_factor`` (a heavier local loss)."""
    if spec.work_factor != 1.0:
        return samples_processed(n, spec) * spec.work_factor
    return float(samples_processed(n, spec))


def work_samples(n: int, spec: TrainSpec) -> float:
    """A job's work in training-sample equivalents (what ``speed_sps`` counts; a forward-only pass costs a
    third of a training step: training ≈ 3 × the forward FLOPs, as the tiers' GFLOP/s assume): the job
    method's own (:meth:`JobMethod.uniform_work`, :meth:`JobMethod.work_samples`), else
    :func:`plain_work_samples`."""
    method = spec.method
    if method is None:
        return plain_work_samples(n, spec)
    uniform = method.uniform_work(spec)
    return uniform if uniform is not None else method.work_samples(n, spec)


def compute_time_s(samples: float, speed_sps: float) -> float:
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
