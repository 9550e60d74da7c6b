"""The scenario's ``server_optimizer: {cloud: …, edge: …}`` section: the server optimizer of each aggregation tier.

The optimizers are plug-ins (:data:`hierfl.learn.serveropt.SERVER_OPTIMIZERS`); a tier the scenario leaves
unset gets the default the method packages declare (:data:`hierfl.methods.DEFAULT_SERVER_OPTIMIZER`: plain
averaging).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from hierfl.config.base import ConfigModel, cloud_shorthand
from hierfl.config.errors import Problem
from hierfl.learn.serveropt import SERVER_OPTIMIZERS, ServerOptimizerConfig
from hierfl.methods import DEFAULT_SERVER_OPTIMIZER  # (the shipped optimizers register before the union is built)

__all__ = ["ServerOptimizerSection", "default_optimizer"]


def default_optimizer() -> ServerOptimizerConfig:
    """The optimizer of a tier the scenario leaves unset: the method packages' default, plain averaging."""
    opt: ServerOptimizerConfig = SERVER_OPTIMIZERS.example(DEFAULT_SERVER_OPTIMIZER)
    return opt


class ServerOptimizerSection(ConfigModel):
    """``server_optimizer: {cloud: …, edge: …}`` — the optimizer of each aggregation tier.

    ``cloud`` steps the global model wherever a protocol aggregates it; ``edge`` steps each
    leader's model in protocols whose leaders aggregate. Both default to plain averaging
    (:func:`default_optimizer`). A bare name or a single optimizer mapping is shorthand for the
    cloud: ``server_optimizer: <name>`` = ``{cloud: {name: <name>}}``.
    """

    cloud: SERVER_OPTIMIZERS.union() = Field(default=default_optimizer(), description="server optimizer of the cloud's aggregation")  # type: ignore[valid-type]
    edge: SERVER_OPTIMIZERS.union() = Field(default=default_optimizer(), description="server optimizer of the edge servers' aggregations")  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _cloud_shorthand(cls, value: Any) -> Any:
        return cloud_shorthand(value)

    def at(self, tier: str) -> ServerOptimizerConfig | None:
        """The optimizer of ``tier`` (``cloud`` or ``edge``), or None when it is plain averaging."""
        opt: ServerOptimizerConfig = self.cloud if tier == "cloud" else self.edge
        return None if opt.plain_average else opt

    def check(self, tiers: tuple[str, ...], protocol: str) -> list[Problem]:
        """A non-default optimizer at a tier where ``protocol`` aggregates no model would be ignored: an error."""
        problems = []
        for tier in ("cloud", "edge"):
            if self.at(tier) is not None and tier not in tiers:
                allowed = ", ".join(tiers) if tiers else "none"
                problems.append(Problem(f"server_optimizer.{tier}",
                                        f"protocol {protocol!r} has no {tier} aggregation that takes a server "
                                        f"optimizer; tiers it supports: {allowed}", getattr(self, tier).name))
        return problems
