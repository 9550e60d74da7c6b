"""Load a scenario: YAML (with ``extends:``) → ``--set`` overrides → validated :class:`Scenario`.

Errors are gathered, not raised one at a time: schema problems come from pydantic (all at
once), then the topology file is read and the cross-section checks (:mod:`hierfl.scenario.checks`:
edge servers vs devices, what the protocol needs) run and add theirs. Every problem names the
file, the key path, the bad value and what is allowed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import ValidationError

from hierfl.config.errors import ConfigError, Problem
from hierfl.config.files import context_for
from hierfl.config.yamlsafe import YAMLLimitError, load_yaml
from hierfl.scenario.checks import cross_checks, raw_cross_checks, resolve_files
from hierfl.scenario.schema import Scenario
from hierfl.scenario.suggest import unknown_key, unknown_name

__all__ = ["load_scenario", "load_raw", "PluginSpecs", "apply_overrides", "override_items", "Overrides", "validate_raw", "deep_merge", "dump_scenario"]

_DISCRIMINATORS = ("name", "dist")


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``: mappings merge recursively, anything else replaces.

    A plug-in section whose ``name`` changes is replaced whole, so keys of the old plug-in
    do not leak into the new one. A distribution given in full (a mapping with ``dist:``) always
    replaces the old one whole: ``{dist: uniform, low: 10, high: 50}`` over a lognormal must not
    keep its ``median`` (reliability); a mapping without ``dist`` (``--set devices.speed_sps.high=60``)
    still edits the distribution key by key.
    """
    out = copy.deepcopy(base)
    for key, value in override.items():
        old = out.get(key)
        if (isinstance(old, dict) and isinstance(value, dict) and "dist" not in value
                and old.get("name", value.get("name")) == value.get("name", old.get("name"))):
            out[key] = deep_merge(old, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    src = str(path)
    if not path.exists():
        raise ConfigError([Problem("", "scenario file not found")], src)
    if path.is_dir():
        raise ConfigError([Problem("", "expected a YAML file, got a directory")], src)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem("", f"cannot read file: {exc}")], src) from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Problem("", f"invalid YAML: {where}{problem}")], src) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([Problem("", f"a scenario must be a mapping of sections, got {type(data).__name__}")], src)
    return data


