"""Matched averaging of neurons: PFNM's Beta–Bernoulli-process matching and its MLP form (numpy only).

M. Yurochkin, M. Agarwal, S. Ghosh, K. Greenewald, T. N. Hoang, Y. Khazaeni, "Bayesian Nonparametric
Federated Learning of Neural Networks" (PFNM), ICML 2019, arXiv 1905.12022; H. Wang, M. Yurochkin, Y. Sun,
D. Papailiopoulos, Y. Khazaeni, "Federated Learning with Matched Averaging" (FedMA), ICLR 2020,
arXiv 2002.06440. The rules follow the authors' code (``matching/pfnm.py``: ``compute_cost``,
``matching_upd_j``, ``match_layer``, ``layer_group_descent``, ``process_softmax_bias``).
docs/explanation/algorithms.md, "PFNM and FedMA".

One layer of client ``j`` is a set of ``L_j`` *atoms* (rows ``w_jl ∈ R^D``, each with a per-coordinate
precision ``s_j``). Global atoms keep the precision-weighted sum ``G_i = μ₀/σ₀² + Σ w_jl s_j``, the
precision ``S_i = 1/σ₀² + Σ s_j`` and the popularity ``m_i``. Client ``j``'s atom ``l`` is given to
existing atom ``i`` or to a new one by a maximum-weight assignment (Hungarian method) of the cost of
:func:`assignment_cost`; the global atom is ``G_i / S_i``. Weight matrices here are in torch's
``(out, in)`` orientation: a hidden neuron is a row of its layer's weight matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "NEW_ATOM_LIMIT",
    "POPULARITY_CAP",
    "LayerMatch",
    "MLPMatch",
    "assignment_cost",
    "assignment_ops",
    "class_average",
    "class_shares",
    "layer_objective",
    "match_fc_layer",
    "match_layer",
    "match_mlp",
    "match_one",
    "permute_inputs",
]

NEW_ATOM_LIMIT = 700   # the code's cap on the global layer's size when opening new atoms [V: pfnm.py]
POPULARITY_CAP = 10    # popularity counts above this do not raise the prior of an existing atom [V: pfnm.py]
BIAS_PRIOR_MEAN = 0.1  # prior mean of biases (weights: 0) [V: pfnm.py layer_group_descent]


def assignment_cost(w: np.ndarray, s_j: np.ndarray, G: np.ndarray, S: np.ndarray, popularity: np.ndarray,
                    prior_mean_norm: np.ndarray, prior_prec: np.ndarray, gamma: float, J: int,
                    max_new: int) -> np.ndarray:
    """PFNM's ``L_j × (L + max_new)`` cost of giving client ``j``'s atoms to global atoms (to maximise).

    Parameters
    ----------
    w
        ``(L_j, D)`` client atoms already multiplied by their precision (``w̃ = w s_j``).
    s_j
        ``(D,)`` precision of the client's coordinates.
    G, S
        ``(L, D)`` precision-weighted sums and precisions of the global atoms.
    popularity
        ``(L,)`` how many clients use each global atom (``m_i``).
    prior_mean_norm, prior_prec
        ``(D,)`` ``μ₀/σ₀²`` and ``1/σ₀²``.
    gamma
        Mass of the Indian-buffet process (larger: more new atoms).
    J
        Number of clients.
    max_new
        Columns for new atoms.

    Returns
    -------
    np.ndarray
        Existing atom ``i``: ``Σ_d (w̃+G_i)²/(s_j+S_i) − Σ_d G_i²/S_i + log(m̃_i/(J − m̃_i))`` with
        ``m̃_i = min(m_i, 10)``; the ``k``-th new atom: ``Σ_d (w̃+μ₀/σ₀²)²/(1/σ₀²+s_j) − Σ_d μ₀²/σ₀²
        − 2 log k + 2 log(γ/J)``.
    """
    w = np.asarray(w, dtype=np.float64)
    if J < 2:
        raise ValueError(f"matching needs at least 2 clients, got J={J}")
    counts = np.minimum(np.asarray(popularity, dtype=np.float64), POPULARITY_CAP)
    if np.any(counts >= J):
        # log(m/(J−m)) is undefined once an atom is used by every client; the code would take log of a
        # non-positive number — only possible while client j is still counted, which callers exclude
        raise ValueError(f"popularity counts must stay below J={J}, got {counts.max()}")
    existing = (((w[:, None, :] + G[None, :, :]) ** 2) / (s_j[None, None, :] + S[None, :, :])).sum(axis=2)
    existing -= (G ** 2 / S).sum(axis=1)[None, :]
    existing += np.log(counts / (J - counts))[None, :]
    fresh = (((w + prior_mean_norm) ** 2) / (prior_prec + s_j)).sum(axis=1) - (prior_mean_norm ** 2 / prior_prec).sum()
    new = fresh[:, None] - 2.0 * np.log(np.arange(1, max_new + 1))[None, :] + 2.0 * np.log(gamma / J)
    return np.hstack([existing, new])


def assignment_ops(rows: int, atoms: int, new: int, dim: int) -> float:
    """Operation count of one assignment: ``3·r·c·D`` to build the cost matrix plus ``r·c·min(r, c)`` for
    the Hungarian method, with ``r = rows``, ``c = atoms + new`` (the analytic count of
    docs/explanation/algorithms.md §9.1)."""
    c = atoms + new
    return float(3 * rows * c * dim + rows * c * min(rows, c))


@dataclass
class LayerMatch:
    """The result of matching one layer: global atoms ``G/S``, their sums, precisions and popularity,
    each client's assignment (client atom ``l`` → global atom) and the operations spent."""

    atoms: np.ndarray
    G: np.ndarray
    S: np.ndarray
    popularity: np.ndarray
    assignments: list[np.ndarray]
    ops: float


