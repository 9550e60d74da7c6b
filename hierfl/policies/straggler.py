"""Straggler policies (``straggler:``): what a synchronous barrier does about the slow, as plug-ins.

* ``wait_all`` — every selected participant that is still online;
* ``deadline`` — ``seconds`` after the round began (earlier if everyone arrived); with
  ``partial: true`` each device plans as many local steps as fit before the deadline (the partial
  work of Li et al., MLSys 2020, §3 "γ-inexact solutions");
* ``over_select`` — ``⌈factor·K⌉`` are selected, the first ``K`` to arrive are kept (FedScale's
  over-commitment, Lai et al., ICML 2022);
* ``first_k`` — the first ``k`` (or ``fraction``·K) arrivals close the round;
* ``random_epochs`` — the systems heterogeneity of Li et al., MLSys 2020, §5.2: each round a
  seeded ``fraction`` of the selected devices are stragglers that can do only ``x`` local epochs,
  ``x`` uniform in ``[1, E)``; ``partial: true`` aggregates their partial work (the paper's proximal
  method), ``false`` drops them before they compute (its plain-averaging baseline).

Where a policy may stand is declared, not assumed: each protocol lists its aggregation points
(:class:`AggregationPoint`: who sends to whom, whether the point waits for a set of participants,
and which key of ``straggler:`` closes it), and each policy says, through
:meth:`StragglerPolicy.refusal`, why it would mean nothing at a point. The scenario checks refuse
such a placement with the key path and the allowed points.

A barrier (:class:`hierfl.protocols.straggler.Barrier`) reads a policy only through its hooks:
:meth:`StragglerPolicy.select_count`, :meth:`StragglerPolicy.needed`,
:attr:`StragglerPolicy.deadline_s`, :attr:`StragglerPolicy.partial_work`,
:meth:`StragglerPolicy.assigned_stragglers` and :attr:`StragglerPolicy.keeps_stragglers`. Class flags:
``waits_for_all`` (the neutral policy: selects K and waits for all of them — the only one allowed
where there is no barrier or every trained update must arrive).

The ``straggler:`` section is the policy of a protocol's device rounds with a ``cloud`` key holding
the policy of its cloud round over edge servers: :func:`device_policy_field` builds that field
type from the registry.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, create_model, field_validator, model_validator

from hierfl.config.base import ConfigModel
from hierfl.config.registry import Registry

MIN_INTERVAL_S = 1e-3
"""Shortest straggler deadline and evaluation interval accepted (virtual seconds): one millisecond."""

__all__ = ["STRAGGLERS", "StragglerPolicy", "AggregationPoint", "POLICY_KEYS", "WaitAll", "Deadline", "OverSelect", "FirstK", "RandomEpochs",
           "device_policy_field", "default_policy", "neutral_names", "MIN_INTERVAL_S"]

STRAGGLERS: Registry = Registry("straggler policy")

POLICY_KEYS = ("straggler", "straggler.cloud")
"""The keys a straggler policy is placed at: a protocol's device rounds, its cloud round over edge servers."""


@dataclass(frozen=True)
class AggregationPoint:
    """One place where a protocol aggregates, as it declares it (``ProtocolConfig.aggregation_points``).

    ``key`` is where its policy is set (one of :data:`POLICY_KEYS`); ``flow`` says who sends to whom
    (``"device→edge"``); ``synchronous``: it waits for a set of participants (an asynchronous point
    applies each update, or a buffer of them, as it comes); ``takes_policy``: a straggler policy can
    close it (false for a synchronous round that must hear from every participant);
    ``participants``: ``"devices"`` or ``"edge servers"``; ``selects``: its participants are drawn
    from a larger pool, so more can be selected than are wanted (``over_select``); ``partial``: its
    participants can plan less work to meet a deadline; ``fixed_work``: they run a set number of local
    epochs or steps (which ``random_epochs`` shortens; not a time window); ``note``: for a point that takes no policy,
    why (else empty).
    """

    key: str
    flow: str
    synchronous: bool
    participants: str = "devices"
    selects: bool = True
    partial: bool = True
    fixed_work: bool = True
    takes_policy: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        if self.key not in POLICY_KEYS:
            raise ValueError(f"aggregation point {self.flow}: key must be one of {POLICY_KEYS}, not {self.key!r}")

    @property
    def closable(self) -> bool:
        """A straggler policy can close it: synchronous, and the protocol lets a policy decide."""
        return self.synchronous and self.takes_policy

    @property
    def label(self) -> str:
        """``straggler.cloud (edge→cloud)``: the point as error messages and docs name it."""
        return f"{self.key} ({self.flow})"


