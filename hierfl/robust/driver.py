"""The driver's side of Byzantine robustness: who is Byzantine when, which update came from whom,
and the reports of the aggregating roles turned into records, trace marks and ``summary.json``'s
``robustness`` block.

The roles do the math (:class:`~hierfl.runtime.roles.Aggregation`); the driver only knows handles.
Each training job's result handle is remembered with its device and, for a Byzantine device, a tag
``(source, behaviour, ALIE z)`` that travels with the update to the aggregator. Nothing here
changes timing: a behaviour only changes what is sent.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hierfl.core.dynamics import Dynamics
from hierfl.core.work import TrainSpec
from hierfl.env.records import RobustAggregate
from hierfl.robust.config import RobustSetup

__all__ = ["robust_setup", "RobustLedger"]


def robust_setup(scenario: Any, dyn: Dynamics | None, cloud: Any = None, edge: Any = None) -> RobustSetup | None:
    """The roles' robust configuration, or None when the run is exactly today's (mean, nobody Byzantine).

    ``cloud`` / ``edge``: a rule another section puts in place of that tier's (differential privacy's noised
    mean); the roles then see the run's seed and the protocol's expected counts (``RuleContext``)."""
    section = scenario.aggregation
    if section.default and cloud is None and edge is None and not (dyn is not None and dyn.attacks):
        return None
    world = scenario.devices.count, scenario.topology.edge_servers or 0
    return RobustSetup.of(section, cloud, scenario.seed, scenario.protocol.expected_inputs(*world), edge)


class RobustLedger:
    """Tags of in-flight updates, and the totals of the run's robust aggregations."""

    def __init__(self, setup: RobustSetup, dyn: Dynamics, telemetry: Any, protocol: Any) -> None:
        self.setup = setup
        # only protocols that aggregate sets of updates hand them back (``protocol``: its config's
        # hooks), one-at-a-time ones only to a screen: elsewhere no handle is kept, so none is held
        # for the whole run
        style = protocol.aggregation_style
        self.tracks = bool(protocol.rule_tiers) and (style != "updates" or type(setup.cloud).asynchronous)
        self.queues = style == "queue"
        self.dyn = dyn
        self.telemetry = telemetry
        self._handles: dict[int, tuple[Any, int, Any]] = {}  # id(handle) → (handle, source id, tag)
        self._sources: dict[tuple[str, int], list[int]] = {}  # (tier, entity) → source ids in add order
        self.byzantine_devices: set[int] = set()
        self.behaviors: dict[str, int] = {}  # behaviour → Byzantine jobs
        self.totals: dict[str, dict[str, Any]] = {}
        self._dists: dict[str, list[float]] = {}

    # -- jobs and updates ----------------------------------------------------------------------------
    def job_spec(self, device: int, now: float, spec: TrainSpec) -> tuple[TrainSpec, Any]:
        """The spec ``device``'s job runs with now (a host-side behaviour rides on it) and its behaviour."""
        behavior = self.dyn.behavior_at(device, now) if self.dyn.attacks else None
        if behavior is None or not spec.train:
            return spec, None
        self.byzantine_devices.add(device)
        self.behaviors[behavior.name] = self.behaviors.get(behavior.name, 0) + 1
        if type(behavior).colluding:  # ALIE: trained honestly, formed at the aggregator
            return spec, behavior
        return replace(spec, attack=behavior), behavior

    def remember(self, handle: Any, source: int, behavior: Any, kind: str = "device") -> None:
        """``handle`` is ``source``'s update (Byzantine when ``behavior`` is set)."""
        if not self.tracks:
            return
        tag = None
        if behavior is not None:
            tag = (kind, behavior.name, float(behavior.z) if type(behavior).colluding else None)
        self._handles[id(handle)] = (handle, source, tag)

    def take(self, handle: Any, tier: str, entity: int) -> Any:
        """The tag of ``handle``'s update as it is added at ``tier``/``entity`` (None: honest or unknown)."""
        known = self._handles.pop(id(handle), None)
        if known is None or known[0] is not handle:
            self._sources.setdefault((tier, entity), []).append(-1)
            return None
        self._sources.setdefault((tier, entity), []).append(known[1])
        return known[2]

    def drop_sources(self, tier: str, entity: int) -> None:
        """Forget the sources noted for an aggregation that makes no report (a queue under the mean)."""
        self._sources.pop((tier, entity), None)

    def compromised_edge(self, edge: int) -> Any:
        """The behaviour of a compromised edge server, or None."""
        return self.setup.edge_behaviors.get(edge)

    def forget_job(self, handle: Any) -> None:
        """A result that will never be aggregated (kept small: only results still in flight are held)."""
        self._handles.pop(id(handle), None)

    # -- reports -------------------------------------------------------------------------------------
    def reports(self, tier: str, reports: list[dict[str, Any]], now: float) -> None:
        """Turn the roles' reports into records, trace marks and totals."""
        if not self.tracks:  # senders unknown (e.g. models mixed along a ring): no per-aggregation record
            return
        for rep in reports:
            sources = self._sources.pop((tier, rep["entity"]), [])
            rejected = [sources[i] if i < len(sources) else -1 for i in rep["rejected_ids"]]
            rec = RobustAggregate(tier, rep["entity"], rep["rule"], rep["m"], rep["accepted"], rep["rejected"],
                                  rep["rejected_nonfinite"], rep["clipped"], rep["honest"], rep["malicious"],
                                  rep["malicious_accepted"], rep["honest_rejected"], rep["dist_honest_mean"], rejected)
            self.telemetry.record(rec)
            lane = ("cloud", 0) if tier == "cloud" else ("edge", rep["entity"])
            if rejected:
                self.telemetry.instant(lane, "rejected", now, rule=rep["rule"], ids=rejected)
            tot = self.totals.setdefault(tier, {"rule": rep["rule"], "aggregations": 0, "updates": 0, "accepted": 0,
                                                "rejected": 0, "rejected_nonfinite": 0, "clipped": 0, "honest": 0,
                                                "malicious": 0, "malicious_accepted": 0, "honest_rejected": 0})
            tot["aggregations"] += 1
            tot["updates"] += rep["m"]
            for key in ("accepted", "rejected", "rejected_nonfinite", "clipped", "honest", "malicious",
                        "malicious_accepted", "honest_rejected"):
                tot[key] += rep[key]
            if rep["dist_honest_mean"] is not None:
                self._dists.setdefault(tier, []).append(float(rep["dist_honest_mean"]))

    def summary_part(self) -> dict[str, Any]:
        """``summary.json``'s part: the ``robustness`` block."""
        return {"robustness": self.summary()}

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``robustness`` block."""
        tiers: dict[str, Any] = {}
        for tier, tot in sorted(self.totals.items()):
            d = self._dists.get(tier, [])
            tiers[tier] = {**tot, "dist_honest_mean_mean": sum(d) / len(d) if d else None,
                           "dist_honest_mean_last": d[-1] if d else None}
        return {
            "rules": {"cloud": self.setup.cloud.name, "edge": self.setup.edge.name},
            "byzantine_devices": sorted(self.byzantine_devices),
            "byzantine_jobs": dict(sorted(self.behaviors.items())),
            "compromised_edges": sorted(self.setup.edge_behaviors),
            "tiers": tiers,
        }

