"""A sweep over the registries: every knob set to another value loads or is refused cleanly, and every
``read_only_with`` declaration refuses exactly the settings it says are not read.

The sweep found the settings that ran without effect (tests/scenario/test_ignored_settings.py lists
them); this file keeps the declarations honest and every protocol's knobs free of crashes at load time.
"""

from __future__ import annotations

import copy
import typing
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

import hierfl.scenario  # noqa: F401  (assembles the schema: every plug-in is registered)
from hierfl.config.base import ConfigModel
from hierfl.config.errors import ConfigError
from hierfl.config.registry import Registry
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.loader import deep_merge, validate_raw
from hierfl.scenario.schema import Scenario
from hierfl.scenario.suggest import registry_paths
from tests.conftest import TINY

# a protocol is swept in the first of these settings its example accepts (as the conformance suite runs it)
SETTINGS: list[dict[str, Any]] = [
    {}, {"topology": {"edge_servers": 2}},
    {"devices": {"count": 12}, "data": {"dataset": {"num_samples": 720}}, "topology": {"edge_servers": 2}},
    {"topology": {"device_graph": {"name": "ring"}}, "stop": {"virtual_time_s": 3.0}},
    {"data": {"public": {"size": 40}}},
    {"data": {"public": {"size": 40, "labelled": False}}, "stop": {"virtual_time_s": 3.0}},
    {"data": {"public": {"size": 40}}, "training": {"lr": 0.01}},  # fccl refuses training.lr (Adam at its own lr)
    {"model": {"name": "mlp", "hidden": [6]}},
]


def _all_configs() -> list[type[ConfigModel]]:
    out, stack = [], [ConfigModel]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in out:
                out.append(sub)
                stack.append(sub)
    return sorted(out, key=lambda c: (c.__module__, c.__qualname__))


def _alternatives(annotation: Any, default: Any) -> list[Any]:
    """Values other than ``default`` a field of this type may take (the first few of each kind)."""
    flat: list[Any] = []

    def walk(t: Any) -> None:
        origin = get_origin(t)
        if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
            for arg in get_args(t):
                walk(arg)
        elif origin is typing.Annotated:
            walk(get_args(t)[0])
        else:
            flat.append(t)

    walk(annotation)
    out: list[Any] = []
    for t in flat:
        if get_origin(t) is Literal:
            out += [v for v in get_args(t) if v != default]
        elif t is bool:
            out += [v for v in (True, False) if v is not default]
        elif t is int:
            base = default if isinstance(default, int) and not isinstance(default, bool) else 1
            out += [base + 1, max(base - 1, 0)]
        elif t is float:
            base = default if isinstance(default, float) else 0.5
            out += [base * 0.5 if base else 0.25, base + 0.25]
        elif t is type(None) and default is not None:
            out.append(None)
    return [v for i, v in enumerate(out) if v != default and v not in out[:i]]


def _example(cls: type[ConfigModel]) -> ConfigModel | None:
    make = getattr(cls, "example", None)
    try:
        return make() if make is not None else cls()
    except (ValidationError, TypeError):
        return None


DECLARED = [(cls, key) for cls in _all_configs() for key in cls.read_only_with]


def test_the_sweep_finds_the_declarations():
    assert DECLARED, "no read_only_with declaration found"


@pytest.mark.parametrize(("cls", "key"), DECLARED, ids=[f"{c.__name__}.{k}" for c, k in DECLARED])
def test_a_declared_knob_is_refused_exactly_where_it_is_not_read(cls, key):
    sibling, values, warn = cls.read_only_with[key]
    fields = cls.model_fields
    assert key in fields and sibling in fields, f"{cls.__name__}: read_only_with names a missing field"
    example = _example(cls)
    assert example is not None, f"{cls.__name__} has no default config to test its declaration on"
    base = example.model_dump()
    unread = [v for v in _alternatives(fields[sibling].annotation, object()) if v not in values]
    assert unread, f"{cls.__name__}.{sibling}: every value reads {key}; the declaration refuses nothing"
    knob = next(v for v in _alternatives(fields[key].annotation, getattr(example, key))
                if _valid(cls, {**base, key: v}))
    for value in values:  # read: a setting is fine
        assert not _unread(cls, {**base, sibling: value, key: knob}, warn), (sibling, value)
    for value in unread:  # not read: the setting is refused (or warned about), a default written out is not a setting
        found = _unread(cls, {**base, sibling: value, key: knob}, warn)
        assert [k for k, _, _ in found] == [key], (sibling, value, found)
        assert sibling in found[0][1] and "ignored" in found[0][1]
        assert not _unread(cls, {**base, sibling: value, key: knob}, not warn)  # one or the other, never both
        assert not _unread(cls, {**base, sibling: value}, warn)


def _valid(cls: type[BaseModel], data: dict[str, Any]) -> bool:
    try:
        cls.model_validate(data)
    except ValidationError:
        return False
    return True


def _unread(cls: type[ConfigModel], data: dict[str, Any], warn: bool) -> list[tuple[str, str, Any]]:
    config = cls.model_validate(data)
    found = config.unread_warnings() if warn else config.ignored_settings()
    return [p for p in found if p[0] in cls.read_only_with]


PATHS = registry_paths(Scenario)
SWEPT = [r for r in Registry.instances() if "<" not in PATHS.get(id(r), "<")]  # named at one plain key path


def _put(raw: dict[str, Any], path: str, value: Any) -> None:
    node = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def _base(registry: Registry, name: str) -> tuple[dict[str, Any], Any] | None:
    """A tiny scenario naming ``name`` at the registry's key path (its example), in the first setting it loads in."""
    example, path = registry.example(name), PATHS[id(registry)]
    settings = SETTINGS
    if path.startswith("protocol."):  # a protocol's own plug-in (staleness, re-clustering): a protocol that takes it
        key = path.split(".")[1]
        settings = [{**s, "protocol": PROTOCOLS.example(p).model_dump()} for p in PROTOCOLS.names()
                    if key in PROTOCOLS.get(p).model_fields for s in SETTINGS]
    for setting in settings:
        raw = deep_merge(copy.deepcopy(TINY), {**setting, "stop": {"rounds": 2, **setting.get("stop", {})}})
        _put(raw, path, example.model_dump())
        try:
            validate_raw(raw)
        except ConfigError:
            continue
        return raw, example
    return None


def test_the_sweep_covers_the_plug_in_kinds():
    assert {r.kind for r in SWEPT} >= {"protocol", "trainer", "partition", "dataset", "model", "straggler policy"}


@pytest.mark.parametrize("registry", SWEPT, ids=lambda r: r.kind)
def test_every_knob_loads_or_is_refused_with_its_key(registry):
    """Each plug-in's example, each knob at other values: a valid scenario or a ConfigError with key paths."""
    path, swept = PATHS[id(registry)], 0
    for name in registry.names():
        found = _base(registry, name)
        if found is None:  # needs a setting the sweep does not make (a file, a dataset's own split): the suites cover it
            continue
        raw, example = found
        for key, field in type(example).model_fields.items():
            if key == registry.key:
                continue
            for value in _alternatives(field.annotation, getattr(example, key)):
                trial = copy.deepcopy(raw)
                _put(trial, path, {**example.model_dump(), key: value})
                swept += 1
                try:
                    validate_raw(trial)
                except ConfigError as exc:  # any other exception fails the test: a crash, not a refusal
                    assert all(p.path for p in exc.problems), exc.report()
    # device behaviours need compromised edge servers of a hierarchy (tests/robust covers their keys)
    assert swept or registry.kind == "device behavior", f"no {registry.kind} was swept"
