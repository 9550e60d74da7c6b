"""Late-bound schema types: a plug-in registered after the schema was built still validates.

The scenario schema is a tree of pydantic models whose open sets (protocols, straggler policies,
datasets, …) are discriminated unions over a :class:`~hierfl.config.registry.Registry`. Pydantic
builds a model's validator when the class is created, so a union computed then would never see a
plug-in registered later (a user's file given with ``--plugin``). Here:

* :class:`Late` is ``Annotated`` metadata whose ``__get_pydantic_core_schema__`` builds the field's
  type from the registry *as it is when the schema is generated*, not when the annotation was written;
* every :class:`~hierfl.config.base.ConfigModel` subclass is recorded in creation order with the
  registration generation its schema was built at (:func:`record`);
* a registration into a registry whose union was already built bumps the generation
  (:func:`changed`); :func:`refresh` then rebuilds (``model_rebuild(force=True)``) every model built
  before it, in creation order (children before parents). A late union first refreshes its member
  classes (:func:`ensure_fresh`), so a parent never embeds a stale child's schema, whatever the
  creation order of plug-in classes loaded one after another.

Nothing here changes a schema that no plug-in touched: with no late registration, :func:`refresh`
rebuilds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Late", "record", "changed", "refresh", "ensure_fresh", "generation"]

_CREATED: list[type] = []          # every ConfigModel subclass, in creation order
_BUILT: dict[type, int] = {}       # class -> generation its schema was built at
_BUILDING: set[type] = set()       # classes being rebuilt now (a recursive union refers back to them)
_STATE = {"generation": 0}


def generation() -> int:
    """How many late registrations happened in this process (0: the schema is as shipped)."""
    return _STATE["generation"]


def record(cls: type) -> None:
    """Note a newly created config model (``ConfigModel.__pydantic_init_subclass__``)."""
    _CREATED.append(cls)
    _BUILT[cls] = _STATE["generation"]


def changed() -> None:
    """A registry whose union was already built got a new member: schemas built so far may be stale."""
    _STATE["generation"] += 1


def ensure_fresh(cls: type) -> None:
    """Rebuild ``cls``'s validator if it predates the last late registration (no-op otherwise)."""
    if _BUILT.get(cls, _STATE["generation"]) >= _STATE["generation"] or cls in _BUILDING:
        return
    _BUILDING.add(cls)
    try:
        cls.model_rebuild(force=True)  # type: ignore[attr-defined]
        _BUILT[cls] = _STATE["generation"]
    finally:
        _BUILDING.discard(cls)


def refresh() -> int:
    """Rebuild every stale config model, in creation order; returns how many were rebuilt."""
    stale = [cls for cls in _CREATED if _BUILT.get(cls, 0) < _STATE["generation"]]
    for cls in stale:
        ensure_fresh(cls)
    return len(stale)


class Late:
    """``Annotated`` metadata: the field's schema is ``build()``'s type, built when the schema is generated.

    ``members()`` are the config classes ``build()`` puts in the type; each is made fresh first
    (:func:`ensure_fresh`). ``registry`` (optional) is the registry the type is drawn from, for
    code that reads annotations (the loader's list of allowed names, the reference docs).
    """

    def __init__(self, build: Callable[[], Any], members: Callable[[], Iterable[type]] = tuple,
                 registry: Any = None) -> None:
        self.build = build
        self.members = members
        self.registry = registry

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        for cls in self.members():
            ensure_fresh(cls)
        if self.registry is not None:
            self.registry.used = True  # a later registration must now refresh the schemas
        return handler.generate_schema(self.build())

    def __repr__(self) -> str:  # shown in pydantic's field reprs
        kind = getattr(self.registry, "kind", None)
        return f"Late({kind!r})" if kind else "Late()"
