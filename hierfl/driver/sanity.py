"""Warnings about settings that are valid but almost surely not meant (reliability).

A straggler deadline of 1e-9 s passed validation and gave 87,000 empty rounds. Hard floors
(``evaluation.every_s`` and a deadline's ``seconds`` are at least :data:`MIN_INTERVAL_S`) reject
the absurd at load time; the rest depends on the built world — a deadline no device can ever
meet, an evaluation interval that gives hundreds of thousands of evaluations — and is reported
here as warnings before the run starts, with the numbers that make it a problem.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_warnings", "run_problems", "MAX_EVALUATIONS"]

MAX_EVALUATIONS = 100_000
"""More planned evaluations than this (``stop.virtual_time_s / evaluation.every_s``) are warned about."""


def _fastest_round_trip(built: Any, partial: bool) -> float:
    """The fastest device's download + local job + upload (without contention), in seconds."""
    world = built.world
    best = float("inf")
    for d in range(world.num_devices):
        t = world.download_s(d) + world.upload_s(d) + (0.0 if partial else world.compute_s(d, built.spec))
        best = min(best, t)
    return best


def run_warnings(scenario: Any, built: Any) -> list[str]:
    """Warnings for ``scenario`` as built (empty when nothing looks wrong), after the load-time ones
    (settings declared to warn when they would be ignored, :func:`hierfl.scenario.checks.scenario_warnings`)."""
    from hierfl.scenario.checks import scenario_warnings

    out: list[str] = scenario_warnings(scenario)
    budget = scenario.stop.virtual_time_s
    every = scenario.evaluation.every_s
    if budget is not None and every is not None and budget / every > MAX_EVALUATIONS:
        out.append(f"evaluation.every_s = {every:g} s gives {budget / every:,.0f} evaluations of the global model "
                   f"over stop.virtual_time_s = {budget:g} s; each one runs the whole test set (raise every_s)")
    if budget is not None:
        fastest = _fastest_round_trip(built, partial=False)
        if fastest > budget:  # e.g. latency_ms: 1e308 "completed" with 0 rounds
            out.append(f"the fastest device's download + local training + upload takes {fastest:.4g} s, longer than "
                       f"stop.virtual_time_s = {budget:g} s: no update can reach the server before the run ends")
    policies = [("straggler", scenario.straggler), ("straggler.cloud", getattr(scenario.straggler, "cloud", None))]
    for key, policy in policies:
        deadline = getattr(policy, "deadline_s", None) if policy is not None else None
        if deadline is None:
            continue
        partial = bool(getattr(policy, "partial_work", False))
        fastest = _fastest_round_trip(built, partial)
        if deadline < fastest:
            what = "download + upload" if partial else "download + local training + upload"
            out.append(f"{key}.seconds = {deadline:g} s is shorter than the fastest device's {what} "
                       f"({fastest:.4g} s): no update can arrive in time, so every round will be empty")
    return out


def run_problems(scenario: Any, built: Any) -> list[tuple[str, str]]:
    """``(key path, message)`` for settings under which the run could never end: a deadline no device can
    meet, with no ``stop.virtual_time_s`` (empty rounds are not cloud aggregations, so ``stop.rounds``
    is never reached) and no link event that could make a device faster."""
    if scenario.stop.virtual_time_s is not None or (built.dynamics is not None and built.dynamics.links):
        return []
    out: list[tuple[str, str]] = []
    for key, policy in (("straggler.seconds", scenario.straggler),
                        ("straggler.cloud.seconds", getattr(scenario.straggler, "cloud", None))):
        deadline = getattr(policy, "deadline_s", None) if policy is not None else None
        if deadline is None:
            continue
        fastest = _fastest_round_trip(built, bool(getattr(policy, "partial_work", False)))
        if deadline < fastest:
            out.append((key, f"{deadline:g} s is shorter than the fastest device's round trip ({fastest:.4g} s): every "
                             "round would be empty and, without stop.virtual_time_s, the run would never end"))
    return out
