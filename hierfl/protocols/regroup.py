"""Re-grouping as a policy of the grouping (``protocol.recluster:``), shared by the grouping protocols.

A :class:`Regrouping` is composed into a protocol whose devices are grouped: under edge servers
or into groups of its own (tiers by speed, capacity classes). The protocol
tells it what happens — a group's round closed after ``round_s`` (:meth:`Regrouping.round_closed`),
a group's model was applied at the cloud (:meth:`Regrouping.applied`) — and asks it, at each of its
decision points, whether to re-group (:meth:`Regrouping.due`). The policy
(:mod:`hierfl.core.recluster`) decides when; the config's grouping plug-in, or the protocol's own
grouping, forms the new groups from the world as it is now (:meth:`Regrouping.plan`); and
:meth:`Regrouping.migrate` accounts the move: a ``regroup`` metric line, a ``clusters.jsonl`` record,
a ``regroup`` trace instant, ``devices.csv`` rewritten (edge servers), the ``devices_migrated``
counter and, per moved device that is online, one model transfer from its new server (``migrate``,
counted in the tier's byte counters and in ``bytes_migration``). The protocol then moves its own
state.

The triggers generalise the dynamic clustering of Wang et al. ("Accelerating Federated
Learning with Cluster Construction and Hierarchical Aggregation", IEEE TMC 2023, §2.5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hierfl.core.recluster import WorldSnapshot, moved_devices
from hierfl.env import ClustersRecord, Endpoint, Env, Regroup
from hierfl.kernel.engine import Priority
from hierfl.protocols.base import DeviceMsg

if TYPE_CHECKING:
    from hierfl.policies.recluster import ReclusterConfig

__all__ = ["Regrouping", "Migrate", "OWN_GROUPING", "world_snapshot"]

OWN_GROUPING = "kmeans"
"""The grouping an edge-server protocol re-groups with when ``recluster.grouping`` is null [D]: k-means on
each device's compute and upload time now, the grouping that sees a slowdown (the topology's own
assignment is fixed, so it could never move anyone)."""


def world_snapshot(env: Env) -> WorldSnapshot:
    """The world now, as an ``on_event`` policy compares it: per device, one job's compute seconds, one
    upload's seconds and whether it is online (O(N): taken only for a policy that watches the world)."""
    live, n = env.live, env.world.num_devices
    return WorldSnapshot(np.asarray(live.current_compute_s(), dtype=np.float64),
                         np.asarray(live.current_upload_s(), dtype=np.float64),
                         np.array([live.is_up(d) for d in range(n)], dtype=bool))


@dataclass(frozen=True)
class Migrate(DeviceMsg):
    """The new group's model on its way to a device that moved to it (its migration transfer)."""

    group: int        # its new group: an edge server, or the protocol's own group (a tier, a capacity class, …)
    from_group: int


