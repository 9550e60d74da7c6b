"""Plug-ins by name: each kind (protocol, dataset, partitioner, model, …) has one registry.

A plug-in is a pydantic config model with a ``name: Literal["..."]`` field, registered once
under that name. The scenario schema builds a discriminated union from each registry, so an
unknown name is reported with the list of allowed names, and every plug-in's own keys are
validated with ``extra="forbid"``.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, Field

__all__ = ["Registry"]

M = TypeVar("M", bound=BaseModel)


class Registry:
    """Name → config-model class for one plug-in kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, cls: type[M]) -> type[M]:
        """Class decorator: register ``cls`` under the default of its ``name`` field."""
        field = cls.model_fields.get("name")
        if field is None or not isinstance(field.default, str):
            raise TypeError(f"{cls.__name__}: a {self.kind} config needs `name: Literal[...] = '...'`")
        name = field.default
        if name in self._entries and self._entries[name] is not cls:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = cls
        return cls

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def get(self, name: str) -> Any:
        """The config class registered under ``name``; KeyError lists the allowed names."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}") from None

    def union(self) -> Any:
        """A type usable as a pydantic field: the discriminated union of all registered configs.

        A bare string is shorthand for ``{name: <string>}`` (``protocol: fedavg``).
        """
        classes = [self._entries[n] for n in self.names()]
        if not classes:
            raise RuntimeError(f"no {self.kind} registered")
        inner = classes[0] if len(classes) == 1 else Annotated[Union[tuple(classes)], Field(discriminator="name")]  # noqa: UP007
        return Annotated[inner, BeforeValidator(_name_shorthand)]


def _name_shorthand(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value
