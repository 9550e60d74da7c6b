"""Protocol plug-in base: a protocol reacts to virtual-time events and calls pure math.

Like Ray Tune's schedulers, a protocol is a plain object with ``on_<event>`` callbacks that
tests drive without Ray. It is written against the narrow :class:`~hierfl.env.api.Env` only: it
asks the environment to start work (which the executor runs in parallel) and to send models,
and it hears back through events with typed payloads. Events the driver raises on its own
(:data:`~hierfl.env.events.DRIVER_EVENTS`) have harmless default handlers here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from hierfl.config.base import ConfigModel
from hierfl.config.errors import Problem
from hierfl.config.registry import Registry
from hierfl.kernel.engine import Event, Priority
from hierfl.env.api import Env, Job
from hierfl.env.events import Payload
from hierfl.env.records import ClustersRecord
from hierfl.policies.straggler import AggregationPoint
if TYPE_CHECKING:  # the scenario schema sits above the protocols; only its type is named here
    from hierfl.core.work import TrainSpec
    from hierfl.scenario.schema import Scenario
__all__ = ["PROTOCOLS", "ProtocolConfig", "Protocol", "DeviceMsg", "AggregationPoint"]

PROTOCOLS: Registry = Registry("protocol")


@dataclass(frozen=True)
class DeviceMsg(Payload):
    """A message to or from one device (protocols subclass it with their round, edge, … fields)."""

    device: int


def _coded(env: Env, server: tuple[str, int], device: int, model: Any, inbound: bool) -> Any:
    """``model`` through the transfer channel between ``server`` and ``device`` (``Aggregator.coded``); the
    model itself where the aggregation point has no channels (a test's fake)."""
    coded = getattr(env.tier(server[0], server[1]), "coded", None)
    return model if coded is None else coded(("device", device), model, inbound)


class ProtocolConfig(ConfigModel):
    """Base of every protocol's config model.

    Class attributes say which learning plug-ins the protocol honours (checked at load time, so
    a setting a protocol would ignore is an error): ``server_optimizer_tiers`` — the tiers whose
    aggregation goes through ``server_optimizer`` (``cloud``, ``edge``); ``control_variates`` —
    whether it carries control variates (a server control and one per device, for the drift-correcting
    job methods).
    """

    server_optimizer_tiers: ClassVar[tuple[str, ...]] = ()
    control_variates: ClassVar[bool] = False

    # keys of the training section its own jobs never read (a protocol whose jobs train with their own optimiser
    # at protocol.lr): set to anything but their default they would do nothing, so they are refused
    unread_training: ClassVar[tuple[str, ...]] = ()
    # serverless: whether it is only that method when devices mix over the device graph's edges, so a graph
    # with none (`device_graph: empty`) is refused (a protocol whose learning-alone baseline takes it does not)
    needs_graph_edges: ClassVar[bool] = False
    # whether it runs with no server at all (peers on a device graph): no cloud aggregations, so rounds stay
    # 0 and only stop.virtual_time_s ends the run; the cloud only observes (evaluations)
    serverless: ClassVar[bool] = False
    # whether the protocol copes with devices dropping out (availability, leave events, dropout)
    supports_churn: ClassVar[bool] = True
    # where it aggregates, one point per key of `straggler:` at most: the scenario checks place a
    # straggler policy only where a point is synchronous and the policy means something there
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = ()
    # whether it handles edge servers and the cloud failing (`edge_fail` / `cloud_fail` events)
    supports_infra_faults: ClassVar[bool] = False
    # why its decisions (selections, clusters) depend on the trained models' values, if they do:
    # timing only (`training.trainer: none`) could then not reproduce a training run's times
    decides_on_models: ClassVar[str | None] = None
    # the tiers where it aggregates a set of updates together, which an `aggregation.<tier>` rule can
    # replace (the edge tier: edge servers, cluster leaders)
    rule_tiers: ClassVar[tuple[str, ...]] = ()
    # how those aggregations take their inputs: "round" (a synchronous round adds updates, then
    # commits), "queue" (a buffer or queue of deltas of different ages steps the model), "updates"
    # (one update at a time: only an asynchronous screen applies), "models" (it averages models it
    # gathered itself)
    aggregation_style: ClassVar[str] = "round"
    # what the devices exchange: "weights" (models are averaged, so every device needs one parameter
    # layout: `models:` may only repeat `model`'s layout) or "outputs" (class scores on shared data:
    # any architectures with a common label space)
    exchanges: ClassVar[str] = "weights"
    # whether it uses the public split (`data.public`); a public split no protocol uses is refused
    uses_public_data: ClassVar[bool] = False
    # whether it builds training jobs of its own shape (epochs, units, per-cluster steps) instead of running the
    # run's training spec (`training:`); features that shape every job (privacy.dp_sgd) refuse such a protocol
    own_train_specs: ClassVar[bool] = False
    # whether it reads the devices' class histograms (`World.label_counts`, built only then)
    needs_label_counts: ClassVar[bool] = False
    # the link directions whose model messages it hands to their receivers as decoded by a transfer channel
    # (`channels:`; hierfl.channels.DIRECTIONS): a channel anywhere else is refused at load. The base class's
    # download → train → upload helpers (send_model, start_job, collect_and_upload) do it for the device tier;
    # a protocol that moves models otherwise calls `env.tier(…).coded` itself before it declares a direction
    channel_links: ClassVar[tuple[str, ...]] = ()
    # the tiers whose aggregation points can run a sub-protocol before they aggregate (`subprotocol:`,
    # hierfl.subprotocol): the protocol calls `env.tier(...).prepare` and commits over the survivors. none by default
    subprotocol_tiers: ClassVar[tuple[str, ...]] = ()
    # why its aggregator reads each update on its own (a sub-protocol that hands it only their sum, secure
    # aggregation, is refused), or None: it only ever needs their (weighted) sum
    reads_each_update: ClassVar[str | None] = None
    # how its cloud aggregations pick their inputs, for a privacy accountant (`privacy.dp`): "fixed_size" — each
    # synchronous round a uniform sample of expected_inputs()["cloud"] devices without replacement from all N while
    # every device is online; "buffered" — each server step combines the next expected_inputs()["cloud"] updates
    # that arrive (participation follows availability and speed); "each_upload" — each update is applied alone
    # as it arrives (only a device's own releases can be accounted); None: not declared (privacy.dp is refused)
    cohort_sampling: ClassVar[str | None] = None
    # how its edge aggregations pick their inputs, for a privacy accountant at the edge tier (`privacy.dp.tier:
    # edge`): "members" — each synchronous edge round aggregates updates of that edge's own devices only, so a
    # device takes part in its own edge's rounds and no other; None: not declared (privacy at the edge is refused)
    edge_cohort_sampling: ClassVar[str | None] = None
    # what of a model (`model`, each of `models`) this protocol's own loops on the torch module (distillation,
    # output exchange, server training) cannot honour, feature → why: "dropout" (masks from torch's global
    # generator) and "running_stats" (batch norm's running statistics). Checked at build time
    # (hierfl.assemble.loops); empty: its jobs use the plain local loop, which honours both
    module_loops: ClassVar[Mapping[str, str]] = {}

    def module_loop_limits(self, scenario: Scenario) -> Mapping[str, str]:
        """The :attr:`module_loops` of this configuration in ``scenario``."""
        return type(self).module_loops

    def sampling_scheme(self) -> str | None:
        """How this configuration's cloud aggregations pick their inputs (the declaration above, or what a
        setting of the protocol makes it: "poisson" where each device joins a round on its own coin)."""
        return type(self).cohort_sampling

    def edge_expected(self, members: int) -> int | None:
        """How many updates one round of an edge server with ``members`` devices combines when every selected
        device arrives (None: not declared); an edge's own fixed denominator under ``privacy.dp.tier: edge``."""
        return None

    def sampling_rate(self) -> float | None:
        """With ``sampling_scheme() == "poisson"``: the probability ``q`` with which each device joins a round on its
        own coin (its expected cohort is ``q·N``, the fixed denominator of a differentially private mean); None
        otherwise."""
        return None

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """How many updates one aggregation of each tier combines when every selected participant
        arrives (None: unknown); robust rules check their parameters against it at load time."""
        return {"cloud": None, "edge": None}

    def check(self, scenario: Scenario) -> list[Problem]:
        """Cross-section problems (e.g. a hierarchical protocol without edge servers)."""
        return []

    def model_problems(self, layout: Callable[[], list[tuple[str, tuple[int, ...]]]]) -> list[Problem]:
        """Problems with ``model``'s parameter layout, known once the dataset's shape is (at build time;
        ``layout()`` builds it on demand, so a protocol that asks nothing costs nothing)."""
        return []

    def create(self, env: Env) -> Protocol:
        """Build the protocol object for one run."""
        raise NotImplementedError


class Protocol:
    """A federated-learning protocol driven by events."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.jobs: dict[int, Job] = {}
        self.downloads: dict[int, tuple[str, int]] = {}  # device → the server whose model it is downloading

    # -- the device job lifecycle shared by protocols: download → train → upload ------------------
    def server_of(self, device: int, link: str, payload: Any) -> tuple[str, int]:
        """The server end of ``device``'s ``link`` (``device_cloud`` or ``device_edge``)."""
        if link == "device_cloud":
            return ("cloud", 0)
        edge = getattr(payload, "edge", None)
        return ("edge", int(self.env.world.edge_of[device] if edge is None else edge))

    def send_model(self, device: int, link: str, payload: DeviceMsg) -> None:
        """Download the current model to ``device`` over ``link``; ``train_start`` fires on arrival."""
        server = self.server_of(device, link, payload)
        if getattr(self.env, "channels", None) is not None:  # (a run with transfer channels: see start_job)
            self.downloads[device] = server  # its job starts from the model as the channel delivers it
        self.env.send(server, ("device", device), "train_start", payload, "download", Priority.START)

    def start_job(self, event: Event, model: Any, spec: TrainSpec | None = None, control: Any = None) -> Event:
        """Submit the device's job now; ``train_done`` fires when its virtual compute time is over
        (or ``device_lost`` when the device drops out first). Returns that pending event.

        After :meth:`send_model`, ``model`` is the one downloaded: the device trains from it as the link's
        transfer channel delivered it (``Aggregator.coded``; the same handle without a channel)."""
        device = event.payload.device
        # (filled only in runs with transfer channels: an empty dict is not searched)
        server = self.downloads.pop(device, None) if self.downloads else None
        if server is not None:
            model = _coded(self.env, server, device, model, False)
        job, pending = self.env.start_job(device, model, event.payload, spec, control)
        self.jobs[job.device] = job
        return pending

    def collect_and_upload(self, event: Event, link: str) -> None:
        """Collect the finished job and upload its result; ``upload_done`` fires on arrival."""
        device = event.payload.device
        job = self.jobs[device]
        self.env.finish_training(job)
        server = self.server_of(device, link, event.payload)
        if getattr(self.env, "channels", None) is not None:
            # the server receives the update as the link's transfer channel delivers it
            job.params = _coded(self.env, server, device, job.params, True)
        self.env.send(("device", device), server, "upload_done", event.payload, "upload")

    def wasted_work(self, device: int) -> float:
        """Compute seconds of ``device``'s current job that will never be used, if it is abandoned now."""
        job = self.jobs.get(device)
        if job is None:
            return 0.0
        return max(min(self.env.now - job.start, job.compute_s), 0.0)

    def abandon(self, device: int) -> float:
        """Withdraw everything ``device`` has in flight (a straggler cut by a policy); returns the
        wasted compute seconds, which are also counted."""
        wasted = self.wasted_work(device)
        self.jobs.pop(device, None)
        self.env.cancel_device(device)
        self.env.telemetry.count("wasted_compute_s", wasted)
        return wasted

    # -- events ----------------------------------------------------------------------------------
    def on_device_lost(self, event: Event) -> None:
        """A device dropped out (offline, dropout); override to react. Its work is already accounted."""

    def on_migrate_done(self, event: Event) -> None:
        """A re-grouped device has its new edge server's model (:mod:`hierfl.protocols.regroup`); the transfer
        is its cost, already counted. A protocol whose devices wait for it overrides this."""

    # a protocol that declares `supports_infra_faults` overrides these four; no other protocol gets them
    # (the scenario checks refuse edge_fail / cloud_fail events for it)
    def on_edge_down(self, event: Event) -> None:
        """An edge server failed (:class:`~hierfl.env.events.ServerDown`); its in-flight transfers are gone."""

    def on_edge_up(self, event: Event) -> None:
        """A failed edge server is back (:class:`~hierfl.env.events.ServerUp`)."""

    def on_cloud_down(self, event: Event) -> None:
        """The cloud became unreachable (:class:`~hierfl.env.events.ServerDown`)."""

    def on_cloud_up(self, event: Event) -> None:
        """The cloud is reachable again (:class:`~hierfl.env.events.ServerUp`)."""

    def clusters_record(self) -> ClustersRecord | None:
        """The initial ``clusters.jsonl`` record, when the protocol groups devices itself (None: the topology's)."""
        return None

    def device_models(self) -> dict[int, Any] | None:
        """Per-device evaluation: a device's own model handle where it is not the global model (one model
        per cluster, say); None: every device is tested with the global model."""
        return None

    def observe(self) -> dict[str, Any]:
        """Called just before each evaluation: a protocol without a server puts the model the observer
        tests in place of the cloud's (``env.set_global``), at no cost in virtual time, and returns extra
        fields of the evaluation line (none by default)."""
        return {}

    def party_models(self) -> dict[int, Any] | None:
        """Output-exchange protocols (no global model): each device's own model handle, whose test accuracies
        are averaged in the evaluation lines (empty: none to evaluate yet); None: the global model is evaluated."""
        return None

    def queue_lengths(self) -> dict[str, int]:
        """Updates waiting per tier (in every evaluation line); none by default."""
        return {}

    def start(self) -> None:
        """Schedule the first events at virtual time 0."""
        raise NotImplementedError

    def handle(self, event: Event) -> None:
        """Dispatch ``event`` to ``on_<kind>``; a kind the protocol scheduled itself must have a handler."""
        kind = event.kind
        if kind == "device_lost":
            device = event.payload.device
            self.env.telemetry.count("wasted_compute_s", self.wasted_work(device))
            self.jobs.pop(device, None)
        try:  # each kind's handler is looked up once per run (a protocol's class never changes)
            handler = self._on[kind]
        except (AttributeError, KeyError):
            handler = getattr(type(self), "on_" + kind, None)
            if handler is None:
                raise RuntimeError(f"{type(self).__name__} has no handler for event {kind!r}") from None
            self.__dict__.setdefault("_on", {})[kind] = handler
        handler(self, event)
