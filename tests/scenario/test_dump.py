"""config.yaml's text does not depend on whether PyYAML has libyaml: the C emitter the loader uses where it
exists writes the pure-Python emitter's text."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hierfl.scenario.loader import dump_scenario, load_scenario
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not hasattr(yaml, "CSafeDumper"), reason="PyYAML without libyaml: only one emitter to compare")
@pytest.mark.parametrize("override", [
    {},
    # a long scalar (past the emitter's width), nested lists and mappings
    {"name": "a-long_scenario.name-" * 8, "topology": {"edge_servers": 2},
     "protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2}},
])
def test_the_c_emitter_writes_the_python_emitters_text(override):
    sc = tiny(**override)
    text = dump_scenario(sc)
    assert text == yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
    assert load_scenario_text(text) == sc.model_dump(mode="json")


def test_shipped_scenarios_dump_alike():
    for stem in ("hierfavg", "fedhisyn", "dp_hierfavg_edge"):
        sc = load_scenario(ROOT / "scenarios" / f"{stem}.yaml")
        assert dump_scenario(sc) == yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False), stem


def load_scenario_text(text: str) -> dict:
    return yaml.safe_load(text)
