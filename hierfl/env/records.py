"""Typed metric records: what a protocol or the driver reports, one class per ``metrics.jsonl`` event.

A record is a small frozen value; :mod:`hierfl.output` is the only place that turns it into a
line (``{"t": …, "wall_s": …, "event": EVENT, <fields in order>}``). Callers never assemble
those dicts by hand (STYLE.md 15). Optional fields left at ``None`` are omitted from the line
when the class lists them in ``OPTIONAL``; ``extra`` fields (a mapping) are appended as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

__all__ = ["OPEN_FIELDS", "Record", "RunStart", "RunEnd", "Eval", "EdgeAggregate", "CloudAggregate", "RoundClose", "RoundEmpty",
           "UpdateDropped", "NonFiniteUpdate", "RobustAggregate", "DeviceLostRecord", "LinkChange", "Recluster",
           "LeaderLost", "ClustersRecord", "ServerFail", "ServerRecover", "FaultLoss", "Reattach", "Recovered", "Regroup"]

# the field of a record whose mapping is spread into the line (a record with one is open)
OPEN_FIELDS = frozenset({"extra"})


@dataclass(frozen=True)
class Record:
    """Base of every metric record: ``EVENT`` names the line's ``event`` field."""

    EVENT: ClassVar[str] = ""
    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def items(self) -> list[tuple[str, Any]]:
        """The line's fields after ``t``, ``wall_s`` and ``event``, in declaration order."""
        out: list[tuple[str, Any]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in OPEN_FIELDS:  # its items are fields of the line
                out.extend(value.items())
            elif not (f.name in self.OPTIONAL and value is None):
                out.append((f.name, value))
        return out


@dataclass(frozen=True)
class RunStart(Record):
    """The run begins (after start-up)."""

    EVENT: ClassVar[str] = "run_start"
    startup_s: float
    executor: str
    workers: int
    devices: int
    num_params: int


@dataclass(frozen=True)
class RunEnd(Record):
    """The run ends."""

    EVENT: ClassVar[str] = "run_end"
    stop_reason: str | None


@dataclass(frozen=True)
class Recovered(Record):
    """A Ray actor or node was lost; the run went back to its last checkpoint on fresh roles.

    The line's ``t`` is the checkpoint's virtual time: the run recomputes from there, and every
    other line that follows is the one an unfaulted run writes (wall-clock fields aside).
    ``lost_t``: the virtual time the loss was noticed at; ``attempt``: the recoveries so far.
    """

    EVENT: ClassVar[str] = "recovered"
    error: str
    lost_t: float
    attempt: int
    workers: int


@dataclass(frozen=True)
class Eval(Record):
    """An evaluation of the global model, with every counter, staleness means and queue lengths."""

    EVENT: ClassVar[str] = "eval"
    round: int
    accuracy: float | None
    loss: float | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EdgeAggregate(Record):
    """A synchronous edge aggregation (``participants``: how many); asynchronous ones carry ``extra``."""

    EVENT: ClassVar[str] = "edge_aggregate"
    edge: int
    participants: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CloudAggregate(Record):
    """A cloud aggregation: ``round`` = cloud aggregations so far, ``tier`` = where the updates came from."""

    EVENT: ClassVar[str] = "cloud_aggregate"
    round: int
    tier: str
    participants: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundClose(Record):
    """A synchronous barrier closed under its straggler policy."""

    EVENT: ClassVar[str] = "round_close"
    server: str
    id: int
    round: int
    policy: str
    selected: int
    arrived: int
    dropped: int
    lost: int
    wasted_compute_s: float
    round_s: float
    dropped_ids: list[int]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundEmpty(Record):
    """A round closed with no update (``extra``: which round, cluster, …)."""

    EVENT: ClassVar[str] = "round_empty"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UpdateDropped(Record):
    """An update staler than allowed was discarded."""

    EVENT: ClassVar[str] = "update_dropped"
    tier: str
    at: int
    source: int
    staleness: int


@dataclass(frozen=True)
class NonFiniteUpdate(Record):
    """A device's update held NaN or Inf and was left out of its aggregation (``robustness.on_nonfinite: drop``)."""

    EVENT: ClassVar[str] = "nonfinite_update"
    device: int
    job: int
    tier: str        # where it was to be aggregated: edge, cloud (or a protocol's own mixing: model)
    action: str = "dropped"


@dataclass(frozen=True)
class RobustAggregate(Record):
    """One aggregation under a Byzantine-robust rule (``aggregation:``) or with Byzantine senders.

    ``accepted`` / ``rejected``: updates the rule used or left out (``rejected_nonfinite`` of them
    for NaN/inf values); ``honest`` / ``malicious``: senders; ``dist_honest_mean``: ‖aggregate −
    weighted mean of the honest updates‖ (None without an honest update); ``rejected_ids``: the
    devices (edge servers at a cloud fed by edges) whose updates were left out.
    """

    EVENT: ClassVar[str] = "robust_aggregate"
    tier: str
    entity: int
    rule: str
    m: int
    accepted: int
    rejected: int
    rejected_nonfinite: int
    clipped: int
    honest: int
    malicious: int
    malicious_accepted: int
    honest_rejected: int
    dist_honest_mean: float | None
    rejected_ids: list[int]


@dataclass(frozen=True)
class DeviceLostRecord(Record):
    """A device dropped out during ``stage``."""

    EVENT: ClassVar[str] = "device_lost"
    device: int
    stage: str
    reason: str


@dataclass(frozen=True)
class LinkChange(Record):
    """Link events changed these ``[entity, field]`` pairs."""

    EVENT: ClassVar[str] = "link_change"
    links: list[list[str]]


@dataclass(frozen=True)
class Recluster(Record):
    """A protocol rebuilt the clusters it forms itself."""

    EVENT: ClassVar[str] = "recluster"
    reason: str
    generation: int
    K: int
    total_cost: float
    version: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LeaderLost(Record):
    """A device that leads a cluster dropped out."""

    EVENT: ClassVar[str] = "leader_lost"
    cluster: int
    leader: int
    stage: str | None
    reason: str | None
    online: bool
    generation: int
    wasted_compute_s: float


@dataclass(frozen=True)
class ServerFail(Record):
    """An edge server (``server: edge``) or the cloud failed for ``for_s`` seconds (``edge_fail`` / ``cloud_fail``);
    ``transfers_lost``: transfers to or from it that were in flight."""

    EVENT: ClassVar[str] = "server_fail"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("on_edge_fail",)
    server: str
    id: int
    for_s: float
    transfers_lost: int
    on_edge_fail: str | None = None


@dataclass(frozen=True)
class ServerRecover(Record):
    """A failed server is back after ``down_s`` seconds."""

    EVENT: ClassVar[str] = "server_recover"
    server: str
    id: int
    down_s: float


@dataclass(frozen=True)
class FaultLoss(Record):
    """The work a protocol lost to a failed server: updates queued at it or on their way (to it or from it),
    and the compute of jobs withdrawn because of it (``extra``: protocol details)."""

    EVENT: ClassVar[str] = "fault_loss"
    server: str
    id: int
    updates_lost: int
    wasted_compute_s: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reattach(Record):
    """``devices`` move from edge server ``from_edge`` to ``to_edge`` (``reason``: edge_fail, or edge_back
    when their own server is back)."""

    EVENT: ClassVar[str] = "reattach"
    devices: list[int]
    from_edge: int
    to_edge: int
    reason: str


@dataclass(frozen=True)
class Regroup(Record):
    """A re-clustering policy re-formed the groups of a hierarchical protocol (``recluster:``): which devices
    moved (``moved[i]`` from group ``from_group[i]`` to ``to_group[i]``: edge servers, or
    a protocol's own groups such as tiers by speed), and the bytes their migration transfers
    cost; ``extra``: what the trigger saw."""

    EVENT: ClassVar[str] = "regroup"
    reason: str
    generation: int
    grouping: str
    moved: list[int]
    from_group: list[int]
    to_group: list[int]
    migration_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClustersRecord:
    """One ``clusters.jsonl`` line: membership and leaders at a time.

    ``head`` fields come after ``grouping``, ``mid`` fields between ``members`` and ``leaders``
    and ``tail`` fields after ``leaders`` (a protocol's own details: its generation, K and
    costs, rings and unit times, …).
    """

    t: float
    reason: str
    grouping: str
    members: list[list[int]]
    leaders: list[Any]
    head: dict[str, Any] = field(default_factory=dict)
    tail: dict[str, Any] = field(default_factory=dict)
    mid: dict[str, Any] = field(default_factory=dict)

    def line(self) -> dict[str, Any]:
        """The JSON object of the line."""
        return {"t": self.t, "reason": self.reason, "grouping": self.grouping, **self.head, "members": self.members,
                **self.mid, "leaders": self.leaders, **self.tail}
