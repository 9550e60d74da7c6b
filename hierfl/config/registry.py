"""Plug-ins by name: each open set (protocols, datasets, straggler policies, …) has one registry.

A plug-in is a pydantic config model named by a ``name: Literal["..."]`` field (``dist`` for
distributions; a ``ClassVar`` for event kinds, whose name is their YAML key), registered once
under that name. The scenario schema builds a discriminated union from each registry, so an
unknown name is reported with the list of allowed names, every plug-in's own keys are validated
with ``extra="forbid"``, and a bare string is shorthand for ``{name: <string>}``. Behaviour is a
hook on the plug-in class, never a check of its name.

The union is late-bound (:mod:`hierfl.config.late`): it is built from the registry as it is when
pydantic generates the schema, and a registration after that (a user's plug-in file) marks the
schemas stale, so that :func:`hierfl.config.late.refresh` rebuilds them with the new name.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, Field

from hierfl.config import late
from hierfl.config.base import name_shorthand

__all__ = ["Registry", "close_names", "DuplicateName", "snapshot", "restore", "forget_module"]

M = TypeVar("M", bound=BaseModel)

_INSTANCES: list[Registry] = []


class DuplicateName(ValueError):
    """A name registered twice (by two classes): the second registration is refused."""


class Registry:
    """Name → config-model class for one plug-in kind.

    Parameters
    ----------
    kind:
        What the plug-ins are, for messages (``"straggler policy"``).
    key:
        The field (or class attribute) holding a plug-in's name.
    shorthand:
        Extra input shorthand applied before the name shorthand (distributions: a number is
        ``constant``).
    order:
        Names whose classes :meth:`classes` lists first, in this order, whichever module was
        imported first (event kinds: a feature package's kinds register when it is imported, so
        the order of registration alone could depend on the caller's first import).
    """

    def __init__(self, kind: str, key: str = "name", shorthand: Callable[[Any], Any] | None = None,
                 order: Sequence[str] = ()) -> None:
        self.kind = kind
        self.key = key
        self._shorthand = shorthand
        self._order = tuple(order)
        self._entries: dict[str, Any] = {}
        self.used = False  # a union over it was built: a later registration makes schemas stale
        _INSTANCES.append(self)

    @staticmethod
    def instances() -> list[Registry]:
        """Every registry created so far (one per plug-in kind; conformance tests cover each)."""
        return list(_INSTANCES)

    def register(self, cls: type[M]) -> type[M]:
        """Class decorator: register ``cls`` under the default of its name field (or its name ``ClassVar``)."""
        field = cls.model_fields.get(self.key)
        name = field.default if field is not None else getattr(cls, self.key, None)
        if not isinstance(name, str):
            raise TypeError(f"{cls.__name__}: a {self.kind} config needs `{self.key}: Literal[...] = '...'`")
        if name in self._entries and self._entries[name] is not cls:
            raise DuplicateName(f"{self.kind} {name!r} is already registered (by {_origin(self._entries[name])})")
        self._entries[name] = cls
        if self.used:
            late.changed()
        return cls

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def classes(self) -> list[Any]:
        """Registered classes: those named in ``order`` first (in that order), then the others in registration order."""
        first = [self._entries[n] for n in self._order if n in self._entries]
        return first + [cls for n, cls in self._entries.items() if n not in self._order]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        """The config class registered under ``name``; KeyError lists the allowed names."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown(name)) from None

    def unknown(self, name: object, allowed: Sequence[str] | None = None,
                where: Callable[[Registry], str | None] | None = None) -> str:
        """The message for a name that is not registered: the close names first ("did you mean"), the
        allowed ones (``allowed``, default every registered name), and the other kinds with a plug-in of
        that name (a trainer given as a protocol), at their key path when ``where`` knows it."""
        allowed = self.names() if allowed is None else list(allowed)
        text = f"unknown {self.kind} {name!r}"
        if isinstance(name, str):
            elsewhere = []
            if not any(n.lower() == name.lower() for n in allowed):  # a name in another case is a misspelling
                for other in _INSTANCES:
                    hit = [n for n in other.names() if n.lower() == name.lower()]
                    if other is not self and hit:
                        path = where(other) if where is not None else None
                        elsewhere.append(f"{hit[0]!r} is a {other.kind}" + (f" ({path})" if path else ""))
            if elsewhere:  # before the list of names, which a long message may cut
                text += f": {'; '.join(elsewhere)}, not a {self.kind}"
            close = close_names(name, allowed)
            if close:
                text += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        return f"{text}{' ' if text.endswith('?') else '; '}allowed: {', '.join(allowed)}"

    def example(self, name: str) -> Any:
        """A minimal valid config of ``name``: its class's ``example()``, else ``{key: name}`` with defaults."""
        cls = self.get(name)
        make = getattr(cls, "example", None)
        return make() if make is not None else cls.model_validate({self.key: name})

    def _before(self, value: Any) -> Any:
        if self._shorthand is not None:
            value = self._shorthand(value)
        return name_shorthand(value, self.key)

    def union(self, where: Callable[[Any], bool] | None = None, variant: Callable[[Any], Any] | None = None) -> Any:
        """A type usable as a pydantic field: the discriminated union of the registered configs.

        ``where`` keeps only the classes it accepts (e.g. the straggler policies allowed at the
        cloud); ``variant`` maps each class to the subclass used in this field (e.g. a policy plus
        its ``cloud`` key). A bare string is shorthand for ``{name: <string>}`` (``protocol: <name>``).

        The union is late-bound: the :class:`~hierfl.config.late.Late` marker rebuilds it from the
        registry whenever pydantic generates the schema, so a plug-in registered later is part of it
        after :func:`hierfl.config.late.refresh`. The annotation itself names the classes registered now
        (for code that reads annotations).
        """
        def members() -> list[Any]:  # the classes the union holds now (variants included)
            classes = [self._entries[n] for n in self.names() if where is None or where(self._entries[n])]
            return [variant(cls) for cls in classes] if variant is not None else classes

        def build() -> Any:
            classes = members()
            if not classes:
                raise RuntimeError(f"no {self.kind} registered")
            return classes[0] if len(classes) == 1 else Annotated[Union[tuple(classes)], Field(discriminator=self.key)]  # noqa: UP007

        return Annotated[build(), late.Late(build, members, self), BeforeValidator(self._before)]

    def name_field(self) -> Any:
        """A field type holding just a registered name (a bare string, or ``{name: ...}`` alone).

        For kinds whose plug-ins take no parameters in YAML (groupings, executors): the value
        stays a string and an unknown one is reported with the allowed names.
        """
        return Annotated[str, BeforeValidator(functools.partial(_check_name, self))]


def close_names(name: str, names: Sequence[str]) -> list[str]:
    """Up to three of ``names`` close to ``name`` (ignoring case), closest first."""
    lowered = {n.lower(): n for n in names}
    return [lowered[n] for n in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]


def _check_name(registry: Registry, value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {registry.key}:
        value = value[registry.key]
    if isinstance(value, str) and value not in registry:
        raise ValueError(registry.unknown(value))
    return value


def _origin(cls: Any) -> str:
    """Where a registered class comes from, for messages: its module (a plug-in file's path when known)."""
    module = getattr(cls, "__module__", "?")
    import sys

    path = getattr(sys.modules.get(module), "__file__", None)
    return f"{module} ({path})" if path and not module.startswith("hierfl.") else module


def snapshot() -> list[tuple[Registry, dict[str, Any]]]:
    """Every registry's entries now (a plug-in that fails part-way is rolled back to this)."""
    return [(reg, dict(reg._entries)) for reg in _INSTANCES]


def restore(state: list[tuple[Registry, dict[str, Any]]]) -> None:
    """Put the registries back as :func:`snapshot` saw them (registries created since are emptied)."""
    saved = {id(reg): entries for reg, entries in state}
    for reg in _INSTANCES:
        entries = saved.get(id(reg), {})
        if entries.keys() != reg._entries.keys() and reg.used:
            late.changed()
        reg._entries = dict(entries)


def forget_module(module: str) -> None:
    """Remove every registration of classes defined in ``module`` (a plug-in file loaded again after an edit)."""
    for reg in _INSTANCES:
        gone = [name for name, cls in reg._entries.items() if getattr(cls, "__module__", None) == module]
        for name in gone:
            del reg._entries[name]
        if gone and reg.used:
            late.changed()
