"""Protocol plug-in base: a protocol reacts to virtual-time events and calls pure math.

Like Ray Tune's schedulers, a protocol is a plain object with ``on_<event>`` callbacks that
tests drive without Ray. It never blocks on the real clock: it asks the context to start
work (which the executor runs in parallel) and schedules the event that consumes the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.core.engine import Event, Priority
from hierfl.registry import Registry

if TYPE_CHECKING:  # the runtime depends on protocols, never the reverse
    from hierfl.config.schema import Scenario
    from hierfl.core.work import TrainSpec
    from hierfl.emulator import Context, Job

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
    def send_model(self, device: int, link: str, payload: dict[str, Any]) -> None:
        """Download the current model to ``device`` over ``link``; ``train_start`` fires on arrival."""
        d = self.ctx.world.download_s(device)
        self.ctx.transfer(link, ("device", device), "download", d)
        self.ctx.schedule(d, "train_start", {"device": device, **payload}, Priority.START)

    def start_job(self, event: Event, model: Any, spec: TrainSpec | None = None, control: Any = None) -> None:
        """Submit the device's job now; ``train_done`` fires when its virtual compute time is over."""
        job = self.ctx.start_training(event.payload["device"], model, spec, control)
        self.jobs[job.device] = job
        self.ctx.schedule(job.compute_s, "train_done", event.payload, Priority.ARRIVAL)

    def collect_and_upload(self, event: Event, link: str) -> None:
        """Collect the finished job and upload its result; ``upload_done`` fires on arrival."""
        device = event.payload["device"]
        self.ctx.finish_training(self.jobs[device])
        u = self.ctx.world.upload_s(device)
        self.ctx.transfer(link, ("device", device), "upload", u)
        self.ctx.schedule(u, "upload_done", event.payload, Priority.ARRIVAL)

    def clusters_record(self) -> dict[str, Any] | None:
        """The initial ``clusters.jsonl`` record, when the protocol groups devices itself (None: the topology's)."""
        return None

    def start(self) -> None:
        """Schedule the first events at virtual time 0."""
        raise NotImplementedError

    def handle(self, event: Event) -> None:
        """Dispatch ``event`` to ``on_<kind>``."""
        handler = getattr(self, "on_" + event.kind, None)
        if handler is None:
            raise RuntimeError(f"{type(self).__name__} has no handler for event {event.kind!r}")
        handler(event)

    def state(self) -> dict[str, Any]:
        """Serialisable protocol state (model handles excluded)."""
        return {}