def _max_new(L_j: int, L: int, max_atoms: int | None) -> int:
    cap = min(L_j, max(NEW_ATOM_LIMIT - L, 1))
    if max_atoms is not None:
        cap = min(cap, max(max_atoms - L, 0))
    return cap


def match_one(w: np.ndarray, s_j: np.ndarray, G: np.ndarray, S: np.ndarray, popularity: np.ndarray,
              prior_mean_norm: np.ndarray, prior_prec: np.ndarray, gamma: float, J: int,
              max_atoms: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Match client ``j``'s (precision-scaled) atoms ``w`` into the global layer (``matching_upd_j``).

    Returns the new ``G``, ``S``, popularity, the client's assignment, the assignment's total cost and
    the operations spent. ``max_atoms`` caps the global layer's size (a fixed-capacity model); it never
    drops below ``L_j`` columns, so the assignment always exists when ``L ≥ L_j``.
    """
    L = G.shape[0]
    max_new = _max_new(w.shape[0], L, max_atoms)
    if L + max_new < w.shape[0]:
        raise ValueError(f"cannot place {w.shape[0]} atoms in a layer capped at {max_atoms} (it has {L})")
    from scipy.optimize import linear_sum_assignment

    cost = assignment_cost(w, s_j, G, S, popularity, prior_mean_norm, prior_prec, gamma, J, max_new)
    rows, cols = linear_sum_assignment(-cost)
    total = float(cost[rows, cols].sum())
    G = G.copy()
    S = S.copy()
    pop = list(np.asarray(popularity, dtype=np.int64))
    assignment = np.empty(w.shape[0], dtype=np.int64)
    new_rows_G: list[np.ndarray] = []
    new_rows_S: list[np.ndarray] = []
    for l, i in zip(rows, cols):  # rows come sorted, so new atoms are numbered in client-atom order
        if i < L:
            pop[i] += 1
            G[i] += w[l]
            S[i] += s_j
            assignment[l] = i
        else:
            assignment[l] = L + len(new_rows_G)
            pop.append(1)
            new_rows_G.append(prior_mean_norm + w[l])
            new_rows_S.append(prior_prec + s_j)
    if new_rows_G:
        G = np.vstack([G, np.array(new_rows_G)])
        S = np.vstack([S, np.array(new_rows_S)])
    ops = assignment_ops(w.shape[0], L, max_new, w.shape[1])
    return G, S, np.array(pop, dtype=np.int64), assignment, total, ops


def match_layer(atoms: Sequence[np.ndarray], precisions: Sequence[np.ndarray], prior_mean: np.ndarray,
                prior_prec: np.ndarray, gamma: float, iters: int, rng: np.random.Generator,
                max_atoms: int | None = None) -> LayerMatch:
    """Match one layer's atoms across ``J`` clients (the code's ``match_layer``).

    Starts from the client with most atoms (ties: the lowest index), adds the others one by one in that
    order, then runs ``iters`` sweeps in a random client order (from ``rng``), each removing client ``j``'s
    contribution (atoms only it used disappear) and re-matching it.

    Parameters
    ----------
    atoms
        Per client ``(L_j, D)`` atoms (unscaled).
    precisions
        Per client ``(D,)`` precision of each coordinate (``1/σ²``, or a class share over ``σ²``).
    prior_mean, prior_prec
        ``(D,)`` prior mean ``μ₀`` and precision ``1/σ₀²``.
    gamma, iters
        IBP mass and number of sweeps.
    rng
        Stream of the sweeps' client orders.
    max_atoms
        Optional cap on the global layer's size (hierfl's fixed-capacity models).
    """
    J = len(atoms)
    if J < 2 or len(precisions) != J:
        raise ValueError(f"match_layer needs at least 2 clients and one precision per client, got {J}, {len(precisions)}")
    order = sorted(range(J), key=lambda j: (-atoms[j].shape[0], j))
    scaled = [np.asarray(a, dtype=np.float64) * np.asarray(p, dtype=np.float64) for a, p in zip(atoms, precisions)]
    prec = [np.asarray(p, dtype=np.float64) for p in precisions]
    prior_mean_norm = np.asarray(prior_mean, dtype=np.float64) * prior_prec
    first = order[0]
    L0 = scaled[first].shape[0]
    if max_atoms is not None and L0 > max_atoms:
        raise ValueError(f"client {first} has {L0} atoms, more than the cap {max_atoms}")
    G = prior_mean_norm + scaled[first]
    S = np.tile(prior_prec + prec[first], (L0, 1))
    pop = np.ones(L0, dtype=np.int64)
    assignments: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * J
    assignments[first] = np.arange(L0)
    ops = 0.0
    for j in order[1:]:
        G, S, pop, assignments[j], _, o = match_one(scaled[j], prec[j], G, S, pop, prior_mean_norm, prior_prec,
                                                    gamma, J, max_atoms)
        ops += o
    for _ in range(iters):
        for j in rng.permutation(J):
            j = int(j)
            # remove client j: atoms only it used disappear, the others lose its contribution
            used = assignments[j]
            pop = pop.copy()
            pop[used] -= 1
            G = G.copy()
            S = S.copy()
            G[used] -= scaled[j]
            S[used] -= prec[j]
            keep = pop > 0
            if not keep.all():
                renumber = np.cumsum(keep) - 1
                for k in range(J):
                    if k != j:
                        assignments[k] = renumber[assignments[k]]
                G, S, pop = G[keep], S[keep], pop[keep]
            G, S, pop, assignments[j], _, o = match_one(scaled[j], prec[j], G, S, pop, prior_mean_norm, prior_prec,
                                                        gamma, J, max_atoms)
            ops += o
    return LayerMatch(atoms=G / S, G=G, S=S, popularity=pop, assignments=assignments, ops=ops)


def layer_objective(G: np.ndarray, S: np.ndarray) -> float:
    """``Σ G²/S``: the code's ``objective`` of a matched layer (larger: tighter matches)."""
    return float((G ** 2 / S).sum())


