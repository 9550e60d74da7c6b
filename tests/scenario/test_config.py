"""Scenario loading: extends, --set, and every bad input reported at once with its key path."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.scenario.loader import load_scenario
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def problems(path: Path, overrides=()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_scenario(path, overrides)
    return [p.path + " | " + p.format() for p in info.value.problems]


def test_every_shipped_scenario_validates():
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert len(files) >= 2
    for f in files:
        load_scenario(f)


def test_extends_and_set_overrides(tmp_path):
    write(tmp_path / "base.yaml", TINY)
    write(tmp_path / "child.yaml", {"extends": "base.yaml", "name": "child",
                                    "protocol": {"fraction": 0.5}, "devices": {"count": 6}})
    sc = load_scenario(tmp_path / "child.yaml", ["training.lr=0.3", "stop.rounds=7", "devices.speed_sps={dist: uniform, low: 1, high: 2}"])
    assert sc.name == "child" and sc.protocol.fraction == 0.5 and sc.devices.count == 6
    assert sc.devices.uplink_mbps.value == 0.5  # inherited
    assert sc.training.lr == 0.3 and sc.stop.rounds == 7 and sc.devices.speed_sps.dist == "uniform"
    assert load_scenario(tmp_path / "child.yaml", seed=99).seed == 99


def test_changing_plugin_name_in_child_drops_parent_keys(tmp_path):
    write(tmp_path / "base.yaml", TINY)
    write(tmp_path / "child.yaml", {"extends": "base.yaml", "protocol": {"name": "hierfavg"},
                                    "topology": {"edge_servers": 2}})
    sc = load_scenario(tmp_path / "child.yaml")
    assert sc.protocol.name == "hierfavg" and sc.protocol.fraction == 1.0


def test_all_problems_reported_at_once_with_paths(tmp_path):
    bad = {**TINY, "bogus": 1,
           "devices": {"count": 4, "uplink_mbps": -3, "speed_sps": {"dist": "uniform", "low": 0, "high": 5},
                       "latency_ms": "fast"},
           "protocol": {"name": "fedavg", "fraction": 1.5, "typo": 2},
           "training": {"epochs": 0}}
    got = problems(write(tmp_path / "s.yaml", bad))
    paths = [g.split(" | ")[0] for g in got]
    for expected in ("bogus", "devices.uplink_mbps", "devices.speed_sps", "devices.latency_ms",
                     "protocol.fraction", "protocol.typo", "training.epochs"):
        assert expected in paths, (expected, got)
    text = "\n".join(got)
    assert "unknown key" in text and "less than or equal to 1" in text and "-3" in text


def test_unknown_plugin_names_list_allowed(tmp_path):
    bad = {**TINY, "protocol": {"name": "fedmagic"}, "model": {"name": "resnet"}}
    text = "\n".join(problems(write(tmp_path / "s.yaml", bad)))
    assert "fedavg" in text and "hierfavg" in text and "protocol" in text
    assert "unknown model 'resnet'" in text and ", mlp" in text.split("unknown model")[1]


def test_cross_section_checks(tmp_path):
    bad = {**TINY, "topology": {"edge_servers": 5}}
    assert any(p.startswith("topology.edge_servers |") and "more edge servers than devices" in p
               for p in problems(write(tmp_path / "a.yaml", bad)))
    bad = {**TINY, "protocol": {"name": "hierfavg"}}
    assert any("hierfavg needs at least 1 edge server" in p for p in problems(write(tmp_path / "b.yaml", bad)))
    bad = {**TINY, "stop": {}}
    assert any(p.startswith("stop |") for p in problems(write(tmp_path / "c.yaml", bad)))


def test_file_problems(tmp_path):
    assert "not found" in problems(tmp_path / "missing.yaml")[0]
    got = problems(write(tmp_path / "broken.yaml", "name: x\ndevices: [1, 2\n"))
    assert "invalid YAML" in got[0] and "line" in got[0]
    got = problems(write(tmp_path / "list.yaml", "- 1\n- 2\n"))
    assert "mapping" in got[0]
    write(tmp_path / "loop.yaml", "extends: loop.yaml\n")
    assert "circular" in problems(tmp_path / "loop.yaml")[0]


def test_bad_set_paths(tmp_path):
    path = write(tmp_path / "s.yaml", TINY)
    assert any("seed is a value" in p for p in problems(path, ["seed.x=1"]))
    assert any("KEY.PATH=VALUE" in p for p in problems(path, ["noequals"]))
    assert any(p.startswith("protocol.nonsense |") for p in problems(path, ["protocol.nonsense=3"]))


def test_cli_exit_2_without_traceback(tmp_path, capsys):
    bad = write(tmp_path / "bad.yaml", {**TINY, "protocol": {"name": "fedavg", "fraction": 0}})
    out_dir = tmp_path / "out"
    assert main(["run", str(bad), "--out", str(out_dir)]) == 2
    err = capsys.readouterr().err
    assert "protocol.fraction" in err and "greater than 0" in err and "Traceback" not in err
    assert not out_dir.exists()  # nothing written for bad input
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert main(["run", str(write(tmp_path / "ok.yaml", TINY)), "--set", "a..b=1"]) == 2


def test_build_errors_are_config_errors(tmp_path, capsys):
    # more devices than samples: found when the data is built, still exit 2 with the key path
    bad = write(tmp_path / "s.yaml", {**TINY, "devices": {**TINY["devices"], "count": 300}})
    assert main(["validate", str(bad), "--build"]) == 2
    assert "data.partition" in capsys.readouterr().err
    cnn = write(tmp_path / "c.yaml", {**TINY, "model": {"name": "cnn"}})
    assert main(["run", str(cnn), "--out", str(tmp_path / "o")]) == 2
    assert "model: cnn needs" in capsys.readouterr().err


def test_console_script_exit_status(tmp_path):
    bad = write(tmp_path / "bad.yaml", "name: [unclosed\n")
    proc = subprocess.run([sys.executable, "-m", "hierfl.cli", "run", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid YAML" in proc.stderr and "Traceback" not in proc.stderr


def test_name_defaults_to_file_stem_and_plugin_name_shorthand(tmp_path):
    raw = {k: v for k, v in TINY.items() if k != "name"}
    raw["protocol"] = "fedavg"
    raw["model"] = "logreg"
    sc = load_scenario(write(tmp_path / "my run.yaml", raw))
    assert sc.name == "my-run" and sc.protocol.name == "fedavg" and sc.protocol.fraction == 0.1
    assert sc.model.name == "logreg"

@pytest.mark.parametrize("protocol,path,text", [
    ({"name": "fedasync", "staleness": {"name": "cubic"}}, "protocol.staleness", "polynomial"),
    ({"name": "fedasync", "alpha": 0}, "protocol.alpha", "greater than 0"),
    ({"name": "fedasync", "alpha": 1.5}, "protocol.alpha", "less than or equal to 1"),
    ({"name": "fedasync", "concurrency": 0}, "protocol.concurrency", "greater than 0"),
    ({"name": "fedbuff", "K": 5}, "protocol.K", "allowed: 1..4"),
    ({"name": "fedbuff", "concurrency": 0}, "protocol.concurrency", "greater than 0"),
    ({"name": "ahfl", "leader_period": 0}, "protocol.leader_period", "'auto' or a finite number"),
    ({"name": "ahfl", "cloud_period": -2.5}, "protocol.cloud_period", "'auto' or a finite number"),
    ({"name": "ahfl", "alpha": 2}, "protocol.alpha", "less than or equal to 1"),
])
def test_async_protocol_bad_input(tmp_path, capsys, protocol, path, text):
    topology = {"edge_servers": 2} if protocol["name"] == "ahfl" else {}
    bad = write(tmp_path / "s.yaml", {**TINY, "protocol": protocol, "topology": topology})
    got = problems(bad)
    assert any(p.startswith(path + " |") and text in p for p in got), got
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert path in err and "Traceback" not in err


def test_ahfl_needs_edge_servers(tmp_path):
    got = problems(write(tmp_path / "s.yaml", {**TINY, "protocol": {"name": "ahfl"}}))
    assert any(p.startswith("topology.edge_servers |") and "ahfl" in p for p in got)


def test_set_replaces_a_plugin_section_when_its_name_changes(tmp_path):
    path = write(tmp_path / "s.yaml", {**TINY, "topology": {"edge_servers": 2},
                                       "protocol": {"name": "hierfavg", "kappa1": 5}})
    sc = load_scenario(path, ["protocol={name: fedavg, fraction: 0.5}"])
    assert sc.protocol.name == "fedavg" and sc.protocol.fraction == 0.5  # no kappa1 leaked in
    sc = load_scenario(path, ["protocol={kappa2: 3}"])
    assert sc.protocol.kappa1 == 5 and sc.protocol.kappa2 == 3  # same plug-in: keys merge


def test_local_steps_is_an_alias_of_steps():
    from hierfl.config.errors import ConfigError as _ConfigError
    from tests.conftest import tiny as _tiny

    sc = _tiny(training={"local_steps": 7, "epochs": None})
    assert sc.training.steps == 7 and sc.training.epochs is None
    with pytest.raises(_ConfigError) as err:
        _tiny(training={"local_steps": 7, "steps": 3, "epochs": None})
    assert "training" in str(err.value) and "alias" in str(err.value)
