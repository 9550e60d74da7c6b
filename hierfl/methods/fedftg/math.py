"""FedFTG's server-side arithmetic (pure): class-level ensemble weights, label allotment, FLOP count.

L. Zhang, L. Shen, L. Ding, D. Tao, L.-Y. Duan, "Fine-tuning Global Model via Data-Free Knowledge
Distillation for Non-IID Federated Learning", CVPR 2022 (arXiv 2203.09249); the rules follow the
authors' code (``methods/train_gan_fn.py::generate_labels``, ``::get_batch_weight`` and
``methods/local_fn_gan.py::train_global_model_cgan_bs_weight_iloop_fz_dis``).

The server knows each selected client's label histogram ``n_k^y``. From it come

* the *customised label sampling*: the round's ``I·B`` generator labels are allotted to classes in
  proportion to ``Σ_k n_k^y`` (cumulative rounding down), then shuffled;
* the *class-level ensemble weights* ``a_k^y = n_k^y / (Σ_j n_j^y + 1e-6)``: on a sample of class
  ``y``, teacher ``k`` counts in proportion to how much of class ``y`` it has seen;
* the FLOPs of the fine-tuning job (ALGORITHMS_2 §10.3, counted from the code's loops).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLASS_WEIGHT_EPS", "allot_labels", "batch_weights", "class_client_weights", "finetune_flops"]

# the authors' code adds 1e-6 to every class total: a class no client holds gets weights 0, not NaN
CLASS_WEIGHT_EPS = 1e-6


def class_client_weights(counts: np.ndarray) -> np.ndarray:
    """``a[y, k] = n_k^y / (Σ_j n_j^y + 1e-6)`` from the ``(K, C)`` label histograms of ``K`` clients.

    Returns a ``(C, K)`` float64 array; each row of a class some client holds sums to ``1 − O(1e-6)``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[0] < 1:
        raise ValueError(f"label histograms must be a (clients, classes) array with at least one client, "
                         f"got shape {counts.shape}")
    if (counts < 0).any():
        raise ValueError("label histograms must be non-negative")
    totals = counts.sum(axis=0)
    return (counts / (totals[np.newaxis, :] + CLASS_WEIGHT_EPS)).T


def batch_weights(labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(B, K)``: row ``b`` is ``a[labels[b], :]`` (each sample's weight of every teacher)."""
    return np.asarray(weights)[np.asarray(labels, dtype=np.int64)]


def allot_labels(number: int, class_totals: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``number`` labels allotted to classes in proportion to ``class_totals``, then shuffled by ``rng``.

    The code's cumulative rounding: class ``c`` gets the labels between ``⌊number·P_{c−1}⌋`` and
    ``⌊number·P_c⌋``, ``P_c`` the cumulative share of classes ``0..c`` (the last class takes the rest), so
    the counts sum to ``number`` exactly; classes with a zero total are left out before the sum, so
    they never get a label. One ``rng.permutation`` of the sorted labels follows.
    """
    totals = np.asarray(class_totals, dtype=np.float64)
    if number < 1:
        raise ValueError(f"need at least one label, got {number}")
    if totals.ndim != 1 or (totals < 0).any() or not totals.sum() > 0:
        raise ValueError("class totals must be a non-negative vector with a positive sum")
    # over the classes some client holds only: a class without samples must get no label even when the
    # rounded cumulative share before it falls short of 1 (the code's cumulative sum can leave one there)
    held = np.flatnonzero(totals > 0)
    cuts = (np.cumsum(totals[held] / totals[held].sum()) * number).astype(np.int64)[:-1]
    sizes = np.diff(np.concatenate([[0], np.clip(cuts, 0, number), [number]]))
    labels = np.repeat(held.astype(np.int64), sizes)
    return labels[rng.permutation(number)]


def finetune_flops(batch: int, iters: int, gen_steps: int, student_steps: int, teachers: int,
                   f_gen: float, f_teacher: float, f_student: float) -> float:
    """FLOPs of one fine-tuning job (ALGORITHMS_2 §10.3 counted from the code's loops).

    ``B·I·[ I_g·|S|·3(F_G + F_T + F_S) + I_d·(F_G + 3F_S + |S|·F_T) ]``: per iteration, each generator
    step runs once per teacher the generator forward and backward (``3F_G``) and the teacher and the
    (frozen) student forward and back to their input (``3F`` each); each student step regenerates the
    batch (``F_G``), trains the student (``3F_S``) and runs every teacher forward (``F_T`` each). The
    diversity term (``B²`` distances) and the optimiser updates are not counted.
    """
    for name, value in (("batch", batch), ("iters", iters), ("teachers", teachers)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if gen_steps < 0 or student_steps < 0:
        raise ValueError("gen_steps and student_steps must be >= 0")
    per_iter = (gen_steps * teachers * 3.0 * (f_gen + f_teacher + f_student)
                + student_steps * (f_gen + 3.0 * f_student + teachers * f_teacher))
    return float(batch) * float(iters) * per_iter