def class_shares(counts: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per client ``n_j^c / Σ_j' n_j'^c`` (a class no client holds: every share 0)."""
    arr = np.asarray(counts, dtype=np.float64)
    total = arr.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(total > 0, arr / np.where(total > 0, total, 1.0), 0.0)
    return [shares[j] for j in range(arr.shape[0])]


@dataclass
class MLPMatch:
    """A matched MLP: ``layers[k] = (W_k, b_k)`` in ``(out, in)`` orientation, the hidden widths, each
    hidden layer's per-client assignment and the operations spent."""

    layers: list[tuple[np.ndarray, np.ndarray]]
    widths: list[int]
    assignments: list[list[np.ndarray]]
    ops: float


def match_mlp(clients: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]], counts: Sequence[np.ndarray] | None,
              sigma2: float, sigma0_2: float, gamma: float, iters: int, rng: np.random.Generator,
              max_widths: Sequence[int | None] | None = None) -> MLPMatch:
    """PFNM's one-shot matching of whole MLPs (the code's ``layer_group_descent``).

    Hidden layers are matched from the last one down to the first. A hidden neuron's atom is its bias and
    its outgoing weights (patched to the next layer's global indices), plus its incoming weights for the
    first layer. Outgoing weights into class ``c`` have precision ``share_jc/σ²`` (:func:`class_shares`;
    all ones without ``counts``), others ``1/σ²``; prior means 0 (weights) and 0.1 (biases), prior
    precision ``1/σ₀²``. The output bias is ``(Σ_j share_j b_j/σ² + 0.1/σ₀²) / (1/σ₀² + Σ_j share_j/σ²)``.

    Parameters
    ----------
    clients
        Per client, ``[(W_1, b_1), …, (W_n, b_n)]`` with ``W_k`` of shape ``(out, in)``; all clients have
        the same depth, input size and classes (hidden widths may differ).
    counts
        Per client, its class counts ``(C,)``; None: every share 1 (the code without frequencies).
    sigma2, sigma0_2, gamma, iters
        ``σ²``, ``σ₀²``, IBP mass and sweeps of :func:`match_layer`.
    rng
        Stream of the sweeps' orders.
    max_widths
        Optional cap per hidden layer (None entries: uncapped).
    """
    J = len(clients)
    depth = len(clients[0])
    if depth < 2 or any(len(c) != depth for c in clients):
        raise ValueError("match_mlp needs clients of the same depth with at least one hidden layer")
    C = clients[0][-1][0].shape[0]
    D = clients[0][0][0].shape[1]
    shares = [np.ones(C)] * J if counts is None else class_shares(counts)
    caps = list(max_widths) if max_widths is not None else [None] * (depth - 1)
    inv, inv0 = 1.0 / sigma2, 1.0 / sigma0_2
    Ws: list[np.ndarray] = [np.empty(0)] * depth
    bs: list[np.ndarray] = [np.empty(0)] * depth
    bs[-1] = _softmax_bias([np.asarray(cl[-1][1], dtype=np.float64) for cl in clients], shares, inv, inv0)
    assignments: list[list[np.ndarray]] = []
    widths: list[int] = []
    ops = 0.0
    next_assign: list[np.ndarray] | None = None
    L_next = C
    for c in range(depth - 1, 0, -1):  # hidden layer c−1, whose outgoing weights are linear layer c's
        first = c == 1
        atoms_list: list[np.ndarray] = []
        prec_list: list[np.ndarray] = []
        for j in range(J):
            outgoing = np.asarray(clients[j][c][0], dtype=np.float64).T     # (L_j, out_next)
            if next_assign is not None:  # patch to the next layer's global indices
                patched = np.zeros((outgoing.shape[0], L_next))
                patched[:, next_assign[j]] = outgoing
                outgoing = patched
            parts = [np.asarray(clients[j][c - 1][1], dtype=np.float64)[:, None], outgoing]
            prec = [np.array([inv]), shares[j] * inv if c == depth - 1 else np.full(L_next, inv)]
            if first:
                parts.insert(0, np.asarray(clients[j][0][0], dtype=np.float64))
                prec.insert(0, np.full(D, inv))
            atoms_list.append(np.hstack(parts))
            prec_list.append(np.concatenate(prec))
        off = D if first else 0
        prior_mean = np.zeros(off + 1 + L_next)
        prior_mean[off] = BIAS_PRIOR_MEAN
        prior_prec = np.full(prior_mean.shape[0], inv0)
        lm = match_layer(atoms_list, prec_list, prior_mean, prior_prec, gamma, iters, rng, caps[c - 1])
        ops += lm.ops
        Ws[c] = lm.atoms[:, off + 1:].T
        bs[c - 1] = lm.atoms[:, off]
        if first:
            Ws[0] = lm.atoms[:, :D]
        assignments.insert(0, lm.assignments)
        widths.insert(0, lm.atoms.shape[0])
        next_assign = lm.assignments
        L_next = lm.atoms.shape[0]
    return MLPMatch(layers=list(zip(Ws, bs)), widths=widths, assignments=assignments, ops=ops)


