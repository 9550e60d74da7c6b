"""Base class for every configuration model (frozen, unknown keys rejected) and two input helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigModel", "ReadWith", "rename_alias", "name_shorthand", "cloud_shorthand"]


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

    # knob → ReadWith(sibling key, the sibling's values under which the knob is read): a knob set (to a value
    # other than its default) while its sibling says it is not read would do nothing, so the scenario checks
    # refuse it (ignored_settings), or warn about it (unread_warnings) where the declaration says `warn`
    read_only_with: ClassVar[Mapping[str, ReadWith]] = {}

    def non_default(self, key: str) -> bool:
        """Whether ``key`` holds a value other than its default: a setting (a default written out, as in a
        run's resolved ``config.yaml``, is not one)."""
        field = type(self).model_fields[key]
        return bool(getattr(self, key) != field.get_default(call_default_factory=True))

    def ignored_settings(self) -> list[tuple[str, str, Any]]:
        """``(key, message, value)`` for each key set here (to a value other than its default) that this
        config would ignore and refuses (from ``read_only_with``; a plug-in overrides this for conditions a
        mapping cannot say)."""
        return self._unread(warn=False)

    def unread_warnings(self) -> list[tuple[str, str, Any]]:
        """``(key, message, value)`` for each key set here that would be ignored, declared ``warn``: a base
        scenario shared by a sweep's arms sets it for the arms that read it."""
        return self._unread(warn=True)

    def _unread(self, warn: bool) -> list[tuple[str, str, Any]]:
        out = []
        for key, rule in self.read_only_with.items():
            now = getattr(self, rule.sibling)
            if rule.warn == warn and self.non_default(key) and now not in rule.values:
                shown = ", ".join(_yaml(v) for v in rule.values)
                message = (f"read only with {rule.sibling}: {shown}; with {rule.sibling}: {_yaml(now)} it would be "
                           f"ignored; remove it (or set {rule.sibling}: {_yaml(rule.values[0])})")
                out.append((key, message, getattr(self, key)))
        return out


class ReadWith(NamedTuple):
    """A knob read only while ``sibling`` has one of ``values``; set otherwise it is refused, or only warned
    about with ``warn`` (where a base scenario shared by a sweep's arms sets it for the arms that read it:
    an output-exchange protocol's consensus knobs in a base whose no-collaboration arm turns ``collaborate`` off)."""

    sibling: str
    values: tuple[Any, ...]
    warn: bool = False


def _yaml(value: Any) -> str:
    """A value as YAML writes it (``true``, ``null``, ``match``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


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
    """A bare string names a plug-in: ``protocol: <name>`` means ``protocol: {name: <name>}``.

    ``key`` is the field that names the plug-in (``name``; ``dist`` for distributions).
    """
    return {key: value} if isinstance(value, str) else value


def cloud_shorthand(value: Any) -> Any:
    """A per-tier section (``{edge: ..., cloud: ...}``) given as one plug-in means the cloud's:
    ``server_optimizer: <name>`` / ``aggregation: {name: geomed}`` set ``cloud`` only."""
    if isinstance(value, str) or (isinstance(value, dict) and "name" in value):
        return {"cloud": value}
    return value
