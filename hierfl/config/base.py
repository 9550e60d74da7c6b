"""Base class for every configuration model: frozen, unknown keys rejected."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigModel", "rename_alias"]


class ConfigModel(BaseModel):
    """A frozen pydantic model that forbids unknown keys (misspelled options must not be dropped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
