"""Server jobs: a server's own computation (a server task) in virtual time.

A protocol starts one through its aggregation point, ``env.tier(tier, entity).run(...)``. The task
computes at once, in the cloud role (:meth:`~hierfl.runtime.executor.Servers.run_task`), and says
how much work it was (``flops``); the emulated server then spends ``flops / FLOP/s`` on it
(``servers:``), after every task it was given before (first in, first out, one at a time per
server). Its span is drawn on the server's trace lane and ``on_<done>`` fires at its end with a
:class:`~hierfl.env.events.ServerJobDone`. So a message that depends on the result leaves when
the job ends, as the conventions for server work require (a server-side fine-tuning, a hypernetwork's
hypernetworks, layer-wise matching).

Why the computation runs at submission rather than at the job's end: its result depends only on
its inputs, its parameters and its seed, so the order of real computation cannot change a bit;
running it at once lets the driver know the job's length, which the task alone can count.

A server that fails (``edge_fail`` / ``cloud_fail``) while a job is queued does not lose it: the
job's effect is defined by the protocol that reads its result (design default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hierfl.env.api import Endpoint
from hierfl.env.events import ServerJobDone

if TYPE_CHECKING:
    from hierfl.kernel.engine import Event

__all__ = ["ServerJobs"]

_TIER_IDS = {"cloud": 0, "edge": 1, "device": 2}
_SEED_BOUND = 2 ** 62


class ServerJobs:
    """Every server's job queue of one run.

    Parameters
    ----------
    servers
        The scenario's ``servers:`` section (each tier's FLOP/s).
    executor
        Runs the tasks in its cloud role.
    telemetry
        Counters (``server_jobs``, ``server_job_s``, ``server_flops``) and the trace.
    clock
        The run's context: ``now``, named random streams and ``at``.
    """

    def __init__(self, servers: Any, executor: Any, telemetry: Any, clock: Any) -> None:
        self._servers = servers
        self._executor = executor
        self._telemetry = telemetry
        self._clock = clock
        self._free: dict[Endpoint, float] = {}      # when each server's queue runs dry
        self._started: dict[Endpoint, int] = {}     # tasks given to each server (its seed stream's index)
        self._busy: dict[Endpoint, float] = {}      # virtual seconds each server computed
        self._kept: dict[Endpoint, int] = {}        # bytes each server point keeps across its tasks

    def run(self, tier: str, entity: int, lane: Endpoint, task: str, inputs: list[Any], done: str,
            payload: Any = None, params: dict[str, Any] | None = None) -> Event:
        """Start the server task ``task`` at ``(tier, entity)`` (traced on ``lane``); its pending
        ``on_<done>`` event."""
        key: Endpoint = (tier, int(entity))
        k = self._started.get(key, 0)
        self._started[key] = k + 1
        seed = int(self._clock.rng("server_job", _TIER_IDS[tier], int(entity), k).integers(_SEED_BOUND))
        outputs, flops, stats, kept = self._executor.servers.run_task(task, dict(params or {}), seed, tier,
                                                                      int(entity), list(inputs))
        duration = flops / self._servers.flops_per_s(tier)
        now = float(self._clock.now)
        start = max(now, self._free.get(key, now))
        end = start + duration
        self._free[key] = end
        self._busy[key] = self._busy.get(key, 0.0) + duration
        self._kept[key] = kept
        self._telemetry.count("server_jobs")
        self._telemetry.count("server_job_s", duration)
        self._telemetry.count("server_flops", flops)
        self._telemetry.span(lane, f"server_job:{task}", start, duration, flops=flops, queued_s=start - now,
                             **stats)
        return self._clock.at(end, done, ServerJobDone(task, tuple(outputs), dict(stats), start, end, payload))

    def summary_part(self) -> dict[str, Any] | None:
        """``summary.json``'s ``server_jobs`` block (None when no server ran a task): tasks started, virtual
        seconds busy and bytes kept, per tier."""
        if not self._started:
            return None
        tiers = sorted({t for t, _ in self._started})
        return {"server_jobs": {
            "tasks": {t: sum(n for (u, _), n in self._started.items() if u == t) for t in tiers},
            "busy_s": {t: sum(s for (u, _), s in self._busy.items() if u == t) for t in tiers},
            "state_bytes": {t: sum(b for (u, _), b in self._kept.items() if u == t) for t in tiers},
        }}
