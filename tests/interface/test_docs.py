"""The documentation: a strict Sphinx build, tutorials that run as written, a described reference.

* The site builds with ``sphinx-build -W --keep-going -n`` (a warning or a broken cross-reference
  fails), as ``make docs`` builds it; skipped where Sphinx is not installed (the ``docs`` extra).
* Every command block of a tutorial marked ``<!-- run -->`` runs, in order, in a scratch directory
  that sees the repository's scenarios, topologies, traces and examples, so the tutorials cannot rot.
* Every scenario key and registered plug-in has a description: the generated reference would
  otherwise show an empty cell.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import hierfl_reference  # noqa: E402

HAS_SPHINX = all(importlib.util.find_spec(m) is not None for m in ("sphinx", "myst_parser"))
RUN_BLOCK = re.compile(r"<!-- run -->\s*\n```bash\n(.*?)```", re.S)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def test_every_scenario_key_and_plugin_is_described():
    missing = hierfl_reference.undocumented()
    assert not missing, "no description (add Field(description=...) or a docstring):\n" + "\n".join(missing)


def test_reference_covers_every_registered_plugin(tmp_path):
    from hierfl.config.registry import Registry

    hierfl_reference.generate(tmp_path)
    for reg in Registry.instances():
        page = (tmp_path / "plugins" / f"{hierfl_reference._slug(reg.kind)}.md").read_text(encoding="utf-8")
        for name in reg.names():
            assert f"## `{name}`" in page, f"{reg.kind} {name!r} missing from its reference page"
    scenario = (tmp_path / "scenario.md").read_text(encoding="utf-8")
    for key in ("devices.count", "topology.edge_servers", "stop.virtual_time_s", "events[].at_s"):
        assert f"| {key} |" in scenario


@pytest.mark.skipif(not HAS_SPHINX, reason="sphinx and myst-parser are not installed (pip install -e '.[docs]')")
def test_docs_build_strict(tmp_path):
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"sphinx-build failed:\n{res.stdout}\n{res.stderr}"
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "html" / "reference" / "generated" / "outputs.html").is_file()


TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))


def test_tutorials_have_run_blocks():
    with_blocks = [p.stem for p in TUTORIALS if RUN_BLOCK.search(p.read_text(encoding="utf-8"))]
    assert {"quickstart", "heterogeneity", "hierarchy"} <= set(with_blocks)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in TUTORIALS if p.stem != "index"], ids=lambda p: p.stem)
def test_tutorial_commands_run(page, tmp_path):
    for name in ("scenarios", "topologies", "traces", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    for block in RUN_BLOCK.findall(page.read_text(encoding="utf-8")):
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=_env(),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{page.name}: this block failed:\n{block}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
