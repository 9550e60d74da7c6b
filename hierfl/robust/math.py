"""Byzantine-robust aggregation rules and adversarial update transforms (pure numpy).

Every rule takes the updates of one aggregation as the rows of a 2-D array ``V`` (``m × d``,
float64) with non-negative weights ``w`` and returns the aggregate (float64, length ``d``) and a
boolean mask of the rows it *accepted* (a row a selection rule such as Krum or Zeno left out is
rejected; coordinate-wise rules use every row). All rules are translation-equivariant, so they
can be applied to models as well as to deltas, except :func:`norm_clip`, which clips each row's
distance from a reference model (the model the round started from).

Sources: GeoMed / MarMed / MeaMed — Xie, Koyejo, Gupta, "Generalized Byzantine-tolerant SGD",
arXiv 1802.10116 (docs/explanation/algorithms.md §5.8); trimmed mean — Yin, Chen, Ramchandran, Bartlett,
"Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates", ICML 2018;
Krum / Multi-Krum — Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with
Adversaries: Byzantine Tolerant Gradient Descent", NeurIPS 2017; norm clipping — Sun, Kairouz,
Suresh, McMahan, "Can You Really Backdoor Federated Learning?", arXiv 1911.07963; Zeno — Xie,
Koyejo, Gupta, "Zeno: Distributed SGD with Suspicion-based Fault-tolerance", ICML 2019; Zeno++ —
Xie, Koyejo, Gupta, "Zeno++: Robust Fully Asynchronous SGD", ICML 2020; ALIE — Baruch, Baruch,
Goldberg, "A Little Is Enough: Circumventing Defenses For Distributed Learning", NeurIPS 2019.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["finite_rows", "weighted_mean", "geomed", "marmed", "meamed", "trimmed_mean", "krum_scores", "krum",
           "multi_krum", "clip_rows", "zeno_scores", "zeno_select", "zeno_pp_accept", "sign_flip", "scale_update",
           "gaussian_update", "alie_vector", "GEOMED_EPS", "GEOMED_TOL", "GEOMED_MAX_ITER"]

GEOMED_EPS = 1e-8      # docs/explanation/algorithms.md §5.8: smoothing of the Weiszfeld weights
GEOMED_TOL = 1e-6      # relative stopping tolerance
GEOMED_MAX_ITER = 100


def finite_rows(V: np.ndarray) -> np.ndarray:
    """Mask of the rows with only finite values (a robust rule never lets a NaN/inf row in)."""
    return np.all(np.isfinite(V), axis=1)


def weighted_mean(V: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``Σ w_i v_i / Σ w_i`` in float64 (rows summed in order)."""
    w = np.asarray(w, dtype=np.float64)
    if w.sum() <= 0:
        raise ValueError("aggregation weights sum to zero")
    acc = np.zeros(V.shape[1], dtype=np.float64)
    for i in range(V.shape[0]):
        acc += w[i] * V[i]
    return acc / w.sum()