class StragglerPolicy(ConfigModel):
    """Base of the straggler policies: select K, wait for every selected participant."""

    waits_for_all: ClassVar[bool] = False
    """Selects exactly the K wanted and closes a round only when all of them arrived or dropped out."""

    def refusal(self, point: AggregationPoint) -> str | None:
        """Why this policy means nothing at ``point`` (None: it applies there). The neutral policy
        applies anywhere; any other needs a synchronous point."""
        if self.waits_for_all or point.closable:
            return None
        if not point.synchronous:
            return point.note or f"the {point.flow} aggregation is asynchronous: it waits for no set of participants"
        return point.note or f"the {point.flow} round must hear from every participant"

    def select_count(self, m: int) -> int:
        """How many participants to select for a round that wants ``m``."""
        return m

    def needed(self, selected: int, wanted: int) -> int:
        """Arrivals that close a round of ``selected`` participants early (before any deadline): all of them."""
        return selected

    @property
    def deadline_s(self) -> float | None:
        """Seconds after its start at which a round closes (None: no deadline)."""
        return None

    @property
    def partial_work(self) -> bool:
        """Devices plan as many local steps as fit before the deadline."""
        return False

    def assigned_stragglers(self, selected: int) -> int:
        """How many of a round's ``selected`` participants are stragglers by assignment (none)."""
        return 0

    @property
    def keeps_stragglers(self) -> bool:
        """Assigned stragglers run their shorter job and are aggregated (else: dropped before computing)."""
        return False

    def weigh_partial(self, full: float, share: float) -> float:
        """Aggregation weight of a partial job that did ``share`` of its full job's samples, ``full``
        being a whole job's weight: unchanged (Li et al. 2020 weigh partial solutions like whole ones)."""
        return full


@STRAGGLERS.register
class WaitAll(StragglerPolicy):
    """Wait for every selected participant (that has not gone offline)."""

    waits_for_all: ClassVar[bool] = True

    name: Literal["wait_all"] = "wait_all"


@STRAGGLERS.register
class Deadline(StragglerPolicy):
    """Close the round ``seconds`` after it began; later updates are dropped, or with ``partial``
    devices plan fewer local steps so they finish in time (the partial work of Li et al. 2020)."""

    name: Literal["deadline"] = "deadline"
    seconds: PositiveFloat = Field(description=f"at least {MIN_INTERVAL_S:g} s (a shorter one is a typo: every round empty)")
    partial: bool = Field(default=False, description="true: devices plan the local steps that fit before the deadline and are aggregated")
    partial_weight: Literal["samples", "work"] = Field(
        default="samples", description="aggregation weight of a partial job: its device's sample count, as a whole "
                                       "job's (Li et al. 2020), or that scaled by the share of the job's samples it "
                                       "processed [D]")

    @field_validator("seconds")
    @classmethod
    def _floor(cls, value: float) -> float:
        # a 1e-9 s deadline gave 87,000 empty rounds (reliability)
        if value < MIN_INTERVAL_S:
            raise ValueError(f"must be at least {MIN_INTERVAL_S:g} s (one virtual millisecond); no update can arrive "
                             "in less")
        return value

    @classmethod
    def example(cls) -> Deadline:
        """A minimal valid config (conformance tests)."""
        return cls(seconds=30.0)

    @property
    def deadline_s(self) -> float | None:
        """``seconds``."""
        return float(self.seconds)

    @property
    def partial_work(self) -> bool:
        """``partial``."""
        return self.partial

    def weigh_partial(self, full: float, share: float) -> float:
        """``full`` (``partial_weight: samples``) or ``share · full`` (``work``)."""
        return full * share if self.partial_weight == "work" else full

    def refusal(self, point: AggregationPoint) -> str | None:
        """Partial work needs participants that can plan less work."""
        if self.partial and point.closable and not point.partial:
            return (f"partial work needs participants that plan their own work, and the {point.participants} of "
                    f"the {point.flow} round do not: set partial: false")
        return super().refusal(point)


@STRAGGLERS.register
class OverSelect(StragglerPolicy):
    """Select ``⌈factor × K⌉`` participants and keep the first K to arrive (FedScale's over-commitment)."""

    name: Literal["over_select"] = "over_select"
    factor: float = Field(default=1.3, gt=1.0, description="select ⌈factor·K⌉ devices and keep the first K")

    def select_count(self, m: int) -> int:
        """``⌈factor · m⌉``."""
        return math.ceil(self.factor * m - 1e-9)

    def needed(self, selected: int, wanted: int) -> int:
        """The first ``wanted`` arrivals close the round."""
        return min(wanted, selected)

    def refusal(self, point: AggregationPoint) -> str | None:
        """Over-selection needs a pool larger than the participants wanted."""
        if point.closable and not point.selects:
            return (f"over-selection needs participants drawn from a larger pool; the {point.flow} round takes "
                    f"every one of its {point.participants}")
        return super().refusal(point)


@STRAGGLERS.register
class FirstK(StragglerPolicy):
    """Select K as usual; close the round when the first ``k`` (or ``fraction`` × K) updates arrived."""

    name: Literal["first_k"] = "first_k"
    k: PositiveInt | None = Field(default=None, description="keep the first k arrivals")
    fraction: float | None = Field(default=None, gt=0.0, le=1.0, description="keep the first share of the selected devices (instead of k)")

    @classmethod
    def example(cls) -> FirstK:
        """A minimal valid config (conformance tests)."""
        return cls(k=2)

    @model_validator(mode="after")
    def _one(self) -> FirstK:
        if (self.k is None) == (self.fraction is None):
            raise ValueError("set exactly one of k or fraction")
        return self

    def needed(self, selected: int, wanted: int) -> int:
        """How many arrivals close a round of ``selected`` participants."""
        if self.k is not None:
            return min(self.k, selected)
        assert self.fraction is not None
        return min(max(math.ceil(self.fraction * selected - 1e-9), 1), selected)


