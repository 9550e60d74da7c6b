"""The Python API: hierfl.run / load_run give the run's summary and frames; the walkthrough example runs."""

from __future__ import annotations

import json
import os
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest

import hierfl
from hierfl.config.errors import ConfigError
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


def test_run_returns_frames_equal_to_the_files(tmp_path):
    r = hierfl.run(TINY, overrides=["protocol.fraction=0.5"], seed=9, out=tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["event"] == "eval"]
    assert r.summary == json.loads((tmp_path / "run" / "summary.json").read_text())
    assert r.summary["seed"] == 9 and r.config["protocol"]["fraction"] == 0.5
    assert list(r.evals["accuracy"]) == [e["accuracy"] for e in evals]
    assert list(r.evals["t"]) == [e["t"] for e in evals] and len(r.events) == len(lines)
    assert r.evals["accuracy"].iloc[-1] == r.summary["final_accuracy"]
    assert list(r.devices["device"]) == [0, 1, 2, 3] and r.clusters is None  # flat: no clusters frame
    # without out=: the same numbers, nothing left behind
    r2 = hierfl.run(TINY, overrides=["protocol.fraction=0.5"], seed=9)
    assert r2.dir is None and r2.summary["final_accuracy"] == r.summary["final_accuracy"]
    assert np.array_equal(r2.evals["loss"].to_numpy(), r.evals["loss"].to_numpy())
    loaded = hierfl.load_run(tmp_path / "run")
    assert loaded.summary == r.summary and loaded.evals.equals(r.evals)


def test_clusters_frame_and_bad_input(tmp_path):
    r = hierfl.run(TINY, overrides=["topology.edge_servers=2", "protocol={name: hierfavg, kappa1: 2, kappa2: 1}"])
    assert sorted(r.clusters["device"]) == [0, 1, 2, 3] and set(r.clusters["cluster"]) == {0, 1}
    with pytest.raises(ConfigError, match="protocol.fraction"):
        hierfl.run(TINY, overrides=["protocol.fraction=3"])
    with pytest.raises(ValueError, match="file not found"):
        hierfl.load_run(tmp_path)


def test_the_walkthrough_example_runs(tmp_path, capsys):
    # the notebook-style example, run as a script from a copy of the repository layout it expects
    (tmp_path / "scenarios").mkdir()
    shutil.copy(ROOT / "scenarios" / "hierfavg.yaml", tmp_path / "scenarios")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        runpy.run_path(str(ROOT / "examples" / "api_walkthrough.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "RunResultFrames('hierfavg', status='completed'" in out and "first >= 0.5 at t =" in out
    assert (tmp_path / "runs" / "api_walkthrough" / "summary.json").is_file()


def test_overrides_take_a_mapping_of_python_values(tmp_path):
    # the same run as the --set strings; a mapping's values are taken as they are (no YAML round trip)
    by_text = hierfl.run(TINY, overrides=["protocol.fraction=0.5", "stop.rounds=2"], seed=4)
    by_map = hierfl.run(TINY, overrides={"protocol.fraction": np.float64(0.5), "stop.rounds": 2}, seed=4)
    assert by_map.config["protocol"]["fraction"] == 0.5 and by_map.summary["rounds"] == 2
    assert by_map.summary["final_accuracy"] == by_text.summary["final_accuracy"]
    # from a file, with a whole section, None and a key that leads into a new section
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(TINY))
    r = hierfl.run(path, overrides={"stop": {"rounds": None, "virtual_time_s": 3.0},
                                    "straggler": {"name": "deadline", "seconds": 2.5}})
    assert r.config["stop"]["virtual_time_s"] == 3.0 and r.config["stop"]["rounds"] is None
    assert (r.config["straggler"]["name"], r.config["straggler"]["seconds"]) == ("deadline", 2.5)
    from hierfl.scenario.loader import apply_overrides, load_scenario

    # a str value stays a str (pydantic judges it), a tuple becomes a list, one string is one override
    assert apply_overrides({}, {"a.b": "1e3", "c": (1, 2)}) == {"a": {"b": "1e3"}, "c": [1, 2]}
    assert load_scenario(path, "stop.rounds=5").stop.rounds == 5


@pytest.mark.parametrize("bad, words", [
    (5, ["unsupported type int", "a mapping", "'KEY.PATH=VALUE' strings"]),
    ({"stop.rounds=2"}, ["unsupported type set", "a mapping"]),
    ({"stop.rounds": {1, 2}}, ["stop.rounds", "unsupported value type set", "None, bool, int, float, str"]),
    ({"devices": {"speed_sps": object()}}, ["devices.speed_sps", "unsupported value type object"]),
    ({3: 1}, ["dotted key path"]),
    (["stop.rounds=2", 7], ["a list item must be a 'KEY.PATH=VALUE' string, got int 7", "a mapping"]),
    ({"stop.rounds.x": 1}, ["stop.rounds.x", "stop.rounds is a value, not a section"]),
])
def test_bad_overrides_say_what_is_accepted(bad, words):
    with pytest.raises(ConfigError) as info:
        hierfl.run(TINY, overrides=bad)
    text = info.value.report()
    assert all(w in text for w in words), text


def test_the_api_is_listed_and_says_which_executor_runs(tmp_path):
    assert {"run", "load_run", "sweep", "load_sweep", "RunResultFrames"} <= set(dir(hierfl))
    doc = hierfl.run.__doc__ or ""
    assert "runtime.executor" in doc and "Ray" in doc and 'executor="local"' in doc
    # executor= takes the place of the scenario's runtime.executor, with any form of overrides
    ray_scenario = {**TINY, "runtime": {"executor": "ray"}}
    for overrides in (None, (), ["stop.rounds=1"], {"stop.rounds": 1}, "stop.rounds=1"):
        r = hierfl.run(ray_scenario, overrides=overrides, executor="local", out=tmp_path / f"run{len(str(overrides))}")
        assert r.summary["executor"] == "local" and r.config["runtime"]["executor"] == "local"
    with pytest.raises(ConfigError, match="runtime.executor"):
        hierfl.run(TINY, executor="nowhere")


def test_the_readme_api_example_runs_on_the_local_executor():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API"):]
    code = section[section.index("```python\n") + len("```python\n"):]
    code = code[:code.index("```")]
    assert 'executor="local"' in code and "hierfl.run(" in code
