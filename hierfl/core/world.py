"""The emulated physical world: device profiles, links and the device → edge assignment.

Plain numpy data drawn once from the scenario (see :mod:`hierfl.assemble`), plus the duration
formulas of :mod:`hierfl.core.work` applied to it. Pure: no RNG, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hierfl.core.graphs import DeviceGraph
from hierfl.core.public import PublicData
from hierfl.core.work import TrainSpec, compute_time_s, job_samples, transfer_time_s, work_samples

__all__ = ["World", "EdgeLink", "D2DLink"]


@dataclass(frozen=True)
class EdgeLink:
    """The link between one edge server and the cloud."""

    uplink_mbps: float
    downlink_mbps: float
    latency_ms: float


@dataclass(frozen=True)
class D2DLink:
    """Device ↔ device link rule from a topology: latency from distance, optional bandwidth cap.

    For devices ``i → j``: latency ``latency_ms + ms_per_km · |xy_i − xy_j|`` (the distance term
    needs ``World.device_xy``), bandwidth ``min(uplink_i, downlink_j, bandwidth_mbps)``.
    """

    latency_ms: float = 0.0
    ms_per_km: float = 0.0
    bandwidth_mbps: float = float("inf")


@dataclass
class World:
    """Everything that decides how long things take."""

    samples: np.ndarray          # (N,) int64: training samples per device
    speed_sps: np.ndarray        # (N,) float64
    uplink_mbps: np.ndarray      # (N,)
    downlink_mbps: np.ndarray    # (N,)
    latency_ms: np.ndarray       # (N,) access-link latency
    edge_of: np.ndarray          # (N,) int64 edge id, -1 when devices talk to the cloud directly
    edge_latency_ms: np.ndarray  # (N, E) extra latency per (device, edge) pair; (N, 0) when flat
    edge_links: list[EdgeLink]   # (E,)
    model_bytes: int
    # -- filled by the heterogeneity layer (tiers, topology files); defaults = the plain model --
    tier: np.ndarray | None = None              # (N,) str: device tier name ("custom" when drawn)
    edge_names: list[str] | None = None         # (E,) display names of edge servers
    edge_ingress_mbps: np.ndarray | None = None  # (E,) capacity shared by device → edge uploads (inf)
    edge_egress_mbps: np.ndarray | None = None   # (E,) capacity shared by edge → device downloads (inf)
    cloud_ingress_mbps: float = float("inf")     # shared by every upload that reaches the cloud
    cloud_egress_mbps: float = float("inf")      # shared by every download that leaves the cloud
    device_xy: np.ndarray | None = None          # (N, 2) km, when the topology places devices
    edge_xy: np.ndarray | None = None            # (E, 2) km
    d2d_link: D2DLink | None = None              # device ↔ device rule from the topology (None: §1.2 fallback)
    device_graph: DeviceGraph | None = None      # who talks to whom in serverless protocols (topology.device_graph)
    # -- output-exchange methods (data.public, models:) --
    public: PublicData | None = None             # the public split, where it is and what shipping it costs
    num_classes: int = 0                         # the label space every model shares (class-score messages)
    # -- class histograms at the aggregator (for protocols that declare needs_label_counts) --
    label_counts: np.ndarray | None = None       # (N, C) int64: each device's training samples per class
    sample_bytes: int = 0                        # one training sample shipped: float32 features + a 4-byte label
    # -- domain-heterogeneous data (data.dataset: digits_domains) --
    device_domain: np.ndarray | None = None      # (N,) int64: each device's source domain
    test_domains: tuple[tuple[int, int], ...] | None = None  # each domain's [start, stop) rows of the test set

    def __post_init__(self) -> None:
        n, e = self.num_devices, self.num_edges
        if self.tier is None:
            self.tier = np.array(["custom"] * n, dtype=object)
        if self.edge_names is None:
            self.edge_names = [f"edge{k}" for k in range(e)]
        if self.edge_ingress_mbps is None:
            self.edge_ingress_mbps = np.full(e, np.inf)
        if self.edge_egress_mbps is None:
            self.edge_egress_mbps = np.full(e, np.inf)

    @property
    def num_devices(self) -> int:
        """N."""
        return int(self.samples.shape[0])

    @property
    def num_edges(self) -> int:
        """E (0 when flat)."""
        return len(self.edge_links)

    def edge_members(self, edge: int) -> np.ndarray:
        """Sorted device ids assigned to ``edge``."""
        return np.flatnonzero(self.edge_of == edge).astype(np.int64)

    def edge_samples(self, edge: int) -> int:
        """``n_ℓ``: training samples of all devices of ``edge``."""
        return int(self.samples[self.edge_of == edge].sum())

    def link_latency_ms(self, device: int) -> float:
        """One-way latency between a device and its server (edge, or the cloud when flat)."""
        extra = 0.0
        edge = int(self.edge_of[device])
        if edge >= 0:
            extra = float(self.edge_latency_ms[device, edge])
        return float(self.latency_ms[device]) + extra

    def compute_s(self, device: int, spec: TrainSpec) -> float:
        """Local training time of one job on ``device``."""
        # ndarray.item: the same Python number as int()/float() of the element, without a numpy scalar
        return compute_time_s(work_samples(job_samples(int(self.samples.item(device)), device, spec), spec),
                              float(self.speed_sps.item(device)))

    def download_s(self, device: int) -> float:
        """Model transfer server → device."""
        return transfer_time_s(self.model_bytes, float(self.downlink_mbps[device]), self.link_latency_ms(device))

    def upload_s(self, device: int) -> float:
        """Model transfer device → server."""
        return transfer_time_s(self.model_bytes, float(self.uplink_mbps[device]), self.link_latency_ms(device))

    def d2d_latency_ms(self, src: int, dst: int) -> float:
        """One-way latency of a device ``src`` → device ``dst`` hop.

        With a topology's device ↔ device rule (``d2d_link``): ``latency_ms + ms_per_km · distance``
        (the distance term needs ``device_xy``). Otherwise docs/explanation/algorithms.md §1.2's fallback: both
        access links are crossed, ``latency_src + latency_dst``. A ``device_graph`` link with its own
        latency takes that instead.
        """
        own = self.device_graph.link(src, dst) if self.device_graph is not None else None
        if own is not None and not math.isnan(own[1]):
            return own[1]  # the graph sets this link's latency
        rule = self.d2d_link
        if rule is None:
            return float(self.latency_ms[src]) + float(self.latency_ms[dst])
        km = 0.0
        if self.device_xy is not None and rule.ms_per_km:
            km = float(np.hypot(*(self.device_xy[src] - self.device_xy[dst])))
        return rule.latency_ms + rule.ms_per_km * km

    def d2d_bandwidth_mbps(self, src: int, dst: int) -> float:
        """Bottleneck of a ``src`` → ``dst`` hop alone: ``min(uplink_src, downlink_dst)``, capped by the
        topology's ``d2d_link.bandwidth_mbps`` when it sets one; a ``device_graph`` link with a bandwidth of its
        own is a dedicated link of that bandwidth."""
        own = self.device_graph.link(src, dst) if self.device_graph is not None else None
        if own is not None and math.isfinite(own[0]):
            return own[0]  # a dedicated link of the device graph: its own bandwidth, not the access links
        cap = self.d2d_link.bandwidth_mbps if self.d2d_link is not None else float("inf")
        return min(float(self.uplink_mbps[src]), float(self.downlink_mbps[dst]), cap)

    def d2d_s(self, src: int, dst: int) -> float:
        """Model transfer device ``src`` → device ``dst`` (a ring hop, a member → device-leader upload),
        uncontended: :meth:`d2d_bandwidth_mbps` and :meth:`d2d_latency_ms`."""
        return transfer_time_s(self.model_bytes, self.d2d_bandwidth_mbps(src, dst), self.d2d_latency_ms(src, dst))

    def edge_upload_s(self, edge: int) -> float:
        """Model transfer edge server → cloud."""
        link = self.edge_links[edge]
        return transfer_time_s(self.model_bytes, link.uplink_mbps, link.latency_ms)

    def edge_download_s(self, edge: int) -> float:
        """Model transfer cloud → edge server."""
        link = self.edge_links[edge]
        return transfer_time_s(self.model_bytes, link.downlink_mbps, link.latency_ms)
