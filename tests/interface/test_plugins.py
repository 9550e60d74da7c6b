"""User plug-ins from their own files: every route that loads one, Ray workers, errors, checkpoints, entry points.

The plug-in is the tutorial's file (``examples/own_method/my_fedavg.py``: a FedAvg variant and a
straggler policy written only against :mod:`hierfl.plugin`), copied to a folder outside the
checkout, so nothing here can import it from the repository.
"""

from __future__ import annotations

import re

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.plugin.testing import comparable_lines
from hierfl.scenario.loader import load_scenario, validate_raw
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_method" / "my_fedavg.py"

# the plug-in's protocol and policy, on the tiny scenario
WITH_PLUGIN = {**TINY, "protocol": {"name": "my_fedavg", "clients": 3}, "straggler": {"name": "quorum", "share": 0.6},
               "stop": {"virtual_time_s": 4.0}}


def _outside(tmp_path: Path) -> Path:
    """The plug-in file, in a folder of its own outside the checkout."""
    folder = tmp_path / "mine"
    folder.mkdir(exist_ok=True)
    path = folder / "my_fedavg.py"
    shutil.copy(EXAMPLE, path)
    assert ROOT not in path.resolve().parents
    return path


def _scenario(tmp_path: Path, raw: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _same_bits(a: Path, b: Path) -> None:
    assert comparable_lines(a) == comparable_lines(b)
    assert np.load(a / "final_model.npy").tobytes() == np.load(b / "final_model.npy").tobytes()


def test_cli_flag_loads_the_plugin_and_the_run_records_it(tmp_path, capsys):
    plugin = _outside(tmp_path)
    scen = _scenario(tmp_path, WITH_PLUGIN)
    out = tmp_path / "run"
    assert main(["run", str(scen), "--plugin", str(plugin), "--out", str(out), "-q"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["plugins"] == [str(plugin.resolve())]  # the resolved scenario runs again from anywhere
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    closes = [x for x in lines if x["event"] == "round_close"]
    assert closes and all(x["policy"] == "quorum" for x in closes)
    assert main(["validate", str(out / "config.yaml")]) == 0
    capsys.readouterr()


def test_scenario_key_is_relative_to_the_scenario_file(tmp_path, monkeypatch):
    plugin = _outside(tmp_path)
    sub = tmp_path / "scenarios"
    sub.mkdir()
    scen = _scenario(sub, {**WITH_PLUGIN, "plugins": [f"../{plugin.parent.name}/{plugin.name}"]})
    monkeypatch.chdir(ROOT)  # not the scenario's folder
    sc = load_scenario(scen)
    assert sc.plugins == [str(plugin.resolve())] and sc.protocol.name == "my_fedavg" and sc.straggler.share == 0.6


@pytest.mark.ray
def test_python_api_runs_it_locally_and_on_ray_with_the_same_bits(tmp_path, ray_session):
    import hierfl

    plugin = _outside(tmp_path)
    local = hierfl.run(dict(WITH_PLUGIN), plugins=[plugin], out=tmp_path / "local")
    on_ray = hierfl.run({**WITH_PLUGIN, "runtime": {"executor": "ray", "workers": 2}}, plugins=[str(plugin)],
                        out=tmp_path / "ray")
    assert local.summary["rounds"] > 0 and on_ray.summary["executor"] == "ray"
    _same_bits(tmp_path / "local", tmp_path / "ray")


def test_an_unknown_name_lists_the_plugins_names(tmp_path):
    validate_raw(dict(WITH_PLUGIN), plugins=[str(_outside(tmp_path))])
    with pytest.raises(ConfigError) as err:
        validate_raw({**WITH_PLUGIN, "protocol": {"name": "my_fedavgg"}, "straggler": {"name": "quorumm"}})
    text = err.value.report()
    assert "protocol:" in text and "'my_fedavg'" in text and "'fedavg'" in text
    assert "straggler policy 'quorumm'; did you mean 'quorum'?" in text
    assert re.search(r"allowed: deadline, [a-z_, ]*\bquorum\b", text)
    with pytest.raises(ConfigError, match=r"protocol.clients: Input should be greater than or equal to 1"):
        validate_raw({**WITH_PLUGIN, "protocol": {"name": "my_fedavg", "clients": 0}})


def test_a_plugin_registers_into_a_registry_nested_in_protocol_configs(tmp_path):
    stale = tmp_path / "stale.py"
    stale.write_text(textwrap.dedent('''
        from typing import Literal
        from hierfl.plugin import STALENESS, StalenessConfig

        @STALENESS.register
        class Halving(StalenessConfig):
            """``{name: halving}``: s(tau) = 2^-tau."""
            name: Literal["halving"] = "halving"
            def __call__(self, tau: int) -> float:
                return 0.5 ** tau
    '''))
    raw = {**TINY, "protocol": {"name": "fedasync", "staleness": {"name": "halving"}}}
    sc = validate_raw(raw, plugins=[str(stale)])
    assert sc.protocol.staleness(2) == 0.25
    with pytest.raises(ConfigError, match="halving"):  # the nested union's allowed names include it
        validate_raw({**raw, "protocol": {"name": "fedasync", "staleness": {"name": "nope"}}})


BAD = {
    "import": ("x = 1\ny = 1 / 0\n", ["import failed: ZeroDivisionError: division by zero", "line 2: y = 1 / 0"]),
    "syntax": ("def f(:\n", ["import failed: SyntaxError", "line 1"]),
    "taken": (textwrap.dedent('''
        from typing import Literal
        from hierfl.plugin import PROTOCOLS, STRAGGLERS, ProtocolConfig, StragglerPolicy

        @STRAGGLERS.register
        class Early(StragglerPolicy):
            name: Literal["early_bird"] = "early_bird"

        @PROTOCOLS.register
        class Mine(ProtocolConfig):
            name: Literal["fedavg"] = "fedavg"
    '''), ["registers a name already taken: protocol 'fedavg' is already registered (by hierfl.methods.fedavg.protocol)"]),
    "api": ('HIERFL_API = "2"\n', ["written for plug-in API 2 (HIERFL_API)", "provides API 1.5"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_plugin_exits_2_naming_the_file_and_the_reason(tmp_path, capsys, case):
    source, expected = BAD[case]
    plugin = tmp_path / f"bad_{case}.py"
    plugin.write_text(source)
    scen = _scenario(tmp_path, TINY)
    assert main(["validate", str(scen), "--plugin", str(plugin)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"--plugin[0]: {plugin.resolve()}: " in err, err
    for part in expected:
        assert part in err, err
    from hierfl.policies.straggler import STRAGGLERS

    assert "early_bird" not in STRAGGLERS  # a plug-in that fails part-way leaves nothing registered


def test_plugin_errors_in_a_scenario_are_keyed_by_their_index(tmp_path, capsys):
    scen = _scenario(tmp_path, {**TINY, "plugins": ["nowhere.py", "no_such_module_here", 3]})
    assert main(["validate", str(scen)]) == 2
    err = capsys.readouterr().err
    assert f"{scen}: plugins[0]: {tmp_path / 'nowhere.py'}: file not found" in err
    assert "plugins[1]: no_such_module_here: no such module" in err
    assert "plugins[2]: expected a file path or a module name (got 3)" in err
    assert main(["run", str(_scenario(tmp_path, TINY, "t.yaml")), "--plugin", "gone.py"]) == 2
    assert "command line: --plugin[0]: " in capsys.readouterr().err


@pytest.mark.slow  # several seconds: make test runs it, make test-fast leaves it out
def test_resume_needs_the_plugins_the_checkpoint_recorded(tmp_path):
    from hierfl.driver import run_scenario

    plugin = _outside(tmp_path)
    sc = validate_raw({**WITH_PLUGIN, "runtime": {"executor": "local", "checkpoint": {"every_cloud_aggregations": 1}}},
                      plugins=[str(plugin)])
    out = tmp_path / "run"

    def stop_half_way(t: float, rounds: int, acc: float | None) -> None:
        if t >= 2.0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, out, progress=stop_half_way)
    assert (out / "checkpoint.pkl").is_file()
    moved = tmp_path / "elsewhere" / "renamed.py"
    moved.parent.mkdir()
    shutil.move(plugin, moved)
    cli = [sys.executable, "-m", "hierfl.cli", "resume", str(out), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    missing = subprocess.run(cli, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert f"needs the plug-in {plugin.resolve()}" in missing.stderr and "missing" in missing.stderr
    assert "--plugin" in missing.stderr  # says how to give it
    # the same content from another place, under another name, is the same plug-in (same hash)
    again = subprocess.run([*cli, "--plugin", str(moved)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_installed_entry_points_register_before_validation(tmp_path):
    site = tmp_path / "site"
    (site / "fake_hierfl_ext-1.0.dist-info").mkdir(parents=True)
    (site / "fake_hierfl_ext-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-hierfl-ext\n"
                                                                     "Version: 1.0\n")
    (site / "fake_hierfl_ext-1.0.dist-info" / "entry_points.txt").write_text(
        "[hierfl.plugins]\nhalf = fake_hierfl_ext:register\n")
    (site / "fake_hierfl_ext.py").write_text(textwrap.dedent('''
        from typing import Literal

        def register():
            from hierfl.plugin import STRAGGLERS, StragglerPolicy

            @STRAGGLERS.register
            class Half(StragglerPolicy):
                """``straggler: ep_half``: close when half the round is in."""
                name: Literal["ep_half"] = "ep_half"
                def needed(self, selected, wanted):
                    return max(1, selected // 2)
    '''))
    code = textwrap.dedent(f'''
        from hierfl.scenario.loader import validate_raw
        from hierfl.config.plugins import loaded_plugins
        import json
        raw = json.loads({json.dumps(json.dumps(TINY))})
        raw["straggler"] = "ep_half"
        print(validate_raw(raw).straggler.name, [r.kind for r in loaded_plugins()])
    ''')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ep_half", "['entry_point']"]
    # a broken one stops the command with status 2, naming the entry point and the reason
    (site / "fake_hierfl_ext-1.0.dist-info" / "entry_points.txt").write_text(
        "[hierfl.plugins]\nhalf = fake_hierfl_ext:no_such_function\n")
    scen = _scenario(tmp_path, TINY)
    bad = subprocess.run([sys.executable, "-m", "hierfl.cli", "validate", str(scen)], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "entry point hierfl.plugins: half = fake_hierfl_ext:no_such_function: import failed: AttributeError" \
        in bad.stderr, bad.stderr


def test_check_fails_a_nondeterministic_plugin_and_refuses_a_missing_one(tmp_path, capsys):
    coin = tmp_path / "coin.py"
    coin.write_text(textwrap.dedent('''
        import random
        from typing import Literal
        from hierfl.plugin import STRAGGLERS, StragglerPolicy

        @STRAGGLERS.register
        class Coin(StragglerPolicy):
            """``straggler: coin``: closes a round after a random number of arrivals (global RNG: wrong)."""
            name: Literal["coin"] = "coin"
            def needed(self, selected, wanted):
                return random.randint(1, selected)
    '''))
    assert main(["check", str(coin), "--no-ray", "-q"]) == 1
    out = capsys.readouterr().out
    assert "straggler policy coin  repeatable    FAIL" in out and "coin.py: FAIL (" in out, out
    assert main(["check", str(tmp_path / "absent.py")]) == 2
    assert "file not found" in capsys.readouterr().err
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert main(["check", str(tmp_path / "empty.py")]) == 2
    assert "registers nothing" in capsys.readouterr().err


def test_a_file_edited_since_it_was_loaded_replaces_its_old_names(tmp_path):
    # a notebook: run, edit the plug-in, run again in the same process
    plugin = tmp_path / "edited.py"
    text = textwrap.dedent('''
        from typing import Literal
        from hierfl.plugin import STRAGGLERS, StragglerPolicy

        @STRAGGLERS.register
        class Policy(StragglerPolicy):
            """``straggler: first_draft``."""
            name: Literal["first_draft"] = "first_draft"
    ''')
    plugin.write_text(text)
    assert validate_raw({**TINY, "straggler": "first_draft"}, plugins=[str(plugin)]).straggler.name == "first_draft"
    plugin.write_text(text.replace("first_draft", "second_draft"))
    sc = validate_raw({**TINY, "straggler": "second_draft"}, plugins=[str(plugin)])
    assert sc.straggler.name == "second_draft" and sc.plugins == [str(plugin.resolve())]
    with pytest.raises(ConfigError, match="second_draft"):  # the old name is gone, the new one listed
        validate_raw({**TINY, "straggler": "first_draft"})
