"""The ``training.trainer`` config of distrans: ``distrans`` — Yuan et al., "Addressing Heterogeneity in Federated Learning via Distributional
  Transformation", ECCV 2022 (:mod:`hierfl.methods.distrans.trainer`): each device trains an input-shaped offset with
  the dual-input model and keeps it (its host's per-device state); devices are evaluated with their own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hierfl.methods.distrans.math import OffsetSpec
from hierfl.learn.trainers import TRAINERS, TrainerConfig, one_model

__all__ = ["DisTransTrainer"]


@TRAINERS.register
class DisTransTrainer(TrainerConfig):
    """``trainer: {name: distrans, lr_offset: 0.001}``: DisTrans (Yuan et al., ECCV 2022) with the
    ``dual_input`` model (whose ``a`` is DisTrans's mixing).

    Each device keeps an input-shaped offset ``t_i`` (its host's per-device state), trained with the model on
    every batch (``lr_offset``, plain SGD); the model is averaged as usual, unweighted by default
    (``weighting`` must match ``protocol.weighting``); with ``offset_mode: local`` the offsets never leave
    the devices, with ``mean`` they travel behind the model and are averaged with it. With ``data.local_test_fraction`` each device is evaluated on its own test split through its
    own offset (``device_accuracy`` fields); the global accuracy is the model's with a zero offset.
    """

    name: Literal["distrans"] = "distrans"
    lr_offset: float = Field(default=1e-3, ge=0.0, allow_inf_nan=False,
                             description="plain SGD rate of the offsets (the model's is training.lr; the authors use "
                                         "5e-3 for it) [design default 1e-3, from the authors' code]")
    offset_mode: Literal["local", "mean"] = Field(
        default="local",
        description="what the servers do with the offsets: local = never aggregated, each device keeps its own (the "
                    "authors' non-IID script); mean = the offset travels behind the model, is averaged with it and "
                    "every device starts from the average (the hypernetwork mode is not built) [design default: "
                    "local]")
    weighting: Literal["uniform", "samples"] = Field(
        default="uniform",
        description="how the server averages the device models: uniform (the authors' agg_weights) or by sample "
                    "count; protocol.weighting must say the same [design default: uniform]")
    offset_update: Literal["joint", "alternating"] = Field(
        default="joint",
        description="joint: model and offset step from one gradient per batch (the authors' code); alternating: the "
                    "model steps, then the offset from the moved model's gradient (twice the work) [design default: "
                    "joint]")

    def spec_fields(self) -> dict[str, Any]:
        """The offset job (:class:`~hierfl.methods.distrans.math.OffsetSpec`; its ``init_seed`` is set from the
        scenario seed by the build)."""
        return {"method": OffsetSpec(self.offset_mode, float(self.lr_offset), self.offset_update)}

    def work_factor(self, model: Any, input_shape: tuple[int, ...], num_classes: int, call: Any) -> float:
        """2 with alternating updates (a second forward and backward per batch), else 1: the dual input's two
        backbone passes are in the model's own FLOPs already."""
        return float(OffsetSpec(update=self.offset_update).passes)

    def scenario_problems(self, scenario: Any) -> list[tuple[str, str, Any]]:
        """A dual-input model, matching device weights, float32."""
        out = one_model(scenario, "distrans")
        if getattr(scenario.model, "name", None) != "dual_input":
            out.append(("model.name", "distrans trains an offset through a dual-input model; allowed: dual_input",
                        getattr(scenario.model, "name", None)))
        have = getattr(scenario.protocol, "weighting", None)
        if have is not None and have != self.weighting:
            out.append(("protocol.weighting", f"distrans with weighting {self.weighting} averages the device models "
                        f"{'unweighted' if self.weighting == 'uniform' else 'by sample count'}; allowed: "
                        f"{self.weighting}", have))
        if scenario.runtime.precision != "fp32":
            out.append(("runtime.precision", "distrans's jobs run in float32; allowed: fp32", scenario.runtime.precision))
        return out
