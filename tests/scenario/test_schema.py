"""hierfl schema: the JSON Schema accepts every shipped scenario (as written, and merged with what it
extends) and rejects what the loader rejects, with the key path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hierfl.cli import main
from hierfl.scenario.jsonschema import scenario_json_schema
from hierfl.scenario.loader import load_raw

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator():
    schema = scenario_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, data):
    return [("/".join(map(str, e.absolute_path)), e.message) for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_every_shipped_scenario_validates(validator, path):
    merged = load_raw(path)
    if merged.get("plugins"):  # its plug-ins' names are in the schema `hierfl schema --plugin …` prints
        from hierfl.config.plugins import isolated, load_plugins

        with isolated():
            load_plugins(merged["plugins"], base_dir=path.parent)
            schema = scenario_json_schema()
        validator = jsonschema.Draft202012Validator(schema)
        assert _errors(validator, {**merged, "protocol": {"name": "no_such_protocol"}}) != []
    assert _errors(validator, yaml.safe_load(path.read_text(encoding="utf-8"))) == []  # what an editor sees
    assert _errors(validator, merged) == []  # the merged scenario the loader validates


def test_a_plugins_names_are_in_the_schema_only_with_the_plugin():
    """Without its plug-in a scenario naming a plug-in's protocol is refused (an editor's schema knows the shipped
    names); `hierfl schema --plugin` gives the schema that accepts it."""
    merged = load_raw(ROOT / "scenarios" / "own_method.yaml")
    plain = jsonschema.Draft202012Validator(scenario_json_schema())
    assert [p for p, _ in _errors(plain, merged)] == ["protocol", "straggler"]  # my_fedavg, quorum


def test_the_schema_rejects_what_the_loader_rejects(validator):
    base = load_raw(ROOT / "scenarios" / "quickstart.yaml")
    assert len(SCENARIOS) >= 40
    bad = {**base, "protocol": {**base["protocol"], "fracton": 0.5}}
    assert [p for p, _ in _errors(validator, bad)] == ["protocol"]
    bad = {**base, "devices": {**base["devices"], "count": 0}}
    assert _errors(validator, bad) == [("devices/count", "0 is less than or equal to the minimum of 0")]
    missing = {k: v for k, v in base.items() if k != "stop"}
    assert _errors(validator, missing) == [("", "'stop' is a required property")]
    # with extends a file gives only what it changes, but what it gives is checked
    assert _errors(validator, {"extends": "quickstart.yaml", "straggler": {"name": "deadline"}}) == []
    assert [p for p, _ in _errors(validator, {"extends": "q.yaml", "devices": {"count": -1}})] == ["devices/count"]
    # shorthands: a plug-in by name, a distribution by a number
    assert _errors(validator, {**base, "protocol": "fedavg", "devices": {"count": 3, "uplink_mbps": 5}}) == []
    assert [p for p, _ in _errors(validator, {**base, "protocol": "fedavgg"})] == ["protocol"]


def test_hierfl_schema_prints_it(tmp_path, capsys):
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(scenario_json_schema()))
    assert "extends" in printed["$defs"]["Scenario"]["properties"]
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == printed


def test_the_cluster_launcher_example_is_valid_for_ray_and_installs_hierfl():
    import os

    import ray

    schema = json.loads(Path(os.path.dirname(ray.__file__), "autoscaler", "ray-schema.json").read_text())
    config = yaml.safe_load((ROOT / "cluster" / "aws.yaml").read_text())
    jsonschema.validate(config, schema)  # Ray's own schema of cluster launcher files
    assert any('pip install -q -e "~/hierfl[tune,cluster]"' in c for c in config["setup_commands"])
    assert config["file_mounts"] == {"~/hierfl": "."}
