"""Base class for every configuration model: frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigModel"]


class ConfigModel(BaseModel):
    """A frozen pydantic model that forbids unknown keys (misspelled options must not be dropped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
