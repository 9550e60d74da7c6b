"""The compiled event path (``hierfl native build``): used only for its own source, outputs unchanged."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hierfl import _native
from tests.golden import bit_differences, contract_outputs, overrides

ROOT = Path(__file__).resolve().parents[2]


def _can_build() -> bool:
    return importlib.util.find_spec("Cython") is not None and shutil.which(os.environ.get("CC", "cc")) is not None


def _manifest_for(tmp_path: Path, sha: str, make_file: bool = True) -> _native._Finder:
    name = "hierfl.core.engine"
    so = tmp_path / f"{name}{_native._suffix()}"
    if make_file:
        so.write_bytes(b"not loaded by find_spec")
    return _native._Finder({"modules": {name: {"file": so.name, "sha256": sha}}}, tmp_path)


def test_an_extension_is_found_only_for_the_source_it_was_built_from(tmp_path):
    name = "hierfl.core.engine"
    real = _native._sha256(_native.source_of(name))
    finder = _manifest_for(tmp_path, real)
    spec = finder.find_spec(name)
    assert spec is not None and spec.origin == str(tmp_path / f"{name}{_native._suffix()}")
    assert isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
    assert finder.find_spec("hierfl.core.rng") is None          # not a hot module: the normal import
    stale = _manifest_for(tmp_path, "0" * 64)                    # the source was edited since the build
    assert stale.find_spec(name) is None and stale.stale == [name]
    missing = _manifest_for(tmp_path / "absent", real, make_file=False)
    assert missing.find_spec(name) is None


def test_every_hot_module_exists_and_is_pure_python_source():
    for name in _native.HOT:
        assert _native.source_of(name).is_file(), name


def _origins(env: dict[str, str]) -> dict[str, str]:
    code = ("import json, hierfl.driver, hierfl.output.telemetry\nfrom hierfl import _native\n"
            "print(json.dumps(_native.status()['modules']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_hierfl_native_0_imports_every_module_from_its_source():
    env = {**os.environ, "HIERFL_NATIVE": "0"}
    assert set(_origins(env).values()) == {"python"}


@pytest.mark.skipif(not _can_build(), reason="no Cython or no C compiler: the pure-Python path is used")
def test_the_build_is_there_and_used_where_it_can_be_built():
    # `make install` builds it: with Cython and a compiler here, every hot module must come compiled
    manifest = _native.read_manifest()
    assert manifest is not None and not manifest.get("error"), manifest
    assert sorted(manifest["modules"]) == sorted(_native.HOT)
    env = {k: v for k, v in os.environ.items() if k != "HIERFL_NATIVE"}
    assert _origins(env) == {name: "compiled" for name in _native.HOT}


def _run(scenario: str, out: Path, native: bool) -> dict[str, bytes]:
    env = {**os.environ, "HIERFL_NATIVE": "1" if native else "0"}
    cmd = [sys.executable, "-m", "hierfl.cli", "run", str(ROOT / "scenarios" / scenario), "--out", str(out), "-q"]
    for o in overrides("local"):
        cmd += ["--set", o]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
    return contract_outputs(out)


@pytest.mark.skipif(not (_native.read_manifest() or {}).get("modules"), reason="the event path is not compiled here")
@pytest.mark.parametrize("scenario", ["hierfavg_contention.yaml", "churn.yaml"])
def test_compiled_and_python_runs_write_the_same_bytes(tmp_path, scenario):
    # shared links (flows attached and detached), devices going offline mid-transfer
    diffs = bit_differences(_run(scenario, tmp_path / "c", True), _run(scenario, tmp_path / "p", False))
    assert not diffs, "\n".join(diffs)


def test_cli_native_status_names_every_hot_module(capsys):
    from hierfl.cli import main

    assert main(["native", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("compiled event path: ")
    for name in _native.HOT:
        assert name in out
