"""What PFNM and FedMA share: matched averaging of an MLP's neurons at the servers of a hierarchy.

PFNM (Yurochkin et al., ICML 2019, arXiv 1905.12022) and FedMA (Wang et al., ICLR 2020, arXiv
2002.06440); docs/explanation/algorithms.md, "PFNM and FedMA". The matching is server work (a server
job charged by its operation count on the server's tier); the models are hierfl's ``mlp`` in a
fixed-capacity layout whose active width grows (:mod:`hierfl.methods.matched.trainer`).

Where it runs [D]: every layer sub-round needs all members, so the matching belongs inside a
synchronous group. Flat (no edge servers): the cloud matches the devices. With edge servers: each edge
server matches its members, and the cloud matches the edges' models with PFNM's one-shot primitive
(each edge one client; its class counts are its members' sum), once per cloud round; the next round
starts from the cloud's model on every device. With one edge server the cloud takes its model as is.

Setup: every device draws its own initialisation (the authors' codes initialise each client apart;
``init: shared`` gives every device the same draw), cut to ``local_width`` active neurons. It is drawn
on the device at no cost in virtual time (in the emulator, one zero-cost server job forms the draws).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from hierfl.config.errors import Problem
from hierfl.core.mlp_layout import mlp_size
from hierfl.env import Env, Payload
from hierfl.kernel.engine import Event
from hierfl.protocols.base import AggregationPoint, DeviceMsg, Protocol, ProtocolConfig

__all__ = ["MatchMsg", "MatchedConfig", "MatchedProtocol", "PointMsg"]

_SEED_BOUND = 2 ** 62
Point = tuple[str, int]


@dataclass(frozen=True)
class MatchMsg(DeviceMsg):
    """A device's step in round ``round``: ``layer`` is the layer it uploads next (-1: the whole model)."""

    round: int
    layer: int = -1


@dataclass(frozen=True)
class PointMsg(Payload):
    """A server job or transfer of the matching point ``(tier, entity)`` in round ``round``."""

    tier: str
    entity: int
    round: int
    layer: int = -1


class MatchedConfig(ProtocolConfig):
    """Knobs PFNM and FedMA share (design defaults and the authors' code values, tagged in each description)."""

    supports_churn: ClassVar[bool] = False
    needs_label_counts: ClassVar[bool] = True
    decides_on_models: ClassVar[str | None] = None
    aggregation_points: ClassVar[tuple[AggregationPoint, ...]] = (
        AggregationPoint("straggler", "device→server (matching)", synchronous=True, takes_policy=False,
                         note="the matching needs every member's layer: each sub-round waits for all of them"),)

    gamma: PositiveFloat = Field(default=7.0, description="mass γ of the Indian-buffet prior: larger opens more new "
                                                          "global neurons (FedMA code BBP_MAP: 7)")
    sigma2: PositiveFloat = Field(default=1.0, description="σ², the variance of a client's neuron around its global "
                                                           "neuron (FedMA code: 1)")
    sigma0_2: PositiveFloat = Field(default=1.0, description="σ₀², the prior variance of a global neuron (FedMA "
                                                             "code: 1)")
    iters: int = Field(default=5, ge=0, description="sweeps of re-matching each client after the first pass (FedMA "
                                                    "code: 5)")
    local_width: list[PositiveInt] | None = Field(
        default=None, description="active hidden neurons of each device's own network, per hidden layer, at most "
                                  "model.hidden (the capacity the matched global network may grow to); null = "
                                  "model.hidden (design default)")
    init: Literal["per_device", "shared"] = Field(
        default="per_device", description="per_device: each device draws its own initialisation, as the authors' "
                                          "codes do; shared: every device starts from the same draw")
    later_rounds: Literal["global", "submodel"] = Field(
        default="global", description="what a device starts a later round from: global (the whole global network at "
                                      "its matched width, FedMA's fedma_comm) or submodel (the global weights its "
                                      "own neurons were matched to, in its own order and width; whether FedMA's "
                                      "later rounds should do this is unverified)")
    cloud: Literal["match"] = Field(
        default="match", description="with edge servers, what the cloud does with the edges' models: match (PFNM's "
                                     "one-shot matching, each edge one client; design default)")

    def check(self, scenario: Any) -> list[Problem]:
        """An ``mlp`` model for every device, the plain trainer, widths within the model's."""
        problems: list[Problem] = []
        model = scenario.model
        if getattr(model, "name", None) != "mlp":
            problems.append(Problem("model.name", f"{self.name} matches the neurons of an MLP; allowed: mlp",
                                    getattr(model, "name", None)))
        elif self.local_width is not None:
            hidden = list(model.hidden)
            if len(self.local_width) != len(hidden) or any(w > h for w, h in zip(self.local_width, hidden)):
                problems.append(Problem("protocol.local_width", f"one width per hidden layer of model.hidden "
                                        f"{hidden}, each at most that layer's size", list(self.local_width)))
        if scenario.models:
            problems.append(Problem("models", f"{self.name} matches one architecture across devices; per-device "
                                    "models are not supported (widths differ through protocol.local_width)"))
        trainer = scenario.training.trainer.name
        if trainer != "sgd":
            problems.append(Problem("training.trainer", f"{self.name} trains with the plain local trainer; "
                                    "allowed: sgd", trainer))
        return problems

    def expected_inputs(self, devices: int, edges: int) -> dict[str, int | None]:
        """The cloud matches every device (flat) or every edge's model."""
        return {"cloud": edges if edges else devices, "edge": None}


