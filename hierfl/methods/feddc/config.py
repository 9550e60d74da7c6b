"""The ``training.trainer`` config of feddc: ``feddc`` — Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
  Correction", CVPR 2022 (docs/explanation/algorithms.md §5.14; math in :mod:`hierfl.methods.feddc.math`):
  each device keeps a drift ``h_i`` and a control ``c_i`` (its host's per-device state, like
  SCAFFOLD's ``c_i``); the aggregator that receives the devices' updates runs the server rule
  (:meth:`TrainerConfig.round_rule`). Messages carry two vectors each way.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from hierfl.core.message import CONTROLLED, MessageLayout
from hierfl.methods.feddc.math import DriftRule, DriftSpec
from hierfl.learn.trainers import TRAINERS, TrainerConfig
from hierfl.methods.scaffold.config import ScaffoldTrainer

__all__ = ["FedDCTrainer"]


@TRAINERS.register
class FedDCTrainer(TrainerConfig):
    """``trainer: {name: feddc, alpha: 0.01, server_rule: code}``: FedDC (Gao et al., CVPR 2022), local
    drift decoupling and correction (:mod:`hierfl.methods.feddc.math`).

    Each device keeps a drift ``h_i`` and a control ``c_i``; messages carry two vectors each way, down
    ``(w, c)`` and up ``[θ⁺; δc_i]``, like SCAFFOLD's. The aggregator that receives the devices'
    updates (the cloud under FedAvg, each edge under HierFAVG) steps ``c`` by ``(1/N) Σ δc_i`` and, with
    the code's rule, sets ``w = mean θ⁺ + H/N`` over its ``N`` devices.
    """

    name: Literal["feddc"] = "feddc"
    needs_control_variates: ClassVar[bool] = True
    needs_every_update: ClassVar[str | None] = ScaffoldTrainer.needs_every_update
    # the server's c step: c += (1/N) Σ δc_i (δc_i already carries ω_i)
    control_weighting: ClassVar[str] = "uniform"

    alpha: float = Field(default=0.01, ge=0.0, allow_inf_nan=False,
                         description="penalty α of ‖θ + h_i − w‖² (α_i = α/ω_i); the authors' code uses 0.01 "
                                     "for CIFAR, 0.1 for MNIST and 0.005 for synthetic data [design default 0.01]")
    server_rule: Literal["code", "paper"] = Field(
        default="code",
        description="code: w = unweighted mean of the participants' θ⁺ plus the mean drift H/N over all devices "
                    "(needs protocol.weighting: uniform); paper: w = sample-weighted mean of θ⁺ + h_i (needs "
                    "protocol.weighting: samples) [design default: code]")

    clip_norm: float | None = Field(
        default=10.0, gt=0.0, allow_inf_nan=False,
        description="max-norm clipping of each local step's whole gradient (the authors' code clips at 10); "
                    "null: no clipping [design default 10]")

    @property
    def layout(self) -> MessageLayout:
        """Model and control travel together, both ways (down ``c``, up ``Δc_i``)."""
        return CONTROLLED

    def spec_fields(self) -> dict[str, Any]:
        """``control_variates``, the drift job (:class:`~hierfl.methods.feddc.math.DriftSpec`) and the clipping norm."""
        return {"control_variates": True, "method": DriftSpec(float(self.alpha), self.server_rule),
                "clip_norm": None if self.clip_norm is None else float(self.clip_norm)}

    control_scope: Literal["edge", "cloud"] = Field(
        default="edge",
        description="under a hierarchy, whose control c the devices use: their edge's own c_e, stepped by the "
                    "edge over its members (edge), or the cloud's, relayed by the edges as SCAFFOLD's (cloud) "
                    "[design default: edge]; cloud without edge servers is refused")

    def round_rule(self, members: int, tier: str) -> Any:
        """The aggregator's rule over a round of device updates from ``members`` devices, or None."""
        keeps = tier == "edge" and self.control_scope == "edge"
        code = self.server_rule == "code"
        return DriftRule(members, keeps, code) if code or keeps else None

    @property
    def edge_controls(self) -> bool:
        """``control_scope: edge``."""
        return self.control_scope == "edge"

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """The protocol's device weights must match the server rule, and no server optimizer may step the
        tier the rule runs at (the rule sets the model itself)."""
        out: list[tuple[str, str, Any]] = []
        want = "uniform" if self.server_rule == "code" else "samples"
        have = getattr(scenario.protocol, "weighting", None)
        if have != want:
            out.append(("protocol.weighting", f"feddc with server_rule {self.server_rule} averages device models "
                        f"{'unweighted' if want == 'uniform' else 'by sample count'}; allowed: {want}", have))
        for tier in ("cloud", "edge"):
            if self.server_rule == "code" and scenario.server_optimizer.at(tier) is not None:
                out.append((f"server_optimizer.{tier}", "feddc's server rule sets the model itself; allowed: "
                            "no server optimizer", scenario.server_optimizer.at(tier).name))
        if self.non_default("control_scope") and not scenario.topology.edge_servers:
            out.append(("training.trainer.control_scope", "chooses between the edges' and the cloud's control, and "
                        "there are no edge servers (topology.edge_servers: 0), so it would be ignored; allowed: "
                        "edge (the default) without edge servers", self.control_scope))
        aggregation = getattr(scenario, "aggregation", None)
        for tier in ("cloud", "edge") if aggregation is not None else ():
            rule = aggregation.at(tier)
            if not getattr(rule, "is_mean", True):
                # the drift H and the control c sum every device's update; a robust rule's aggregate leaves some
                # out or moves them, so H would silently part from the devices' h_i
                out.append((f"aggregation.{tier}", "feddc's server state (the drift H and the control c) sums "
                            "every device's update, which a robust rule's aggregate does not; allowed: mean",
                            rule.name))
        return out
