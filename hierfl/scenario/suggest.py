"""What a misspelt key or plug-in name was probably meant to be, read off the schema and the registries.

A key the schema does not know gets the section's allowed keys, the close ones first ("did you mean
``count``?"); an unknown plug-in name gets the close registered names, and, when the name belongs to
another registry, where it goes instead (a trainer's name given as the protocol → it is a trainer,
``training.trainer``). Nothing here keeps a list of keys or names: the schema's models and the
registries are the only source, so a new plug-in or key is suggested as soon as it exists.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from hierfl.config.registry import Registry, close_names

__all__ = ["unknown_key", "unknown_name", "registry_paths"]

_DISCRIMINATORS = ("name", "dist")


def _unwrap(t: Any) -> list[Any]:
    """The alternatives of a type: Annotated, Optional and unions flattened (containers kept whole)."""
    origin = get_origin(t)
    if origin is Union or origin is types.UnionType:
        return [x for arg in get_args(t) for x in _unwrap(arg)]
    if origin is not None and getattr(t, "__metadata__", None) is not None:  # Annotated[X, ...]
        return _unwrap(get_args(t)[0])
    return [t]


def _models(t: Any) -> list[type[BaseModel]]:
    return [x for x in _unwrap(t) if isinstance(x, type) and issubclass(x, BaseModel)]


def _tag(cls: type[BaseModel]) -> str | None:
    for key in _DISCRIMINATORS:
        field = cls.model_fields.get(key)
        if field is not None and isinstance(field.default, str):
            return field.default
    return None


def _step(types_: Iterable[Any], part: Any) -> list[Any]:
    """The types found one key (or list index) below ``types_``."""
    out: list[Any] = []
    for t in types_:
        for alt in _unwrap(t):
            origin = get_origin(alt)
            if origin in (list, tuple, Sequence) and isinstance(part, int):
                out.extend(get_args(alt)[:1])
            elif origin is dict and isinstance(part, str):
                out.extend(get_args(alt)[1:2])
            elif isinstance(alt, type) and issubclass(alt, BaseModel) and isinstance(part, str):
                if part in alt.model_fields:
                    out.append(alt.model_fields[part].annotation)
                elif _tag(alt) == part:  # a discriminated union's tag in pydantic's error location
                    out.append(alt)
    return out


def _keys_at(root: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys allowed in the section at ``loc`` (a pydantic error location), or [] if not known."""
    found: list[Any] = [root]
    for part in loc:
        found = _step(found, part)
        if not found:
            return []
    keys: dict[str, None] = {}
    for cls in (m for t in found for m in _models(t)):
        keys.update(dict.fromkeys(cls.model_fields))
    return list(keys)


def unknown_key(root: type[BaseModel], loc: Sequence[Any]) -> str:
    """The message for the unknown key at ``loc``: the close allowed keys, then every allowed key."""
    bad = loc[-1] if loc else ""
    keys = [k for k in _keys_at(root, loc[:-1]) if k != "versions" or len(loc) > 1]
    if not keys:
        return "unknown key (misspelled? the scenario reference in docs/ lists the allowed keys)"
    close = close_names(str(bad), keys)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown key{hint}{' ' if hint else '; '}allowed: {', '.join(keys)}"


def registry_paths(root: type[BaseModel]) -> dict[int, str]:
    """``id(registry)`` → the first key path of ``root``'s schema where that registry's plug-ins are named
    (``training.trainer`` for the trainers; ``<key>`` for a mapping's keys, ``<i>`` for a list's items)."""
    registries = Registry.instances()
    owners: dict[type, Registry] = {}
    for reg in registries:
        for cls in reg.classes():
            owners.setdefault(cls, reg)
    paths: dict[int, str] = {}
    seen: set[type] = set()
    queue: list[tuple[Any, str]] = [(root, "")]
    while queue:  # breadth first: the shortest path of each registry wins
        t, path = queue.pop(0)
        for alt in _unwrap(t):
            origin = get_origin(alt)
            if origin in (list, tuple, Sequence):
                queue.extend((a, f"{path}.<i>") for a in get_args(alt)[:1])
            elif origin is dict:
                queue.extend((a, f"{path}.<key>") for a in get_args(alt)[1:2])
            elif isinstance(alt, type) and issubclass(alt, BaseModel):
                reg = next((owners[c] for c in alt.__mro__ if c in owners), None)
                if reg is not None and path:
                    paths.setdefault(id(reg), path.lstrip("."))
                if alt in seen:
                    continue
                seen.add(alt)
                queue.extend((f.annotation, f"{path}.{k}") for k, f in alt.model_fields.items())
    return paths


def unknown_name(root: type[BaseModel], tag: str, expected: Sequence[str]) -> str:
    """The message for an unknown plug-in name ``tag`` where ``expected`` are allowed (the registry's
    :meth:`~hierfl.config.registry.Registry.unknown`, with the key path of another kind that has ``tag``)."""
    owner = next((r for r in sorted(Registry.instances(), key=lambda r: len(r.names()))
                  if set(expected) <= set(r.names())), None)
    if owner is None:
        return f"unknown name {tag!r}; allowed: {', '.join(expected)}"
    paths = registry_paths(root)
    return owner.unknown(tag, expected, where=lambda r: paths.get(id(r)))