class MatchedProtocol(Protocol):
    """Points, setup, the cloud's matching of edge models and the round's end; subclasses run the points'
    rounds (:meth:`_point_round`, :meth:`_point_done` with the point's model)."""

    def __init__(self, cfg: MatchedConfig, env: Env) -> None:
        super().__init__(env)
        self.cfg = cfg
        world = env.world
        self.n = world.num_devices
        if world.num_edges:
            self.points: dict[Point, list[int]] = {("edge", e): [int(d) for d in world.edge_members(e)]
                                                   for e in range(world.num_edges) if len(world.edge_members(e))}
        else:
            self.points = {("cloud", 0): list(range(self.n))}
        counts = world.label_counts
        self.counts = None if counts is None else [list(map(int, row)) for row in counts]
        self.round = 0
        self.model: dict[int, Any] = {}          # each device's current model handle
        self.widths: dict[int, list[int]] = {}   # and its active hidden widths
        self.arrived: dict[Point, dict[int, Any]] = {p: {} for p in self.points}
        self.edge_models: dict[int, tuple[Any, list[int]]] = {}  # an edge's model on its way to the cloud
        self.at_cloud: dict[int, tuple[Any, list[int]]] = {}     # the edges' models the cloud holds
        self.global_widths: list[int] = []
        self.next_model: dict[int, tuple[Any, list[int]]] = {}  # what each device starts its next round from
        self.edge_next: dict[int, tuple[Any, list[int]]] = {}   # and each edge server, on its way down
        self.in_features = 0
        self.hidden: list[int] = []
        self.classes = int(world.num_classes)

    # -- helpers -------------------------------------------------------------------------------------
    def point_of(self, device: int) -> Point:
        """The server that matches ``device``'s network."""
        edge = int(self.env.world.edge_of[device])
        return ("edge", edge) if edge >= 0 else ("cloud", 0)

    def model_bytes(self, widths: list[int]) -> int:
        """Bytes of a network of these active widths (float32; the dead slots are never sent)."""
        return 4 * mlp_size(self.in_features, widths, self.classes)

    def knobs(self) -> dict[str, Any]:
        """The matching's hyper-parameters, as a server job's params."""
        c = self.cfg
        return {"sigma2": c.sigma2, "sigma0_2": c.sigma0_2, "gamma": c.gamma, "iters": c.iters}

    def point_counts(self, devices: list[int]) -> list[list[int]] | None:
        """The class histograms of ``devices`` (sent once, ``4C`` bytes each; not charged: one small message)."""
        return None if self.counts is None else [self.counts[d] for d in devices]

    def cloud_params(self, edges: list[int]) -> dict[str, Any]:
        """Extra params of the cloud's matching of the edge models (none by default)."""
        return {}

    # -- setup -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Every matching point forms its members' initialisations at t = 0 (zero cost)."""
        env = self.env
        shared = int(env.rng("matched.init").integers(_SEED_BOUND))
        for point, members in self.points.items():
            seeds = [shared if self.cfg.init == "shared" else int(env.rng("matched.init", d).integers(_SEED_BOUND))
                     for d in members]
            env.tier(*point).run("matched_init", [env.global_model], "init_done", payload=PointMsg(*point, 0),
                                 params={"seeds": seeds, "widths": self.cfg.local_width})

    def on_init_done(self, event: Event) -> None:
        """Each member has its own network: the round begins on every device of the point."""
        done = event.payload
        msg: PointMsg = done.payload
        stats = done.stats
        self.in_features = int(stats["in_features"])
        self.hidden = [int(stats[f"capacity{k}"]) for k in range(int(stats["layers"]))]
        widths = list(self.cfg.local_width) if self.cfg.local_width is not None else list(self.hidden)
        for d, handle in zip(self.points[(msg.tier, msg.entity)], done.outputs):
            self.model[d] = handle
            self.widths[d] = list(widths)
            self._device_round(d)

    # -- the cloud -------------------------------------------------------------------------------------
    def point_model(self, point: Point, handle: Any, widths: list[int]) -> None:
        """A point finished its round with ``handle`` (active ``widths``): flat, it is the global model;
        an edge sends it to the cloud."""
        env = self.env
        members = self.points[point]
        if point[0] == "cloud":
            self._commit(handle, widths, members, "device")
            return
        env.tier(*point).aggregated(members, {"round": self.round, "width": list(widths)})
        self.edge_models[point[1]] = (handle, widths)
        env.send(point, ("cloud", 0), "edge_model_arrived", PointMsg(*point, self.round), "upload",
                 size=self.model_bytes(widths))

    def on_edge_model_arrived(self, event: Event) -> None:
        """An edge's matched model reached the cloud; with every edge's, the cloud matches them."""
        edge = event.payload.entity
        self.at_cloud[edge] = self.edge_models.pop(edge)
        if len(self.at_cloud) < len(self.points):
            return
        edges = sorted(self.at_cloud)
        if len(edges) == 1:
            handle, widths = self.at_cloud[edges[0]]
            self._commit(handle, widths, edges, "edge")
            return
        counts = None
        if self.counts is not None:
            counts = [[sum(self.counts[d][c] for d in self.points[("edge", e)]) for c in range(self.classes)]
                      for e in edges]
        self.env.tier("cloud").run("pfnm_match", [self.at_cloud[e][0] for e in edges], "cloud_match_done",
                                   payload=PointMsg("cloud", 0, self.round),
                                   params={**self.knobs(), "widths": [self.at_cloud[e][1] for e in edges],
                                           "counts": counts, "clients": edges, **self.cloud_params(edges)})

    def on_cloud_match_done(self, event: Event) -> None:
        """The cloud matched the edges' models: the global model."""
        done = event.payload
        self._commit(done.outputs[0], _widths(done.stats), sorted(e for _, e in self.points), "edge")

    def _commit(self, handle: Any, widths: list[int], participants: list[int], source: str) -> None:
        """One cloud aggregation (it may end the run); then the next round on every device."""
        env = self.env
        cloud = env.tier("cloud")
        cloud.add(handle, 1.0)
        env.set_global(cloud.commit(participants, source=source))
        self.global_widths = list(widths)
        self.at_cloud = {}
        if env.stopping:
            return
        self.round += 1
        self.distribute()

    # -- the next round's models -------------------------------------------------------------------------
    def distribute(self) -> None:
        """Send the next round's models down: the global network (``later_rounds: global``) to every device
        (flat) or through the edge servers; or (``submodel``) the cloud first cuts the global network into its
        clients' matched sub-networks (the devices', or the edges', which cut their members' on arrival)."""
        env = self.env
        self.next_model = {d: (env.global_model, list(self.global_widths)) for d in range(self.n)}
        flat = ("cloud", 0) in self.points
        if self.cfg.later_rounds == "submodel":
            clients = list(range(self.n)) if flat else sorted(e for _, e in self.points)
            env.tier("cloud").run("matched_submodels", [env.global_model], "submodels_done",
                                  payload=PointMsg("cloud", 0, self.round),
                                  params={"clients": clients, "widths": list(self.global_widths)})
            return
        if flat:
            self.send_down(("cloud", 0), range(self.n))
            return
        for point in self.points:
            self.edge_next[point[1]] = (env.global_model, list(self.global_widths))
            env.send(("cloud", 0), point, "edge_global_arrived", PointMsg(*point, self.round), "download",
                     size=self.model_bytes(self.global_widths))

    def send_down(self, src: Point, devices: Any) -> None:
        """Each of ``devices`` downloads its next model (``next_model``) from ``src``."""
        for d in devices:
            self.env.send(src, ("device", d), "global_arrived", MatchMsg(d, self.round), "download",
                          size=self.model_bytes(self.next_model[d][1]))

    def on_edge_global_arrived(self, event: Event) -> None:
        """An edge server has the global network (or its own sub-network of it): it forwards it to its members,
        or (``submodel``) cuts their sub-networks from it first."""
        point = (event.payload.tier, event.payload.entity)
        handle, widths = self.edge_next.pop(point[1])
        if self.cfg.later_rounds == "global":
            self.send_down(point, self.points[point])
            return
        self.env.tier(*point).run("matched_submodels", [handle], "submodels_done", payload=PointMsg(*point, self.round),
                                  params={"clients": self.points[point], "widths": widths})

    def on_submodels_done(self, event: Event) -> None:
        """Sub-networks are cut: the devices download theirs, or each edge server its own."""
        done = event.payload
        msg: PointMsg = done.payload
        point = (msg.tier, msg.entity)
        to_devices = point[0] == "edge" or ("cloud", 0) in self.points
        targets = self.points[point] if to_devices else sorted(e for _, e in self.points)
        for i, (target, handle) in enumerate(zip(targets, done.outputs)):
            widths = _indexed_widths(done.stats, i)
            if to_devices:
                self.next_model[target] = (handle, widths)
            else:
                self.edge_next[target] = (handle, widths)
                self.env.send(("cloud", 0), ("edge", target), "edge_global_arrived",
                              PointMsg("edge", target, self.round), "download", size=self.model_bytes(widths))
        if to_devices:
            self.send_down(point, targets)

    def on_global_arrived(self, event: Event) -> None:
        """A device has its next model: its next round starts from it."""
        d = event.payload.device
        self.model[d], widths = self.next_model.pop(d)
        self.widths[d] = list(widths)
        self._device_round(d)

    def _device_round(self, device: int) -> None:
        raise NotImplementedError


def _widths(stats: dict[str, float]) -> list[int]:
    """The hidden widths a matching job reports (``width0``, ``width1``, …)."""
    out = []
    k = 0
    while f"width{k}" in stats:
        out.append(int(stats[f"width{k}"]))
        k += 1
    return out


def _indexed_widths(stats: dict[str, float], i: int) -> list[int]:
    """Client ``i``'s widths a ``matched_submodels`` job reports (``width0.i``, ``width1.i``, …)."""
    out: list[int] = []
    while f"width{len(out)}.{i}" in stats:
        out.append(int(stats[f"width{len(out)}.{i}"]))
    return out
