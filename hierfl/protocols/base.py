"""Protocol plug-in base: a protocol reacts to virtual-time events and calls pure math.

Like Ray Tune's schedulers, a protocol is a plain object with ``on_<event>`` callbacks that
tests drive without Ray. It never blocks on the real clock: it asks the context to start
work (which the executor runs in parallel) and schedules the event that consumes the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.core.engine import Event, Priority

if TYPE_CHECKING:  # the runtime depends on protocols, never the reverse
    from hierfl.core.work import TrainSpec
    from hierfl.emulator import Context, Job
    from hierfl.scenario.schema import Scenario

__all__ = ["PROTOCOLS", "ProtocolConfig", "Protocol"]

PROTOCOLS: Registry = Registry("protocol")


class ProtocolConfig(ConfigModel):
    """Base of every protocol's config model.

    Class attributes say which learning plug-ins the protocol honours (checked at load time, so
    a setting a protocol would ignore is an error): ``server_optimizer_tiers`` — the tiers whose
    aggregation goes through ``server_optimizer`` (``cloud``, ``edge``); ``control_variates`` —
    whether it carries SCAFFOLD's control variates.
    """

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ()
    control_variates: ClassVar[bool] = False

    # whether the protocol copes with devices dropping out (availability, leave events, dropout)
    supports_churn: ClassVar[bool] = True
    # whether it has synchronous barriers a `straggler:` policy applies to
    has_barriers: ClassVar[bool] = False
    has_cloud_barrier: ClassVar[bool] = False  # a cloud round over edge servers that `straggler.cloud` applies to

    def check(self, scenario: Scenario) -> list[Problem]:
        """Cross-section problems (e.g. a hierarchical protocol without edge servers)."""
        return []

    def create(self, ctx: Context) -> Protocol:
        """Build the protocol object for one run."""
        raise NotImplementedError


class Protocol:
    """A federated-learning protocol driven by events."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.jobs: dict[int, Job] = {}

    # -- the device job lifecycle shared by protocols: download → train → upload ------------------
    def _server(self, device: int, link: str, payload: dict[str, Any]) -> tuple[str, int]:
        if link == "device_cloud":
            return ("cloud", 0)
        return ("edge", int(payload.get("edge", self.ctx.world.edge_of[device])))

    def send_model(self, device: int, link: str, payload: dict[str, Any]) -> None:
        """Download the current model to ``device`` over ``link``; ``train_start`` fires on arrival."""
        self.ctx.send(self._server(device, link, payload), ("device", device), "train_start",
                      {"device": device, **payload}, "download", Priority.START)

    def start_job(self, event: Event, model: Any, spec: TrainSpec | None = None, control: Any = None) -> Event:
        """Submit the device's job now; ``train_done`` fires when its virtual compute time is over
        (or the internal ``_job_lost`` when the device drops out first). Returns that pending event."""
        ctx = self.ctx
        device = event.payload["device"]
        job = ctx.start_training(device, model, spec, control)
        self.jobs[job.device] = job
        if job.lost_at is not None:
            return ctx.track(device, ctx.queue.push(job.lost_at, "_job_lost",
                                                    {"device": device, "reason": job.lost_reason,
                                                     "payload": event.payload}, Priority.ARRIVAL))
        return ctx.track(device, ctx.schedule(job.compute_s, "train_done", event.payload, Priority.ARRIVAL))

    def collect_and_upload(self, event: Event, link: str) -> None:
        """Collect the finished job and upload its result; ``upload_done`` fires on arrival."""
        device = event.payload["device"]
        self.ctx.finish_training(self.jobs[device])
        self.ctx.send(("device", device), self._server(device, link, event.payload), "upload_done",
                      event.payload, "upload")

    def wasted_work(self, device: int) -> float:
        """Compute seconds of ``device``'s current job that will never be used, if it is abandoned now."""
        job = self.jobs.get(device)
        if job is None:
            return 0.0
        return max(min(self.ctx.now - job.start, job.compute_s), 0.0)

    def abandon(self, device: int) -> float:
        """Withdraw everything ``device`` has in flight (a straggler cut by a policy); returns the
        wasted compute seconds, which are also counted."""
        wasted = self.wasted_work(device)
        self.jobs.pop(device, None)
        self.ctx.cancel_device(device)
        self.ctx.counters["wasted_compute_s"] += wasted
        return wasted

    def on_device_lost(self, event: Event) -> None:
        """A device dropped out (offline, dropout); override to react. Its work is already accounted."""

    def clusters_record(self) -> dict[str, Any] | None:
        """The initial ``clusters.jsonl`` record, when the protocol groups devices itself (None: the topology's)."""
        return None

    def start(self) -> None:
        """Schedule the first events at virtual time 0."""
        raise NotImplementedError

    def handle(self, event: Event) -> None:
        """Dispatch ``event`` to ``on_<kind>``."""
        if event.kind == "device_lost":
            device = event.payload["device"]
            self.ctx.counters["wasted_compute_s"] += self.wasted_work(device)
            self.jobs.pop(device, None)
        handler = getattr(self, "on_" + event.kind, None)
        if handler is None:
            raise RuntimeError(f"{type(self).__name__} has no handler for event {event.kind!r}")
        handler(event)

    def state(self) -> dict[str, Any]:
        """Serialisable protocol state (model handles excluded)."""
        return {}
