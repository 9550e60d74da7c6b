"""``servers:``: how fast the cloud and the edge servers compute their own work (server tasks).

A server task (a generator's training, a fine-tuning, a matching; :mod:`hierfl.learn.server_tasks`)
takes ``flops / (gflops · 10⁹)`` virtual seconds on its server, one task after another per server.
The figures come from a tier of ``hierfl/profiles/tiers.yaml`` (``cloud_gpu``, ``cloud_cpu``,
``edge_gpu``, ``edge_cpu``, or any device tier) or are given as ``gflops``.
"""

from __future__ import annotations

from pydantic import Field, PositiveFloat, field_validator

from hierfl.config.base import ConfigModel
from hierfl.devices.tiers import shipped_tiers

__all__ = ["ServerCompute", "CloudCompute", "EdgeCompute", "ServersConfig"]


class ServerCompute(ConfigModel):
    """One tier of servers' compute: a shipped tier's GFLOP/s, or ``gflops`` given."""

    tier: str = Field(default="cloud_gpu", description="a tier of hierfl/profiles/tiers.yaml whose gflops the "
                      "servers compute at (cloud_gpu, cloud_cpu, edge_gpu, edge_cpu, or a device tier)")
    gflops: PositiveFloat | None = Field(default=None, description="GFLOP/s of server tasks; overrides `tier`'s figure")

    @field_validator("tier")
    @classmethod
    def _known(cls, value: str) -> str:
        known = shipped_tiers()
        if value not in known:
            raise ValueError(f"unknown tier {value!r}; allowed: {', '.join(sorted(known))} (or give gflops)")
        return value

    @property
    def flops_per_s(self) -> float:
        """FLOP/s of a server of this tier."""
        return float(self.gflops if self.gflops is not None else shipped_tiers()[self.tier].gflops) * 1e9


class CloudCompute(ServerCompute):
    """The cloud's compute: ``tier`` defaults to ``cloud_gpu``."""

    tier: str = Field(default="cloud_gpu", description="a tier of hierfl/profiles/tiers.yaml whose gflops the "
                      "cloud computes at (cloud_gpu, cloud_cpu, edge_gpu, edge_cpu, or a device tier)")


class EdgeCompute(ServerCompute):
    """Each edge server's compute: ``tier`` defaults to ``edge_cpu`` (``servers: {edge: {}}`` is the default)."""

    tier: str = Field(default="edge_cpu", description="a tier of hierfl/profiles/tiers.yaml whose gflops each "
                      "edge server computes at (edge_cpu, edge_gpu, cloud_gpu, cloud_cpu, or a device tier)")


class ServersConfig(ConfigModel):
    """``servers: {cloud: {tier: cloud_gpu}, edge: {tier: edge_cpu}}`` (design defaults: a GPU cloud,
    CPU edge servers; both tiers' figures are placeholders)."""

    cloud: CloudCompute = Field(default=CloudCompute(),
                                description="the cloud's compute for server tasks (default tier cloud_gpu, 3 500 GFLOP/s)")
    edge: EdgeCompute = Field(default=EdgeCompute(),
                              description="each edge server's compute for server tasks (default tier edge_cpu, 400 GFLOP/s)")

    def flops_per_s(self, tier: str) -> float:
        """FLOP/s of a server of ``tier`` (``cloud``; ``edge`` or ``device``: an edge server's)."""
        return (self.cloud if tier == "cloud" else self.edge).flops_per_s
