"""Base class for every configuration model (frozen, unknown keys rejected) and two input helpers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigModel", "rename_alias", "name_shorthand", "cloud_shorthand"]


class ConfigModel(BaseModel):
    """A frozen pydantic model that forbids unknown keys (misspelled options must not be dropped).

    Every float field of every configuration model is finite: ``allow_inf_nan=False`` here is the
    one place that rejects ``.nan``/``.inf`` (YAML) for speeds, latencies, jitter, distribution
    parameters, time budgets and every plug-in's numbers alike, at load time with the key path,
    instead of a run that never ends or computes NaN times (reliability).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        # recorded in creation order, so that a plug-in registered later can rebuild the schemas
        # that embed its registry's union (hierfl.config.late)
        from hierfl.config import late

        late.record(cls)


def rename_alias(data: Any, alias: str, key: str) -> Any:
    """For a ``mode="before"`` validator: the raw mapping with ``alias`` renamed to ``key``.

    Setting both is an error (raised as a ``ValueError`` so it reports under the section's path).
    """
    if isinstance(data, dict) and alias in data:
        data = dict(data)
        if key in data:
            raise ValueError(f"set either {key} or {alias} (its alias), not both")
        data[key] = data.pop(alias)
    return data


def name_shorthand(value: Any, key: str = "name") -> Any:
    """A bare string names a plug-in: ``protocol: fedavg`` means ``protocol: {name: fedavg}``.

    ``key`` is the field that names the plug-in (``name``; ``dist`` for distributions).
    """
    return {key: value} if isinstance(value, str) else value


def cloud_shorthand(value: Any) -> Any:
    """A per-tier section (``{edge: ..., cloud: ...}``) given as one plug-in means the cloud's:
    ``server_optimizer: fedadam`` / ``aggregation: {name: geomed}`` set ``cloud`` only."""
    if isinstance(value, str) or (isinstance(value, dict) and "name" in value):
        return {"cloud": value}
    return value
