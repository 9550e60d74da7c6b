"""Re-clustering policies generalising the dynamic clustering of Wang et al. (DCFL), as pure state machines.

Wang et al., INFOCOM 2021 (DCFL) / IEEE TMC 2023; docs/explanation/algorithms.md §1.5 and §2.5:

* ``never``    — static clusters (CFL);
* ``periodic`` — the parameter server re-clusters every ``T_b = ϱ·K`` global aggregations
  (ϱ = 10); for K = 1 or K = N, ``ϱ = ∞`` (re-clustering cannot change anything);
* ``adaptive`` — a leader flags a straggler (``s_k = 1``) when its round time exceeds
  ``γ × the running median`` of its cluster's previous round times (γ = 1.5 [D]); the flag rides
  on that round's upload, and the server re-clusters when the number of flagged clusters reaches
  ``K̃`` (default 1; the paper writes "= K̃", we use ≥), or, generalised, a share of the groups;
* ``on_event`` — (beyond the paper) re-group once the world has changed since the last grouping:
  a slowdown started or ended, a link changed, a device left or came back
  (:class:`WorldSnapshot` compares two moments).

A policy is told about two things, in virtual-time order: a leader closing a round
(:meth:`ReclusterPolicy.round_closed` → the flag it piggy-backs) and the server applying a cluster
update (:meth:`ReclusterPolicy.aggregation_applied` → whether to re-cluster now). After a
re-clustering the protocol calls :meth:`ReclusterPolicy.reset` (new clusters, new histories).
The configs that select a policy by name (``recluster: {name: adaptive}``) are plug-ins in
:mod:`hierfl.policies.recluster`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

__all__ = ["ReclusterPolicy", "NeverPolicy", "PeriodicPolicy", "AdaptivePolicy", "EventPolicy", "WorldSnapshot",
           "WORLD_CHANGES", "share_threshold", "moved_devices", "match_labels"]

WORLD_CHANGES = ("slowdown", "link", "churn")
"""The kinds of world change an ``on_event`` policy can watch."""


def share_threshold(share: float, groups: int) -> int:
    """Flagged groups that make a share ``share`` of ``groups``: ``max(⌈share·K⌉, 1)``."""
    if not 0.0 < share <= 1.0 or groups < 1:
        raise ValueError(f"need 0 < share <= 1 and at least one group, got share {share} and {groups} groups")
    return max(math.ceil(share * groups - 1e-9), 1)


def moved_devices(before: np.ndarray, after: np.ndarray) -> dict[int, tuple[int, int]]:
    """``{device: (old group, new group)}`` of every device whose group changed, in device order."""
    old = np.asarray(before, dtype=np.int64)
    new = np.asarray(after, dtype=np.int64)
    if old.shape != new.shape:
        raise ValueError(f"assignments of different sizes: {old.shape} and {new.shape}")
    return {int(d): (int(old[d]), int(new[d])) for d in np.flatnonzero(old != new)}


def match_labels(current: np.ndarray, new: np.ndarray, groups: int) -> np.ndarray:
    """``new`` with its group ids renumbered to keep as many devices as possible where ``current`` has them.

    For a grouping whose ids are arbitrary (k-means numbers its groups by speed rank): after a slowdown
    the slow group may become the slowest and every rank shift by one, which would move almost every
    device to another edge server for nothing. The renumbering is the permutation of ``0..groups-1``
    that maximises the devices whose id stays (a linear assignment on the overlap counts; ties: the
    lower ids first, as ``linear_sum_assignment`` breaks them).
    """
    from scipy.optimize import linear_sum_assignment  # noqa: PLC0415  (scipy only where it is needed)

    old = np.asarray(current, dtype=np.int64)
    lab = np.asarray(new, dtype=np.int64)
    if old.shape != lab.shape:
        raise ValueError(f"assignments of different sizes: {old.shape} and {lab.shape}")
    if lab.size and (lab.min() < 0 or lab.max() >= groups or old.min() < 0 or old.max() >= groups):
        raise ValueError(f"group ids must lie in 0..{groups - 1}")
    overlap = np.zeros((groups, groups), dtype=np.int64)   # [new id, old id] → devices
    np.add.at(overlap, (lab, old), 1)
    rows, cols = linear_sum_assignment(-overlap)
    rename = np.empty(groups, dtype=np.int64)
    rename[rows] = cols
    return rename[lab]


@dataclass(frozen=True)
class WorldSnapshot:
    """What an ``on_event`` policy compares: per device, the compute seconds of one job now (slowdowns),
    the seconds of one upload now (link changes) and whether it is online (churn)."""

    compute_s: np.ndarray
    upload_s: np.ndarray
    online: np.ndarray

    def changes(self, later: WorldSnapshot) -> set[str]:
        """The kinds of change (:data:`WORLD_CHANGES`) between this snapshot and ``later``."""
        out: set[str] = set()
        if not np.array_equal(self.compute_s, later.compute_s):
            out.add("slowdown")
        if not np.array_equal(self.upload_s, later.upload_s):
            out.add("link")
        if not np.array_equal(self.online, later.online):
            out.add("churn")
        return out


class ReclusterPolicy:
    """Decides when the server re-clusters; state only, no I/O."""

    reason = "never"
    static = False          # never fires: a protocol need not report to it
    watches_world = False   # reads the world's changes at decision points (a snapshot per point)

    def round_closed(self, cluster: int, round_s: float) -> bool:
        """Leader side: cluster ``cluster`` closed a round that lasted ``round_s``; returns its flag ``s_k``."""
        return False

    def aggregation_applied(self, cluster: int, flag: bool) -> bool:
        """Server side: an update of ``cluster`` carrying ``flag`` was applied; True = re-cluster now."""
        return False

    def world_changed(self, changes: set[str]) -> bool:
        """At a decision point: the world changed in these ways since the last grouping; True = re-group now."""
        return False

    def reset(self) -> None:
        """New clusters were built: forget counters, flags and round histories."""

    def state(self) -> dict[str, object]:
        """What the trigger saw (recorded with a re-clustering)."""
        return {}


class NeverPolicy(ReclusterPolicy):
    """Static clusters."""

    static = True


class PeriodicPolicy(ReclusterPolicy):
    """Every ``period`` global aggregations (None: never)."""

    reason = "periodic"

    def __init__(self, period: int | None) -> None:
        self.period = period
        self.count = 0

    def aggregation_applied(self, cluster: int, flag: bool) -> bool:
        """Count the aggregation; fire on the ``period``-th since the last construction."""
        self.count += 1
        return self.period is not None and self.count >= self.period

    def reset(self) -> None:
        """Restart the count."""
        self.count = 0

    def state(self) -> dict[str, object]:
        """Aggregations since the last construction and the period."""
        return {"aggregations": self.count, "period": self.period}


class AdaptivePolicy(ReclusterPolicy):
    """Straggler flags against each cluster's running median round time; fire at ``k_tilde`` flags."""

    reason = "adaptive"

    def __init__(self, gamma: float, k_tilde: int) -> None:
        self.gamma = float(gamma)
        self.k_tilde = int(k_tilde)
        self.history: dict[int, list[float]] = {}
        self.flags: set[int] = set()

    def round_closed(self, cluster: int, round_s: float) -> bool:
        """Flag when ``round_s > γ · median(previous round times)``; the first round only sets the baseline."""
        past = self.history.setdefault(cluster, [])
        flag = bool(past) and round_s > self.gamma * statistics.median(past)
        past.append(float(round_s))
        return flag

    def aggregation_applied(self, cluster: int, flag: bool) -> bool:
        """Record the piggy-backed flag; fire when ``Σ s_k ≥ K̃``."""
        if flag:
            self.flags.add(cluster)
        return len(self.flags) >= self.k_tilde

    def reset(self) -> None:
        """New clusters: no flags, no history."""
        self.history.clear()
        self.flags.clear()

    def state(self) -> dict[str, object]:
        """Flagged clusters and γ, K̃."""
        return {"flagged": sorted(self.flags), "gamma": self.gamma, "k_tilde": self.k_tilde}


class EventPolicy(ReclusterPolicy):
    """Re-group at the first decision point after a watched kind of world change (beyond the paper)."""

    reason = "on_event"
    watches_world = True

    def __init__(self, watch: tuple[str, ...]) -> None:
        unknown = sorted(set(watch) - set(WORLD_CHANGES))
        if unknown:
            raise ValueError(f"unknown world changes {unknown}; allowed: {list(WORLD_CHANGES)}")
        self.watch = tuple(watch)
        self.seen: list[str] = []

    def world_changed(self, changes: set[str]) -> bool:
        """Fire when one of the watched kinds changed."""
        self.seen = sorted(changes & set(self.watch))
        return bool(self.seen)

    def reset(self) -> None:
        """New groups: nothing seen since."""
        self.seen = []

    def state(self) -> dict[str, object]:
        """The changes that fired it."""
        return {"changes": list(self.seen)}