def _softmax_bias(biases: Sequence[np.ndarray], shares: Sequence[np.ndarray], inv: float, inv0: float) -> np.ndarray:
    """The code's ``process_softmax_bias``: a precision-weighted mean of the output biases, prior 0.1."""
    num = sum(b * s * inv for b, s in zip(biases, shares)) + BIAS_PRIOR_MEAN * inv0
    den = inv0 + sum(s * inv for s in shares)
    return np.asarray(num / den, dtype=np.float64)


def match_fc_layer(Ws: Sequence[np.ndarray], bs: Sequence[np.ndarray], sigma2: float, sigma0_2: float,
                   gamma: float, iters: int, rng: np.random.Generator,
                   max_atoms: int | None = None) -> tuple[np.ndarray, np.ndarray, LayerMatch]:
    """FedMA's matching of one fully connected layer (``BBP_MAP`` on one layer): atom = a neuron's incoming
    weights (input side already in global order) and its bias; precisions ``1/σ²``, prior means 0 and 0.1,
    prior precision ``1/σ₀²``. Returns the global ``(W, b)`` and the :class:`LayerMatch`."""
    D = np.asarray(Ws[0]).shape[1]
    if any(np.asarray(W).shape[1] != D for W in Ws):
        raise ValueError("match_fc_layer: every client's layer must read the same (global) input width")
    atoms = [np.hstack([np.asarray(W, dtype=np.float64), np.asarray(b, dtype=np.float64)[:, None]])
             for W, b in zip(Ws, bs)]
    prec = [np.full(D + 1, 1.0 / sigma2)] * len(atoms)
    prior_mean = np.zeros(D + 1)
    prior_mean[D] = BIAS_PRIOR_MEAN
    lm = match_layer(atoms, prec, prior_mean, np.full(D + 1, 1.0 / sigma0_2), gamma, iters, rng, max_atoms)
    return lm.atoms[:, :D], lm.atoms[:, D], lm