class Regrouping:
    """When and how a protocol's edge groups are re-formed, and the accounting of the moves."""

    def __init__(self, cfg: ReclusterConfig, env: Env, groups: list[int], fallback: str = OWN_GROUPING,
                 own: Callable[[], np.ndarray] | None = None, server: Endpoint | None = None,
                 label: str = "edge") -> None:
        self.cfg = cfg
        self.env = env
        self.groups = list(groups)   # the edge servers (or a protocol's own group ids) that hold a group
        self.fallback = fallback
        # a protocol with groups of its own (tiers, capacity classes) forms them itself: ``own``
        # gives the new group of every device, ``server`` the one endpoint a moved device's model comes from
        # (None: its new edge server); a bound method and a tuple, so a checkpoint can pickle them
        self.own = own
        self.server = server
        self.label = label
        self.policy = cfg.make(len(self.groups), env.world.num_devices)
        self.generation = 0
        self.pending = False          # a trigger fired; the re-grouping happens at the next decision point
        self.flags: dict[int, bool] = {}  # group → flagged a round since its last model reached the cloud
        self.active = not self.policy.static
        if self.active:  # a run that may re-group carries the migration totals from the start
            env.telemetry.count("devices_migrated", 0)
            env.telemetry.count("bytes_migration", 0)
        # only a policy that watches the world pays for snapshots (O(N), one per decision point)
        self.snapshot = self._snapshot() if self.policy.watches_world else None

    def _snapshot(self) -> WorldSnapshot:
        return world_snapshot(self.env)

    # -- what the protocol reports ------------------------------------------------------------------
    def round_closed(self, group: int, round_s: float) -> None:
        """Group ``group``'s round closed after ``round_s``; its straggler flag rides on its next upload."""
        if self.policy.round_closed(group, round_s):
            self.flags[group] = True

    def applied(self, group: int) -> None:
        """Group ``group``'s model was applied at the cloud (with the flag it carried)."""
        if self.policy.aggregation_applied(group, self.flags.pop(group, False)):
            self.pending = True

    def due(self) -> bool:
        """At a decision point: whether to re-group now (a fired trigger, or a watched world change)."""
        if not self.active:
            return False
        if self.pending:
            return True
        if self.snapshot is None:
            return False
        return self.policy.world_changed(self.snapshot.changes(self._snapshot()))

    # -- the re-grouping ----------------------------------------------------------------------------
    def plan(self, current: np.ndarray) -> np.ndarray:
        """Each device's new edge server (``current``: each one's now), from the world now. A label outside
        ``groups`` (an edge server that had no members at start takes no part) maps onto the groups in order."""
        env = self.env
        if self.own is not None and self.cfg.grouping is None:
            return np.asarray(self.own(), dtype=np.int64)
        n = env.world.num_devices
        factors = np.array([env.live.compute_factor(d) for d in range(n)], dtype=np.float64)
        # the initial grouping's own stream: re-grouping an unchanged world gives the groups it started with, so
        # nobody moves without a cause (a fresh seed would let k-means land on another optimum)
        labels = self.cfg.regroup(env.world, factors, env.rng("topology.grouping"), self.fallback, current)
        edges = np.asarray(self.groups, dtype=np.int64)
        # a grouping labels 0..E-1; a protocol whose groups are a subset of the edges maps label i → i-th group
        new = np.where(np.isin(labels, edges), labels, edges[np.minimum(labels, edges.size - 1)])
        return new.astype(np.int64)

    def migrate(self, current: np.ndarray, new: np.ndarray) -> dict[int, tuple[int, int]]:
        """Account the move from ``current`` to ``new`` (metric line, clusters record, trace, counters, one
        model transfer per moved online device); returns ``{device: (from, to)}``. The protocol moves its state.

        A re-grouping that moves nobody only leaves a trace instant: the trigger starts afresh, the groups and
        their generation stay (no line in ``metrics.jsonl`` or ``clusters.jsonl``)."""
        env, tel = self.env, self.env.telemetry
        moves = moved_devices(current, new)
        trigger = dict(self.policy.state())
        self.pending = False
        self.flags.clear()
        self.policy.reset()
        if self.snapshot is not None:
            self.snapshot = self._snapshot()
        if not moves:
            tel.instant(("cloud", 0), "regroup", env.now, reason=self.policy.reason, generation=self.generation,
                        moved=[], **trigger)
            return moves
        self.generation += 1
        sent = 0
        if self.cfg.migration.transfer:
            for d, (src, dst) in moves.items():
                if env.live.is_up(d):  # an offline device moves without a transfer: it gets a model when selected
                    env.send(self.server or ("edge", dst), ("device", d), "migrate_done", Migrate(d, dst, src),
                             "migrate", Priority.START)
                    sent += 1
        size = int(env.world.model_bytes) * sent
        if self.cfg.migration.device_state == "reset":
            env.controls.reset(sorted(moves))
        if self.server is None:  # devices moved between edge servers: what is taken over an edge follows them
            env.controls.regroup(np.asarray(new, dtype=np.int64))
        tel.count("devices_migrated", len(moves))
        tel.count("bytes_migration", size)
        grouping = self.cfg.grouping or self.fallback
        tel.instant(("cloud", 0), "regroup", env.now, reason=self.policy.reason, generation=self.generation,
                    moved=sorted(moves), **trigger)
        tel.record(Regroup(self.policy.reason, self.generation, grouping, sorted(moves),
                           [moves[d][0] for d in sorted(moves)], [moves[d][1] for d in sorted(moves)], size,
                           trigger))
        if self.server is None:  # devices.csv: each device's edge server is its new one
            tel.devices(np.asarray(new, dtype=np.int64))
        tel.clusters(ClustersRecord(env.now, self.policy.reason, grouping,
                                    [[int(d) for d in np.flatnonzero(new == e)] for e in self.groups],
                                    [f"{self.label} {e}" for e in self.groups], head={"generation": self.generation}))
        return moves