def load_raw(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The merged raw mapping of ``path`` and everything it ``extends`` (relative to its folder)."""
    path = Path(path)
    resolved = path.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, resolved))
        raise ConfigError([Problem("extends", f"circular extends: {cycle}")], str(path))
    data = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    parents = parent if isinstance(parent, list) else [parent]
    merged: dict[str, Any] = {}
    for item in parents:
        if not isinstance(item, str):
            raise ConfigError([Problem("extends", "must be a file path or a list of paths", item)], str(path))
        merged = deep_merge(merged, load_raw(path.parent / item, (*_chain, resolved)))
    return deep_merge(merged, data)


Overrides = Sequence[str] | Mapping[str, Any]
"""What ``overrides`` takes: ``KEY.PATH=VALUE`` strings (as ``--set``), or a mapping key path -> Python value."""

_ACCEPTED_OVERRIDES = ("a mapping {'key.path': value} (e.g. {'stop.virtual_time_s': 10}) or a list of "
                       "'KEY.PATH=VALUE' strings (e.g. ['stop.virtual_time_s=10'])")
_ACCEPTED_VALUES = "None, bool, int, float, str, and lists / tuples / mappings (with str keys) of these"


class _BadValue(TypeError):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where, self.message = where, message


def _plain(value: Any, where: str) -> Any:
    """A Python override value as YAML would give it (a deep copy; tuples become lists, NumPy scalars
    Python scalars); a :class:`_BadValue` naming the key path ``where`` for anything a scenario cannot hold."""
    if value is None:
        return None
    for kind in (bool, int, float, str):  # exact Python types: np.float64 (a float subclass) becomes a float
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _BadValue(where, f"mapping keys must be str, got {type(k).__name__} {k!r}")
            out[k] = _plain(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)  # a NumPy scalar (np.int64(3), np.bool_(True)): not an int/bool subclass
    if callable(item) and getattr(value, "shape", None) == ():
        return _plain(item(), where)
    raise _BadValue(where, f"unsupported value type {type(value).__name__}; accepted: {_ACCEPTED_VALUES}")


def override_items(overrides: Overrides | None) -> list[tuple[str, str, Any]]:
    """``overrides`` as ``(label, key path, value)`` triples, in order; problems as one :class:`ConfigError`.

    Strings are ``KEY.PATH=VALUE`` with the value parsed as YAML (exactly as ``--set``); a mapping's
    values are Python values taken as they are (no text round trip: ``'1e3'`` stays a string, ``None``
    is null). A single string is one override. Anything else (an int, a set, ...) is an error saying
    what is accepted.
    """
    if overrides is None:
        return []
    if isinstance(overrides, str):
        overrides = [overrides]
    problems: list[Problem] = []
    items: list[tuple[str, str, Any]] = []
    if isinstance(overrides, Mapping):
        for key, value in overrides.items():
            if not isinstance(key, str) or not key.strip() or any(not p for p in key.strip().split(".")):
                problems.append(Problem("", "a key must be a dotted key path as a str, e.g. 'protocol.fraction'",
                                        key))
                continue
            key = key.strip()
            try:
                items.append((key, key, _plain(value, key)))
            except _BadValue as exc:
                problems.append(Problem(exc.where, exc.message))
        if problems:
            raise ConfigError(problems, "overrides")
        return items
    if isinstance(overrides, (set, frozenset)) or not isinstance(overrides, (Sequence, Iterable)) \
            or isinstance(overrides, (bytes, bytearray)):
        raise ConfigError([Problem("", f"unsupported type {type(overrides).__name__}; give "
                                       f"{_ACCEPTED_OVERRIDES}")], "overrides")
    overrides = list(overrides)
    wrong = [item for item in overrides if not isinstance(item, str)]
    if wrong:
        raise ConfigError([Problem("", f"a list item must be a 'KEY.PATH=VALUE' string, got {type(item).__name__} "
                                       f"{item!r}; for Python values give {_ACCEPTED_OVERRIDES.split(' or ')[0]}")
                           for item in wrong], "overrides")
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not key or any(not p for p in parts):
            problems.append(Problem(f"--set {item}", "expected KEY.PATH=VALUE, e.g. protocol.fraction=0.5"))
            continue
        try:
            value = load_yaml(text) if text.strip() else None
        except YAMLLimitError as exc:
            problems.append(Problem(f"--set {key}", exc.problem))
            continue
        except yaml.YAMLError:
            value = text
        items.append((f"--set {key}", key, value))
    if problems:
        raise ConfigError(problems, "command line")
    return items


def apply_overrides(raw: dict[str, Any], overrides: Overrides | None) -> dict[str, Any]:
    """Apply overrides: ``key.path=value`` strings (values parsed as YAML: numbers, lists, null, …)
    or a mapping ``{key.path: python value}`` (see :func:`override_items`)."""
    out = copy.deepcopy(raw)
    problems: list[Problem] = []
    mapping = isinstance(overrides, Mapping)
    for label, key, value in override_items(overrides):
        parts = key.split(".")
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part, {}), dict):
                prefix = ".".join(parts[: depth + 1])
                problems.append(Problem(label, f"{prefix} is a value, not a section", node[part]))
                break
            node = node.setdefault(part, {})
        else:
            # same rule as `extends`: mappings merge, unless a plug-in's name changes
            node[parts[-1]] = deep_merge(node, {parts[-1]: value})[parts[-1]]
    if problems:
        raise ConfigError(problems, "overrides" if mapping else "command line")
    return out


def _strip_tags(loc: tuple[Any, ...], raw: Any) -> str:
    """Dotted path of a pydantic error location, without discriminated-union tags."""
    parts: list[str] = []
    node = raw
    tagged = None  # the plug-in section whose tag was just skipped
    for i, item in enumerate(loc):
        if (isinstance(node, dict) and node is not tagged and any(node.get(d) == item for d in _DISCRIMINATORS)
                and (item not in node or not _indexes(node[item], loc[i + 1:i + 2]))):
            tagged = node  # (a plug-in named like its key, `{name: rounds, rounds: [...]}`: the tag comes first)
            continue  # the union tag pydantic inserts, e.g. protocol.<name>.fraction
        if isinstance(item, str) and item.startswith(("function-", "constrained-")):
            continue
        parts.append(str(item))
        if isinstance(node, dict):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node):
            node = node[item]
        else:
            node = None
    return ".".join(parts)


def _indexes(value: Any, nxt: tuple[Any, ...]) -> bool:
    """Whether the next element of an error location (``nxt``: it, or nothing) is a key or index of ``value``."""
    if not nxt:
        return False
    if isinstance(value, dict):
        return nxt[0] in value
    return isinstance(value, list) and isinstance(nxt[0], int) and 0 <= nxt[0] < len(value)


def _plugin_names(loc: tuple[Any, ...]) -> list[str]:
    """The registered ``name``s allowed at ``loc`` (a plug-in section of the schema), or []."""
    from hierfl.config.late import Late

    node: Any = Scenario
    meta: list[Any] = []
    for part in loc:
        fields = getattr(node, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return []
        node, meta = fields[part].annotation, list(fields[part].metadata)
    names: list[str] = []
    stack = [node, *meta]
    while stack:  # unwrap Annotated / Union / Optional down to the config classes
        t = stack.pop()
        if isinstance(t, Late):  # a late-bound union: the classes registered now (plug-ins' included)
            stack.extend(t.members())
            continue
        field = getattr(t, "model_fields", {}).get("name")
        if field is not None and isinstance(field.default, str):
            names.append(field.default)
        stack.extend(get_args(t))
    return sorted(set(names))


def _problems_from_validation(exc: ValidationError, raw: dict[str, Any]) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        path = _strip_tags(tuple(err["loc"]), raw)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = unknown_key(Scenario, tuple(err["loc"]))
        elif err["type"] == "union_tag_invalid":  # an unknown plug-in name: close names, or its right place
            ctx = err.get("ctx", {})
            expected = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
            msg = unknown_name(Scenario, str(ctx.get("tag", "")), expected)
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "union_tag_not_found":  # a plug-in section without `name`
            names = _plugin_names(tuple(err["loc"]))
            msg = "this section needs a `name` saying which plug-in it configures" + (
                f"; allowed: {', '.join(names)}" if names else "")
        value = err.get("input") if err["type"] not in ("missing",) else None
        if err["type"] == "missing" or isinstance(value, dict):
            problems.append(Problem(path, msg))
        else:
            problems.append(Problem(path, msg, value))
    return problems


PluginSpecs = Sequence[str]
"""What ``plugins=`` takes: plug-in files (relative to the working directory) or module names."""


def _with_plugins(raw: dict[str, Any], source: str | None, extra: PluginSpecs | None = None,
                  extra_key: str = "plugins=", extra_source: str = "hierfl.run") -> dict[str, Any]:
    """Load the scenario's ``plugins:`` (relative to its file) and ``extra`` ones (relative to the working
    directory; errors keyed ``extra_key``), before validation: their names are then part of the schema.
    Returns ``raw`` with ``plugins`` resolved (absolute paths, module names), so the resolved scenario
    (a run's config.yaml, a checkpoint) names every plug-in it needs."""
    from hierfl.config.plugins import load_plugins

    extra_refs = load_plugins(list(extra) if extra else None, base_dir=None, key=extra_key, source=extra_source)
    own = raw.get("plugins")
    base = Path(source).resolve().parent if source and Path(source).is_file() else None
    refs = load_plugins(own, base_dir=base, source=source)
    if own is None and not extra_refs:
        return raw
    specs = [r.spec for r in refs if r.kind != "entry_point"]
    specs += [r.spec for r in extra_refs if r.spec not in specs and r.kind != "entry_point"]
    return {**raw, "plugins": specs}


def validate_raw(raw: dict[str, Any], source: str | None = None, plugins: PluginSpecs | None = None) -> Scenario:
    """Validate a raw mapping into a :class:`Scenario`, raising :class:`ConfigError` with every problem.

    The scenario's ``plugins:`` and ``plugins`` (files relative to the working directory, or module
    names) are loaded first, with the installed packages' entry points."""
    raw = _with_plugins(raw, source, plugins)
    try:  # the context tells file-valued keys (topology.file, trace files) where the scenario lives
        scenario = Scenario.model_validate(raw, context=context_for(source))
    except ValidationError as exc:
        raise ConfigError(_problems_from_validation(exc, raw) + raw_cross_checks(raw), source) from None
    scenario, problems = resolve_files(scenario)
    if problems:  # a topology file that cannot be read: nothing else can be checked against it
        raise ConfigError(problems, source)
    problems = cross_checks(scenario)
    if problems:
        raise ConfigError(problems, source)
    return scenario


def load_scenario(path: str | Path, overrides: Overrides | None = (), seed: int | None = None,
                  plugins: PluginSpecs | None = None) -> Scenario:
    """Load, merge, override and validate a scenario file (``overrides``: see :func:`override_items`;
    ``plugins``: plug-in files or modules loaded besides the scenario's own ``plugins:``)."""
    raw = apply_overrides(load_raw(path), overrides)
    if "name" not in raw:  # a run is named after its file unless it says otherwise
        raw["name"] = re.sub(r"[^A-Za-z0-9._-]", "-", Path(path).stem) or "run"
    if seed is not None:
        raw["seed"] = seed
    return validate_raw(raw, str(path), plugins)


def dump_scenario(scenario: Scenario) -> str:
    """The fully resolved scenario as YAML (loadable again with :func:`load_scenario`)."""
    # libyaml's emitter where PyYAML has it (about 4x less CPU a run); its text is the pure-Python emitter's
    # (tests/scenario/test_dump.py compares them), so config.yaml is the same with or without it
    return yaml.dump(scenario.model_dump(mode="json"), Dumper=_SAFE_DUMPER, sort_keys=False)


_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