@STRAGGLERS.register
class RandomEpochs(StragglerPolicy):
    """The systems heterogeneity of Li et al., MLSys 2020 (arXiv 1812.06127), §5.2: each round
    ``fraction`` of the selected devices are stragglers whose constraints allow only ``x`` local
    epochs, ``x`` uniform in ``[1, E)``; ``partial: true`` aggregates their partial solutions
    (the paper's proximal method), ``partial: false`` drops them (its plain-averaging baseline).

    As in the reference code of Li et al. (``flearn/trainers/``): ``round(K·(1 −
    fraction))`` devices of the round are active, the rest are stragglers, and a straggler draws
    ``x = randint(1, E)`` (1 … E − 1 epochs). With ``training.steps`` (or E = 1) the draw is over
    steps, ``1 … H − 1`` [D]. The round waits for every device that computes.
    """

    name: Literal["random_epochs"] = "random_epochs"
    fraction: float = Field(ge=0.0, lt=1.0, description="share of each round's selected devices that are stragglers "
                                                         "(below 1: one device of every round is never a straggler)")
    partial: bool = Field(default=True, description="true: aggregate stragglers' partial work (Li et al. 2020); "
                                                    "false: drop them (their baseline)")

    @classmethod
    def example(cls) -> RandomEpochs:
        """A minimal valid config (conformance tests)."""
        return cls(fraction=0.5)

    def assigned_stragglers(self, selected: int) -> int:
        """``K − round(K·(1 − fraction))`` (half rounded up [D]; Python's ``round`` in the reference
        code rounds half to even, the same for its K = 10), but at most ``K − 1`` [D]: a round in
        which every device is dropped would aggregate nothing (the reference code fails there)."""
        return min(selected - math.floor(selected * (1.0 - self.fraction) + 0.5), selected - 1)

    @property
    def keeps_stragglers(self) -> bool:
        """``partial``."""
        return self.partial

    def refusal(self, point: AggregationPoint) -> str | None:
        """Stragglers by assignment are devices given fewer local epochs."""
        if point.closable and (point.participants != "devices" or not point.fixed_work):
            return (f"it gives devices fewer local epochs; the {point.participants} of the {point.flow} round "
                    "run no set number of local epochs it could shorten")
        return super().refusal(point)


def neutral_names() -> list[str]:
    """Names of the policies with ``waits_for_all`` (what is allowed where a policy cannot apply)."""
    return [n for n in STRAGGLERS.names() if STRAGGLERS.get(n).waits_for_all]


def _with_cloud(cls: type[StragglerPolicy]) -> type[StragglerPolicy]:
    """``cls`` with a ``cloud`` key: the policy of the cloud round over edge servers (where a protocol has one)."""
    name = f"{cls.__name__}WithCloud"
    if not cls.__module__.startswith("hierfl."):  # a plug-in's policy: its module keeps the name unique
        name += "_" + "".join(c if c.isalnum() else "_" for c in cls.__module__)
    variant = create_model(name, __base__=cls, __module__=__name__, __doc__=cls.__doc__,
                           cloud=(cloud_policy_field(), Field(default_factory=_default_cloud,
                                                              description="policy of the protocol's cloud round over edge servers, where it declares one")))
    setattr(sys.modules[__name__], name, variant)  # importable (and picklable) by its name
    return variant  # type: ignore[no-any-return]


def _default_cloud() -> StragglerPolicy:
    return default_cloud_policy()


@lru_cache(maxsize=1)
def cloud_policy_field() -> Any:
    """Field type of ``straggler.cloud``: every registered policy (the scenario checks refuse one that
    means nothing at the protocol's cloud round, by its declared aggregation points)."""
    return STRAGGLERS.union()


@lru_cache(maxsize=1)
def default_cloud_policy() -> StragglerPolicy:
    """``wait_all`` at the cloud."""
    return WaitAll()


_VARIANTS: dict[type[StragglerPolicy], type[StragglerPolicy]] = {}


def _variant(cls: type[StragglerPolicy]) -> type[StragglerPolicy]:
    """``cls`` with its ``cloud`` key, made once per policy class (a plug-in's policy gets its own on first use)."""
    if cls not in _VARIANTS:
        _VARIANTS[cls] = _with_cloud(cls)
    return _VARIANTS[cls]


@lru_cache(maxsize=1)
def device_policy_field() -> Any:
    """Field type of ``straggler:``: every registered policy, each with its ``cloud`` key.

    Late-bound (:mod:`hierfl.config.late`): a policy registered by a plug-in joins it when the
    schema is refreshed.
    """
    return STRAGGLERS.union(variant=_variant)


@lru_cache(maxsize=1)
def default_policy() -> StragglerPolicy:
    """``straggler: wait_all`` (and ``wait_all`` at the cloud)."""
    return _variant(WaitAll)()
