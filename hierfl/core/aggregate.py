"""Aggregation math on flat float32 parameter vectors (pure numpy).

As in Flower's ``strategy/aggregate.py``, aggregation is vector arithmetic. A weighted average
is computed as a *streaming* float64 sum ``Σ w_k v_k`` divided by ``Σ w_k`` at the end, so a
server can fold each update in when its arrival event is processed (overlapping the remaining
training) instead of doing all the work at the round barrier. Sums run in the order updates are
added — the virtual-time arrival order, which is the same every run and with every executor —
so results are bit-identical wherever they are computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import math

import numpy as np

__all__ = ["WeightedSum", "normalised_weights", "weighted_average", "linear_combination", "RuleContext"]


class RuleContext:
    """What an aggregation rule that draws noise or keeps state sees at one commit of its point.

    * ``rng``: a generator of the run's seed for this commit (stream ``("rule", tier, entity, k)`` for the
      point's ``k``-th commit), so noise is the same with every executor;
    * ``state``: a dictionary the point keeps for its rule across commits (saved in checkpoints with the
      roles' state), e.g. an adaptive clip norm;
    * ``expected``: how many updates the protocol declares this point combines per round (its
      ``expected_inputs()``), or None;
    * ``commit``: ``k``;
    * ``entity``: the point's entity (an edge server's id; 0 at the cloud), for a rule whose settings differ
      per point (differential privacy's fixed denominator: each edge's own expected cohort).
    """

    __slots__ = ("rng", "state", "expected", "commit", "entity")

    def __init__(self, rng: np.random.Generator, state: dict, expected: int | None, commit: int,
                 entity: int = 0) -> None:
        self.rng = rng
        self.state = state
        self.expected = expected
        self.commit = commit
        self.entity = int(entity)


def _check_weight(weight: float) -> float:
    w = float(weight)
    if not np.isfinite(w) or w < 0:
        raise ValueError(f"aggregation weights must be finite and >= 0, got {weight!r}")
    return w


_BLOCK = 1 << 15  # floats of a fold's scratch block: 256 KiB of float64, within a core's L2 cache


class WeightedSum:
    """Streaming weighted average: ``add(v, w)`` repeatedly, then ``result()``.

    While every vector added is one and the same array ``x`` (timing-only jobs all return the model they
    started from), nothing is computed: the weights are kept, and ``result()`` returns ``x`` itself when
    that is what the float64 sum would give, bit for bit — for a finite ``x``, weights ``w_k ≥ 0`` and
    ``W = Σ w_k > 0`` every term ``w_k x`` has the sign of ``x``, so ``Σ w_k x / W`` is within a relative
    ``(n + 1)·2⁻⁵³`` of ``x`` (no cancellation) and rounds back to the float32 ``x`` (whose half-ulp is
    ``2⁻²⁵`` relative) as long as ``n`` is far below ``2²⁸`` and no product over- or underflows float64.
    Outside those bounds, or as soon as a different vector arrives, the kept weights are folded in order
    as usual, so the sum's arithmetic (and its bits) is that of a plain run. A vector must not be written
    to between its ``add`` and ``result()`` (no caller does: models are replaced, never mutated).
    """

    # weights within these bounds keep w·x a normal float64 for every finite float32 x (see the docstring)
    _W_MIN, _W_MAX, _N_MAX = 1e-250, 1e250, 1 << 20

    def __init__(self) -> None:
        self._acc: np.ndarray | None = None
        self._tmp: np.ndarray | None = None
        self._same: np.ndarray | None = None  # the one vector added so far, not yet folded in
        self._weights: list[float] = []       # ... and its weights, in order
        self.total_weight = 0.0
        self.count = 0
        self.folds = 0  # vectors actually multiplied into the float64 sum (tests count the arithmetic)

    def add(self, vector: np.ndarray, weight: float) -> None:
        """Fold in one update (float64 accumulation, no per-call allocation after the first)."""
        w = _check_weight(weight)
        if self._acc is None and (self._same is None or vector is self._same) and isinstance(vector, np.ndarray):
            self._same = vector  # (the same array again: defer, see the class docstring)
            self._weights.append(w)
        else:
            self._flush()
            self._fold(np.asarray(vector), w)
        self.total_weight += w
        self.count += 1

    def _fold(self, vec: np.ndarray, w: float) -> None:
        if self._acc is None:
            self._acc = np.multiply(vec, w, dtype=np.float64)
        else:
            acc = self._acc
            if vec.shape != acc.shape:
                raise ValueError(f"vector shapes differ: {vec.shape} vs {acc.shape}")
            if acc.ndim != 1 or acc.size <= _BLOCK:
                if self._tmp is None:
                    self._tmp = np.empty_like(acc)
                np.multiply(vec, w, out=self._tmp, dtype=np.float64)
                acc += self._tmp
            else:
                # block by block through a cache-sized scratch: the same elementwise operations (and bits)
                # as the whole-vector form, without streaming a model-sized float64 temporary through memory
                if self._tmp is None:
                    self._tmp = np.empty(_BLOCK, dtype=np.float64)
                tmp = self._tmp
                for start in range(0, acc.size, _BLOCK):
                    stop = min(start + _BLOCK, acc.size)
                    part = tmp[: stop - start]
                    np.multiply(vec[start:stop], w, out=part, dtype=np.float64)
                    acc[start:stop] += part
        self.folds += 1

    def _flush(self) -> None:
        """Fold the deferred vector in with each of its weights, in order (the plain arithmetic)."""
        same, weights = self._same, self._weights
        if same is None:
            return
        self._same, self._weights = None, []
        for w in weights:
            self._fold(np.asarray(same), w)

    def _unchanged(self) -> bool:
        """Whether the average of the deferred vector is that vector, bit for bit (class docstring)."""
        x = self._same
        if x is None or x.dtype != np.float32 or len(self._weights) > self._N_MAX:
            return False
        if not (0.0 < self.total_weight <= self._W_MAX):
            return False
        if any(w != 0.0 and w < self._W_MIN for w in self._weights):
            return False
        return bool(np.isfinite(x).all())

    def result(self) -> np.ndarray:
        """``Σ w_k v_k / Σ w_k`` as float32; raises if nothing (or only zero weight) was added.

        When every update was the same float32 array (and the bounds of the class docstring hold), that
        array itself: no arithmetic, no copy."""
        if self._same is None and self._acc is None:
            raise ValueError("aggregation needs at least one update")
        if self.total_weight <= 0:
            raise ValueError("aggregation weights sum to zero: nothing to average")
        if self._unchanged():
            x = self._same
            assert x is not None
            # (a read-only input, e.g. a zero-copy view of a shared-memory object: a writable copy, as a sum gives)
            return x if x.flags.writeable else x.copy()
        self._flush()
        assert self._acc is not None
        return (self._acc / self.total_weight).astype(np.float32)


def normalised_weights(weights: Sequence[float]) -> np.ndarray:
    """``weights / sum(weights)`` as float64; raises on empty, negative, non-finite or zero-sum input."""
    w = np.asarray([_check_weight(x) for x in weights], dtype=np.float64)
    if w.size == 0:
        raise ValueError("aggregation needs at least one weight")
    if w.sum() <= 0:
        raise ValueError("aggregation weights sum to zero: nothing to average")
    return w / w.sum()


def weighted_average(vectors: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """``wavg(models, weights) = Σ_k w_k · models_k / Σ_k w_k`` (docs/explanation/algorithms.md §1.3), as float32.

    Parameters
    ----------
    vectors:
        Flat parameter vectors of equal length, summed in the given order.
    weights:
        Non-negative weights, typically sample counts ``n_k`` (McMahan et al. 2017).
    """
    if len(vectors) != len(weights):
        raise ValueError(f"{len(vectors)} vectors but {len(weights)} weights")
    acc = WeightedSum()
    for vec, w in zip(vectors, weights):
        acc.add(vec, w)
    return acc.result()


def linear_combination(terms: Sequence[tuple[float, np.ndarray, np.ndarray | None]],
                       dtype: type = np.float32) -> np.ndarray:
    """``Σ_j c_j · (a_j − b_j)`` (or ``c_j · a_j`` when ``b_j`` is None) as float32 (or ``dtype``).

    The one primitive of the asynchronous protocols (docs/explanation/algorithms.md §4.3, §5.3, §5.4): a
    mix (Xie et al. 2019) is ``[(1−α, w), (α, w_k)]``, a buffer step (Nguyen et al. 2022)
    ``[(1, x), (η·s_i/K, y_i, y0_i)]``, a leader's rebase (§4.3) ``[(1, w), (1, w_k, w_last)]``.
    Accumulation is float64 in the given order (the virtual-time order), so every executor gets the
    same bits; differences are taken in float64 before scaling, so a small delta keeps its precision.
    Coefficients may be negative.
    """
    if not terms:
        raise ValueError("linear combination of no vectors")
    acc: np.ndarray | None = None
    finite: dict[int, tuple[bool, tuple[int, ...]]] = {}
    for coef, plus, minus in terms:
        c = float(coef)
        if not math.isfinite(c):
            raise ValueError(f"coefficients must be finite, got {coef!r}")
        if minus is not None and plus is minus:
            # a delta of a model from itself (a timing-only update, an unchanged model): c·(x − x) is
            # ±0.0 in every entry of a finite x, and adding ±0.0 leaves the sum's bits as they are (the
            # sum starts at +0.0 and so is never -0.0, the one value +0.0 would change): skipped,
            # with the bits of the full sum and without its four vector operations
            known = finite.get(id(plus))  # (whether x is finite, and its shape: looked at once per x)
            if known is None:
                known = finite[id(plus)] = (bool(np.isfinite(plus).all()), np.shape(plus))
            ok, shape = known
            if ok:
                if acc is None:
                    acc = np.zeros(shape, dtype=np.float64)
                elif shape != acc.shape:
                    raise ValueError(f"vector shapes differ: {shape} vs {acc.shape}")
                continue
        term = np.asarray(plus, dtype=np.float64)
        if minus is not None:
            term = term - np.asarray(minus, dtype=np.float64)
        if acc is None:
            acc = np.zeros_like(term)
        elif term.shape != acc.shape:
            raise ValueError(f"vector shapes differ: {term.shape} vs {acc.shape}")
        acc += c * term
    assert acc is not None
    return acc.astype(dtype, copy=False)