def permute_inputs(W_next: np.ndarray, assignment: np.ndarray, width: int) -> np.ndarray:
    """A client's next layer reading the matched layer: column ``l`` moves to global neuron
    ``assignment[l]``; global neurons the client does not use read zero (FedMA's patching)."""
    W_next = np.asarray(W_next)
    out = np.zeros((W_next.shape[0], width), dtype=W_next.dtype)
    out[:, np.asarray(assignment)] = W_next
    return out


def class_average(Ws: Sequence[np.ndarray], bs: Sequence[np.ndarray],
                  counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """FedMA's last layer: row ``c`` (class ``c``'s weights and bias) is ``Σ_j p_jc · row_jc`` with
    ``p_jc = n_j^c / Σ_j' n_j'^c`` (a class nobody holds: the plain mean)."""
    arr = np.asarray(counts, dtype=np.float64)
    total = arr.sum(axis=0)
    p = np.where(total > 0, arr / np.where(total > 0, total, 1.0), 1.0 / arr.shape[0])
    W = sum(p[j][:, None] * np.asarray(Ws[j], dtype=np.float64) for j in range(len(Ws)))
    b = sum(p[j] * np.asarray(bs[j], dtype=np.float64) for j in range(len(bs)))
    return np.asarray(W), np.asarray(b)