def geomed(V: np.ndarray, w: np.ndarray | None = None, eps: float = GEOMED_EPS, tol: float = GEOMED_TOL,
           max_iter: int = GEOMED_MAX_ITER) -> np.ndarray:
    """Geometric median ``argmin_z Σ a_i ‖v_i − z‖`` by (weighted) Weiszfeld iterations (docs/explanation/algorithms.md §5.8).

    Starts from the coordinate-wise median; ``z ← Σ a_i v_i / max(‖v_i − z‖, ε) / Σ a_i / max(‖v_i − z‖, ε)``
    until ``‖z⁺ − z‖ ≤ tol · max(1, ‖z‖)`` or ``max_iter`` steps. ``w=None``: unweighted.
    """
    a = np.ones(V.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
    z = np.median(V, axis=0)
    for _ in range(max_iter):
        dist = np.maximum(np.linalg.norm(V - z, axis=1), eps)
        coef = a / dist
        z_new = (coef @ V) / coef.sum()
        done = np.linalg.norm(z_new - z) <= tol * max(1.0, float(np.linalg.norm(z)))
        z = z_new
        if done:
            break
    return np.asarray(z)


def marmed(V: np.ndarray) -> np.ndarray:
    """Coordinate-wise (marginal) median; for even ``m`` the mean of the two middle values."""
    return np.asarray(np.median(V, axis=0))


def _sorted_by_closeness(V: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Per column, ``V``'s values ordered by distance to ``centre`` (ties by value, so order-free)."""
    dist = np.abs(V - centre)
    # lexsort: last key is primary. Sorting by (distance, value) makes the choice among equally
    # distant values independent of the input order (permutation invariance).
    order = np.lexsort((V, dist), axis=0)
    return np.take_along_axis(V, order, axis=0)


def meamed(V: np.ndarray, q: int) -> np.ndarray:
    """Mean around the median: per coordinate, the mean of the ``m − q`` values closest to the median."""
    m = V.shape[0]
    if not 0 <= q < m:
        raise ValueError(f"meamed needs 0 <= q < m, got q={q}, m={m}")
    close = _sorted_by_closeness(V, np.median(V, axis=0))
    return np.asarray(close[: m - q].mean(axis=0))


def trimmed_mean(V: np.ndarray, beta: float) -> np.ndarray:
    """Coordinate-wise β-trimmed mean: drop the ``⌊β m⌋`` largest and smallest values of each coordinate."""
    m = V.shape[0]
    k = int(np.floor(beta * m))
    if 2 * k >= m:  # too few updates to trim that much: trim as much as leaves one value
        k = (m - 1) // 2
    s = np.sort(V, axis=0)
    return np.asarray(s[k: m - k].mean(axis=0))


def krum_scores(V: np.ndarray, f: int) -> np.ndarray:
    """Krum score of each row: the sum of squared distances to its ``m − f − 2`` nearest other rows."""
    m = V.shape[0]
    k = max(m - f - 2, 1)
    sq = np.sum(V * V, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (V @ V.T), 0.0)
    scores = np.empty(m)
    for i in range(m):
        others = np.sort(np.delete(d2[i], i))
        scores[i] = others[: min(k, m - 1)].sum()
    return scores


def _rank(scores: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Rows ordered by score; equal scores ordered by the rows' values, so the order is input-order free."""
    # secondary keys: two summaries of the row (not every column: d can be 10⁵)
    return np.lexsort((V[:, 0], V.sum(axis=1), scores))


def krum(V: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """Krum: the row with the lowest score; returns (it, accepted mask)."""
    order = _rank(krum_scores(V, f), V)
    mask = np.zeros(V.shape[0], dtype=bool)
    mask[order[0]] = True
    return V[order[0]].copy(), mask


def multi_krum(V: np.ndarray, f: int, select: int, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Multi-Krum: the (weighted) mean of the ``select`` rows with the lowest Krum scores."""
    order = _rank(krum_scores(V, f), V)[: max(1, min(select, V.shape[0]))]
    mask = np.zeros(V.shape[0], dtype=bool)
    mask[order] = True
    a = np.ones(V.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
    if a[mask].sum() <= 0:
        a = np.ones(V.shape[0])
    return weighted_mean(V[np.sort(order)], a[np.sort(order)]), mask


def clip_rows(V: np.ndarray, centre: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distance from ``centre`` clipped to ``bound``; returns (rows, mask of the clipped ones)."""
    delta = V - centre
    norms = np.linalg.norm(delta, axis=1)
    factor = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return centre + delta * factor[:, None], norms > bound


def zeno_scores(V: np.ndarray, base: np.ndarray, loss: Callable[[np.ndarray], float], rho: float) -> np.ndarray:
    """Zeno's stochastic descendant score of each candidate model ``v_i`` stepped from ``base``:
    ``f(base) − f(v_i) − ρ‖v_i − base‖²`` on the server's validation batch (Xie et al. 2019, with the
    candidate step ``v_i − base`` in place of ``−γ g_i``)."""
    f0 = loss(base)
    return np.array([f0 - loss(V[i]) - rho * float(np.sum((V[i] - base) ** 2)) for i in range(V.shape[0])])


def zeno_select(scores: np.ndarray, b: int) -> np.ndarray:
    """Mask of the ``m − b`` best-scored candidates (ties: lower index first, scores come in arrival order)."""
    m = scores.shape[0]
    keep = max(1, m - b)
    order = np.argsort(-scores, kind="stable")[:keep]
    mask = np.zeros(m, dtype=bool)
    mask[order] = True
    return mask


def zeno_pp_accept(loss_before: float, loss_after: float, step_sq_norm: float, rho: float, eps: float) -> bool:
    """Zeno++ (Xie et al. 2020): accept a step when ``f(x) − f(x + u) − ρ‖u‖² ≥ −ε``."""
    score = loss_before - loss_after - rho * step_sq_norm
    return bool(np.isfinite(score) and score >= -eps)


# -- update transforms (what a Byzantine device sends instead of its honest model) -------------------
def sign_flip(v: np.ndarray, start: np.ndarray, s: float) -> np.ndarray:
    """``start − s·(v − start)``: the update reversed and scaled."""
    return start - s * (v - start)


def scale_update(v: np.ndarray, start: np.ndarray, s: float) -> np.ndarray:
    """``start + s·(v − start)``: a boosted update (model replacement, Bagdasaryan et al. 2020)."""
    return start + s * (v - start)


def gaussian_update(start: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``start + N(0, σ² I)``: the update replaced by noise."""
    return start + sigma * rng.standard_normal(start.shape[0])


def alie_vector(V: np.ndarray, z: float) -> np.ndarray:
    """A Little Is Enough (Baruch et al. 2019): ``μ − z·σ`` per coordinate of the honest rows ``V``."""
    if V.shape[0] == 0:
        raise ValueError("ALIE needs at least one honest update")
    return np.asarray(V.mean(axis=0) - z * V.std(axis=0))
