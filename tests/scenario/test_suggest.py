"""Misspelt keys and plug-in names get "did you mean", and a name of another registry says where it goes.

The suites walk the schema and the registries, so every key and every registered name is covered as
soon as it exists; nothing here lists keys or names.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import hierfl.scenario  # noqa: F401  (assembles the schema: every plug-in is registered)
from hierfl.config.base import ConfigModel
from hierfl.config.errors import ConfigError
from hierfl.config.registry import Registry
from hierfl.learn.trainers import TRAINERS
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.loader import deep_merge, validate_raw
from hierfl.scenario.schema import Scenario
from hierfl.scenario.suggest import registry_paths
from tests.badinput import assert_refused
from tests.conftest import TINY


def _raw(**override: Any) -> dict[str, Any]:
    return deep_merge(copy.deepcopy(TINY), override)


def _problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    return {p.path: p.message for p in info.value.problems}


def _typo(word: str) -> str:
    """``word`` with its last two letters swapped (or one added to a short word)."""
    return word[:-2] + word[-1] + word[-2] if len(word) >= 4 and word[-1] != word[-2] else word + "x"


def test_the_cli_suggests_the_key_meant(tmp_path, capsys):
    raw = _raw()
    raw["devices"]["cuont"] = raw["devices"].pop("count")
    assert_refused(tmp_path, capsys, raw, "devices.cuont")
    problems = _problems(raw)
    assert "did you mean 'count'?" in problems["devices.cuont"]
    assert "allowed: count, speed_sps" in problems["devices.cuont"]


def test_a_trainer_given_as_a_protocol_says_where_it_goes(tmp_path, capsys):
    message = _problems(_raw(protocol={"name": "scaffold"}))["protocol"]
    assert "'scaffold' is a trainer (training.trainer), not a protocol" in message
    assert all(name in message for name in PROTOCOLS.names())
    assert_refused(tmp_path, capsys, _raw(protocol="scaffold"), "training.trainer")


def test_a_name_in_other_case_is_a_misspelling_not_another_kind():
    message = _problems(_raw(protocol={"name": "FedAvg"}))["protocol"]
    assert "did you mean 'fedavg'" in message and "server optimizer" not in message


def _sections() -> list[tuple[str, type[ConfigModel]]]:
    """Every section of the schema that is one model (not a plug-in union), by key path."""
    return [(key, field.annotation) for key, field in Scenario.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, ConfigModel)]


@pytest.mark.parametrize(("section", "cls"), _sections(), ids=[k for k, _ in _sections()])
def test_every_key_of_every_section_is_suggested(section, cls):
    for key in cls.model_fields:
        if len(key) < 3:
            continue
        raw = _raw()
        raw[section] = {**raw.get(section, {}), _typo(key): 1}
        message = _problems(raw)[f"{section}.{_typo(key)}"]
        assert f"'{key}'" in message.split("allowed:")[0], message


@pytest.mark.parametrize("name", PROTOCOLS.names())
def test_every_key_of_every_protocol_is_suggested(name):
    example = PROTOCOLS.example(name).model_dump()
    for key in PROTOCOLS.get(name).model_fields:
        if key == "name" or len(key) < 3:
            continue
        problems = _problems(_raw(protocol={**example, _typo(key): 1}))
        message = problems[f"protocol.{_typo(key)}"]
        assert f"'{key}'" in message.split("allowed:")[0], message


@pytest.mark.parametrize("registry", Registry.instances(), ids=lambda r: r.kind)
def test_every_name_of_every_registry_is_suggested(registry):
    for name in registry.names():
        typo = _typo(name)
        if typo in registry:
            continue
        message = registry.unknown(typo)
        assert "did you mean" in message and repr(name) in message.split("allowed:")[0], message


@pytest.mark.parametrize("registry", Registry.instances(), ids=lambda r: r.kind)
def test_a_name_of_another_registry_names_its_kind(registry):
    for other in Registry.instances():
        for name in other.names():
            if other is registry or any(n.lower() == name.lower() for n in registry.names()):
                continue
            message = registry.unknown(name)
            assert f"{name!r} is a {other.kind}" in message.split("allowed:")[0], message


def test_registries_named_in_the_schema_have_their_key_path():
    paths = registry_paths(Scenario)
    assert paths[id(PROTOCOLS)] == "protocol"
    assert paths[id(TRAINERS)] == "training.trainer"


def test_a_misspelt_tier_is_suggested():
    raw = _raw()
    raw["devices"] = {"count": 4, "tiers": {"phone_hihg": 1.0}}
    message = _problems(raw)["devices.tiers.phone_hihg"]
    assert "did you mean 'phone_high'" in message
