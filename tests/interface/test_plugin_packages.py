"""A plug-in that is a package folder (a method laid out like the shipped ones, several modules importing each
other): loaded from its folder under the folder's name, run on the local executor and on Ray workers (which get
its files, not its path), reloaded when edited, refused with the file and line when broken, required by a
checkpoint."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from hierfl.cli import main
from hierfl.config.plugins import PluginError, bundle, install_bundle, load_plugin, loaded_plugins, require
from hierfl.plugin.testing import comparable_lines
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_method" / "my_fedavg.py"
WITH_PLUGIN = {**TINY, "protocol": {"name": "my_fedavg", "clients": 3}, "straggler": {"name": "quorum", "share": 0.6},
               "stop": {"virtual_time_s": 4.0}}


def _package(tmp_path: Path, name: str = "nudge_method") -> Path:
    """The tutorial's plug-in split into a package: ``__init__`` imports ``protocol`` (relative), which imports
    ``helpers`` by the package's own name (absolute), as an installed package's modules would."""
    folder = tmp_path / "mine" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""My method."""\nHIERFL_API = "1"\nfrom . import protocol  # noqa: F401\n')
    (folder / "helpers.py").write_text("NOTE = 'shared by the modules of the package'\n")
    (folder / "protocol.py").write_text(EXAMPLE.read_text() + f"\nfrom {name}.helpers import NOTE  # noqa: E402,F401\n")
    assert ROOT not in folder.resolve().parents
    return folder


def _scenario(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_a_package_folder_loads_under_its_name_with_its_modules(tmp_path):
    folder = _package(tmp_path)
    ref = load_plugin(str(folder))
    assert (ref.kind, ref.module, ref.path) == ("package", "nudge_method", str(folder.resolve()))
    assert "nudge_method.protocol" in sys.modules and "nudge_method.helpers" in sys.modules
    from hierfl.protocols.base import PROTOCOLS

    assert PROTOCOLS.get("my_fedavg").__module__ == "nudge_method.protocol"
    assert set(json.loads(ref.source)) == {"__init__.py", "helpers.py", "protocol.py"}
    assert load_plugin(str(folder)) is ref  # idempotent
    assert [r.module for r in loaded_plugins()].count("nudge_method") == 1


def test_cli_run_with_a_package_folder(tmp_path, capsys):
    folder = _package(tmp_path)
    out = tmp_path / "run"
    assert main(["run", str(_scenario(tmp_path, WITH_PLUGIN)), "--plugin", str(folder), "--out", str(out), "-q"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["plugins"] == [str(folder.resolve())]
    closes = [x for x in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if x["event"] == "round_close"]
    assert closes and all(x["policy"] == "quorum" for x in closes)
    capsys.readouterr()


@pytest.mark.ray
def test_a_package_folder_runs_on_ray_with_the_local_bits(tmp_path, ray_session):
    import hierfl

    folder = _package(tmp_path)
    local = hierfl.run(dict(WITH_PLUGIN), plugins=[str(folder)], out=tmp_path / "local")
    on_ray = hierfl.run({**WITH_PLUGIN, "runtime": {"executor": "ray", "workers": 2}}, plugins=[str(folder)],
                        out=tmp_path / "ray")
    assert local.summary["rounds"] > 0 and on_ray.summary["executor"] == "ray"
    assert comparable_lines(tmp_path / "local") == comparable_lines(tmp_path / "ray")
    assert (np.load(tmp_path / "local" / "final_model.npy").tobytes()
            == np.load(tmp_path / "ray" / "final_model.npy").tobytes())


def test_a_worker_without_the_folder_builds_it_from_the_bundle(tmp_path):
    """What a Ray worker on another node does: it has the bundle, not the folder."""
    folder = _package(tmp_path)
    load_plugin(str(folder))
    items = [dict(item) for item in bundle() if item["kind"] == "package"]
    assert len(items) == 1 and items[0]["source"]
    shutil.rmtree(folder)  # not on this "node"
    from hierfl.config import plugins

    plugins._forget(plugins._LOADED["nudge_method"])  # a fresh worker: nothing of it imported or registered
    assert "nudge_method" not in sys.modules
    install_bundle(items)
    from hierfl.protocols.base import PROTOCOLS

    where = Path(sys.modules["nudge_method"].__file__)
    assert where.name == "__init__.py" and "hierfl_plugins" in where.parts and where.parent.name == "nudge_method"
    assert PROTOCOLS.get("my_fedavg").__module__ == "nudge_method.protocol"


def test_an_edited_package_replaces_its_old_version(tmp_path):
    folder = _package(tmp_path)
    first = load_plugin(str(folder))
    (folder / "helpers.py").write_text("NOTE = 'edited'\n")
    second = load_plugin(str(folder))
    assert second.sha256 != first.sha256
    assert sys.modules["nudge_method.helpers"].NOTE == "edited"


def test_a_broken_package_exits_2_naming_its_file_and_line(tmp_path, capsys):
    folder = _package(tmp_path)
    (folder / "helpers.py").write_text("NOTE = 1\nraise RuntimeError('half-written')\n")
    assert main(["validate", str(_scenario(tmp_path, TINY)), "--plugin", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{folder.resolve()}: import failed: RuntimeError: half-written (helpers.py line 2: " in err, err
    from hierfl.protocols.base import PROTOCOLS

    assert "my_fedavg" not in PROTOCOLS  # nothing half-registered
    assert "nudge_method" not in sys.modules


def test_a_folder_without_init_or_with_a_bad_name_is_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(PluginError, match="folder without __init__.py"):
        load_plugin(str(plain))
    bad = tmp_path / "my-method"
    bad.mkdir()
    (bad / "__init__.py").write_text("")
    with pytest.raises(PluginError, match="'my-method' is not a valid one"):
        load_plugin(str(bad))


def test_a_checkpoint_requires_the_same_package(tmp_path):
    from hierfl.config.plugins import isolated

    folder = _package(tmp_path)
    with isolated():  # the run that wrote the checkpoint; the resuming process starts without it
        ref = load_plugin(str(folder)).without_source()
    assert "nudge_method" not in sys.modules
    with isolated():
        assert require([ref], "the checkpoint") == []  # loads it again from its folder
        assert sys.modules["nudge_method"].__file__ == str(folder.resolve() / "__init__.py")
    (folder / "protocol.py").write_text((folder / "protocol.py").read_text() + "\n# edited\n")
    changed = require([ref], "the checkpoint")
    assert len(changed) == 1 and "its files have changed since" in changed[0]
    shutil.rmtree(folder)
    missing = require([ref], "the checkpoint")
    assert len(missing) == 1 and "folder not found" in missing[0] and "--plugin" in missing[0]


def test_a_folder_given_by_its_bare_name_gets_a_hint(tmp_path, monkeypatch):
    folder = _package(tmp_path)
    monkeypatch.chdir(folder.parent)
    with pytest.raises(PluginError, match=r"the folder nudge_method/ is here: give its path, \./nudge_method/"):
        load_plugin("nudge_method")
    assert load_plugin("./nudge_method/").kind == "package"
