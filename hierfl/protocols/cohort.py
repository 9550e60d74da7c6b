"""``protocol.sampling`` for every protocol that draws a fraction of a population per round: the keys and the draw.

A protocol whose synchronous rounds take a fraction ``C`` of some population (all devices, an edge's members,
a tier, a cluster) offers two ways of drawing it, with the same keys everywhere:

* ``sampling: fixed`` — the protocol's own fixed-size draw (its default, unchanged);
* ``sampling: bernoulli`` — every online member joins on its own coin of probability ``C`` (Poisson sampling),
  drawn by :func:`hierfl.core.sampling.bernoulli_cohort` from the round's own seeded stream, so a round's size
  varies and may be zero. What an empty draw does is ``empty_cohort``:

  * ``skip``: the round passes with no update (a ``round_empty`` record; the protocol says what a passed
    round counts as);
  * ``redraw``: the coins are thrown again, at the same emulated time, until one comes up — the reference
    code of Acar et al. (ICLR 2021), Gao et al. (CVPR 2022) and Zhang et al. (CVPR 2022)
    reseeds and draws again until the cohort is not empty. Draw ``a`` (``a ≥ 1``) of a round uses the stream
    ``(<name>.redraw, *ids, a)``.

A protocol declares the two fields with :func:`sampling_field` and :func:`empty_cohort_field`, draws with
:func:`coin_cohort` and adds :func:`coin_problems` to its ``check``; all are in :mod:`hierfl.plugin`.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from hierfl.config.errors import Problem
from hierfl.core.sampling import bernoulli_cohort
from hierfl.env import Env

__all__ = ["SamplingKind", "EmptyCohort", "sampling_field", "empty_cohort_field", "coin_cohort", "coin_problems"]

SamplingKind = Literal["fixed", "bernoulli"]
EmptyCohort = Literal["skip", "redraw"]
# a bound on redraws: with q·n this small, coins would need (1 − q)^-n draws on average; refuse rather than spin
_MAX_REDRAWS = 100_000


def sampling_field(fixed: str, population: str = "online device") -> Any:
    """The ``sampling`` field: ``fixed`` (described by ``fixed``: the protocol's own draw) or ``bernoulli``."""
    return Field(default="fixed", description=f"how a round's participants are drawn: fixed ({fixed}) or bernoulli "
                                              f"(each {population} joins on its own coin of probability fraction, so a "
                                              "round's size varies and may be zero: see empty_cohort)")


def empty_cohort_field(default: EmptyCohort, skip: str) -> Any:
    """The ``empty_cohort`` field (read only with ``sampling: bernoulli``): ``skip`` (``skip``: what a passed
    round is) or ``redraw`` (throw the coins again until one comes up, as those reference codes do)."""
    return Field(default=default, description=f"with sampling: bernoulli, a draw with nobody: skip ({skip}) or redraw "
                                              "(throw the coins again at once until somebody joins, as the reference "
                                              "codes of Acar et al. 2021, Gao et al. 2022 and Zhang et al. 2022)")


def coin_cohort(env: Env, stream: tuple[Any, ...], population: int | np.ndarray, q: float,
                empty: EmptyCohort = "skip") -> list[int]:
    """The members of ``population`` (a count ``n``: ids ``0..n-1``; or an array of ids) whose coins of
    probability ``q`` came up, sorted; drawn from ``env.rng(*stream)`` (``stream``: a name, then integer ids).
    Empty only with ``empty="skip"``; ``redraw`` throws again from ``(<name>.redraw, *ids, attempt)``."""
    name, ids = str(stream[0]), tuple(int(i) for i in stream[1:])
    chosen = bernoulli_cohort(env.rng(name, *ids), population, q)
    attempt = 0
    while not len(chosen) and empty == "redraw":
        attempt += 1
        if attempt > _MAX_REDRAWS:
            raise ValueError(f"{name}: no coin of probability {q} came up in {_MAX_REDRAWS} draws; raise the fraction")
        chosen = bernoulli_cohort(env.rng(f"{name}.redraw", *ids, attempt), population, q)
    return sorted(int(i) for i in chosen)


def coin_problems(cfg: Any, scenario: Any, round_size: int, key: str = "straggler") -> list[Problem]:
    """With ``sampling: bernoulli`` the coins decide a round alone: a straggler policy (at ``key``) that would
    select extra participants over a round of ``round_size`` is refused. Under ``privacy.dp`` coins are refused
    unless the protocol declares its cloud cohort Poisson-sampled (``sampling_scheme() == "poisson"``, the
    sampling a privacy accountant can cover), and so are redraws: an accountant of Poisson sampling counts the
    empty rounds, which a redraw removes."""
    if getattr(cfg, "sampling", "fixed") != "bernoulli":
        return []
    out: list[Problem] = []
    policy = scenario.straggler
    m = max(int(round_size), 1)
    if policy.select_count(m) != m:
        out.append(Problem(f"{key}.name", f"selects {policy.select_count(m)} participants for a round of {m}: with "
                           "protocol.sampling: bernoulli each participant's coin decides the round alone; allowed "
                           "with it: a policy that selects no extra participants", policy.name))
    if getattr(getattr(scenario, "privacy", None), "dp", None) is not None:
        if cfg.sampling_scheme() != "poisson":
            out.append(Problem("protocol.sampling", f"protocol {cfg.name!r} draws its coins where no privacy "
                               "accountant here covers them (ε would be wrong); allowed with privacy.dp: fixed",
                               "bernoulli"))
        elif getattr(cfg, "empty_cohort", "skip") == "redraw":
            out.append(Problem("protocol.empty_cohort", "a redraw hides the empty rounds that the accountant of "
                               "Poisson sampling counts (ε would be wrong); allowed with privacy.dp: skip", "redraw"))
    return out
