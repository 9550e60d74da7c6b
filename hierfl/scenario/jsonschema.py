"""The scenario JSON Schema (``hierfl schema``), for YAML language servers and ``jsonschema``.

Pydantic produces the schema of :class:`~hierfl.scenario.schema.Scenario` (every registered plug-in
as a ``oneOf`` keyed by its ``name``). What pydantic cannot see is added here, so that every file
the loader accepts validates:

* ``extends:`` (a path or a list of paths). A file that extends another may leave out anything its
  parents give, so it is checked against a *partial* copy of the definitions that requires nothing;
  a file without ``extends`` must have ``data``, ``model``, ``devices``, ``protocol`` and ``stop``.
  ``name`` is never required (the loader names a run after its file).
* Shorthands the loader expands before validation: a bare string for a plug-in section
  (``protocol: <name>``), a number for a distribution (``uplink_mbps: 10``).
* ``local_steps``, the alias of ``training.steps``.

Editors pick the schema up from the first line of a scenario file::

    # yaml-language-server: $schema=../hierfl-scenario.schema.json
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["scenario_json_schema"]

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _shorthands(node: Any) -> Any:
    """Recursively wrap every discriminated union with its shorthand form."""
    if isinstance(node, list):
        return [_shorthands(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _shorthands(v) for k, v in node.items()}
    disc = node.get("discriminator")
    if isinstance(disc, dict) and "oneOf" in node:
        key = disc.get("propertyName")
        names = sorted(disc.get("mapping", {}))
        union = {k: node.pop(k) for k in ("discriminator", "oneOf")}
        alternatives: list[dict[str, Any]] = [union, {"type": "string", "enum": names}]
        if key == "dist":  # a bare number is a constant distribution
            alternatives.append({"type": "number"})
        node["anyOf"] = alternatives
    return node


def _partial(node: Any) -> Any:
    """A copy that requires nothing (a file with ``extends`` gives only what it changes), ``$ref``s
    pointing at the partial definitions, and ``oneOf`` relaxed to ``anyOf`` (without its ``name`` a
    partial plug-in section may fit several plug-ins)."""
    if isinstance(node, list):
        return [_partial(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "required":
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = "#/$defs/partial." + value.removeprefix("#/$defs/")
        else:
            out["anyOf" if key == "oneOf" else key] = _partial(value)
    return out


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (draft 2020-12), ``extends`` and shorthands included."""
    from hierfl.scenario.schema import Scenario

    full: dict[str, Any] = _shorthands(copy.deepcopy(Scenario.model_json_schema()))
    defs = full.pop("$defs", {})
    full["required"] = [k for k in full.get("required", []) if k != "name"]
    full["properties"]["extends"] = {
        "description": "scenario file(s) this one extends, relative to it; mappings merge, a plug-in "
                       "section whose name changes is replaced whole",
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
    training = defs.get("TrainingConfig")
    if training is not None:
        training["properties"]["local_steps"] = {"description": "alias of steps", "type": "integer", "minimum": 1}
    defs["Scenario"] = full
    defs.update({f"partial.{name}": _partial(d) for name, d in list(defs.items())})
    return {
        "$schema": SCHEMA_DRAFT, "title": "hierfl scenario", "description": full.get("description", ""),
        "type": "object", "$defs": defs,
        # a file that extends another is checked key by key but may leave out required keys
        "if": {"required": ["extends"]}, "then": {"$ref": "#/$defs/partial.Scenario"},
        "else": {"$ref": "#/$defs/Scenario"},
    }
