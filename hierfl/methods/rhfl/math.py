"""RHFL: client-confidence re-weighting and the local loss spec (pure numpy).

X. Fang, M. Ye, "Robust Federated Learning with Noisy and Heterogeneous Clients", CVPR 2022; the
rules follow the authors' code (``FangXiuwen/Robust_FL``, ``HHF.py``), docs/explanation/algorithms.md
§8.3.

*Client confidence re-weighting* (CCR). Each party ``k`` reports the mean symmetric cross-entropy
``L_k^t`` of its model on its own (noisy) private data at the start of round ``t``. A party whose loss
falls fast relative to its size learns efficiently from clean-looking labels, so its outputs are
trusted more when the others align to them:

* ``F_k = (L_k^{t−1} − L_k^t) / L_k^t`` (:func:`loss_decrease`);
* ``a_k = 1/(K−1) + η·F_k / Σ_j F_j`` and ``W_k = exp(a_k) / Σ_j exp(a_j)`` (:func:`ccr_weights`);
* in the first round every ``W_k = 1/(K−1)`` (:func:`first_round_weights`; not normalised, as the code).

The code divides by ``Σ_j F_j`` unguarded; a design-default guard keeps ``a_k = 1/(K−1)`` when that
sum is (nearly) zero, so equal losses never divide by zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hierfl.core.method import JobMethod

__all__ = ["SCESpec", "ccr_weights", "confidence_weights", "first_round_weights", "loss_decrease"]


@dataclass(frozen=True)
class SCESpec(JobMethod):
    """A private job trained with the symmetric cross-entropy ``a·CE + b·RCE`` (hashable: it travels in a
    ``TrainSpec``).

    ``report``: after training, the job also evaluates the mean loss of its final model over the
    device's private samples (RHFL's CCR pass: one forward pass per sample, charged) and returns it as
    the ``ccr_loss`` statistic. ``init_seed``: the job starts from a fresh initialisation of the
    device's own architecture drawn from this seed (a party's pre-training) instead of the model given.
    ``check_a``, ``check_b``: the SCE the report measures, whatever the local loss ``a``, ``b`` is — the
    authors' code measures client confidence with its own SCE (a = 0.1, b = 1.0) even when the local loss
    is another (a plain-CE ablation keeps the same confidence measure).
    """

    a: float
    b: float
    report: bool = True
    init_seed: int | None = None
    check_a: float = 0.1
    check_b: float = 1.0

    def __post_init__(self) -> None:
        for key in ("a", "b", "check_a", "check_b"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"SCESpec: {key} must be a finite number >= 0, got {value!r}")
        if self.a + self.b <= 0:
            raise ValueError("SCESpec: a + b must be > 0 (both terms off leaves no loss)")

    @property
    def eval_passes(self) -> int:
        """Forward passes per private sample beyond training: 1 with the CCR report, else 0."""
        return 1 if self.report else 0

    # as a job method: the CCR report adds one forward pass over the samples the job sees (n/3)
    custom_work: ClassVar[bool] = True

    def work_samples(self, n: int, spec: Any) -> float:
        """Training's samples processed, plus a third of the samples seen with the CCR report."""
        from hierfl.core.work import plain_work_samples, samples_processed, visible

        if spec.work_factor != 1.0 or not self.eval_passes:
            return plain_work_samples(n, spec)
        return float(samples_processed(n, spec)) + self.eval_passes * visible(n, spec) / 3.0


def first_round_weights(parties: int) -> np.ndarray:
    """``W_k = 1/(K−1)`` for every party (round 0 of the code: the weights sum to ``K/(K−1)``)."""
    if parties < 2:
        raise ValueError(f"RHFL needs at least 2 parties to align with each other, got {parties}")
    return np.full(parties, 1.0 / (parties - 1), dtype=np.float64)


def loss_decrease(previous: np.ndarray, current: np.ndarray) -> np.ndarray:
    """``F_k = (L_k^{t−1} − L_k^t) / L_k^t``: the loss decrease per unit of current loss."""
    prev = np.asarray(previous, dtype=np.float64)
    cur = np.asarray(current, dtype=np.float64)
    if prev.shape != cur.shape:
        raise ValueError(f"previous and current losses must have the same shape, got {prev.shape} and {cur.shape}")
    if not (np.all(np.isfinite(cur)) and np.all(cur > 0)):
        raise ValueError(f"CCR needs finite, positive current losses, got {cur.tolist()}")
    return (prev - cur) / cur


def ccr_weights(previous: np.ndarray, current: np.ndarray, eta: float, guard: float = 1e-12) -> np.ndarray:
    """The parties' confidence weights ``W`` (they sum to 1) from their losses of the last two rounds.

    ``a_k = 1/(K−1) + η·F_k / Σ_j F_j``; ``W = softmax(a)``. With ``|Σ_j F_j| < guard`` (design default
    ``1e-12``) the η term is dropped (every ``a_k = 1/(K−1)``: equal weights ``1/K``). ``η = 0`` disables
    the re-weighting the same way.
    """
    return confidence_weights(loss_decrease(previous, current), eta, guard)


def confidence_weights(decrease: np.ndarray, eta: float, guard: float = 1e-12) -> np.ndarray:
    """:func:`ccr_weights` from the parties' reports ``F_k`` (:func:`loss_decrease`) directly."""
    f = np.asarray(decrease, dtype=np.float64)
    if f.ndim != 1 or not np.all(np.isfinite(f)):
        raise ValueError(f"CCR needs one finite loss decrease per party, got {f.tolist()}")
    k = f.shape[0]
    if k < 2:
        raise ValueError(f"RHFL needs at least 2 parties to align with each other, got {k}")
    if not (math.isfinite(eta) and eta >= 0):
        raise ValueError(f"eta must be a finite number >= 0, got {eta!r}")
    a = np.full(k, 1.0 / (k - 1), dtype=np.float64)
    total = float(f.sum())
    if abs(total) >= guard and eta > 0:
        a = a + eta * f / total
    e = np.exp(a - a.max())  # (shifted: the same softmax, no overflow)
    return e / e.sum()
