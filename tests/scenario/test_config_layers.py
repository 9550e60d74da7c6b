"""Config at both ends: the layer rules of the config bottom, the core, the scenario top and the plug-ins.

* ``hierfl.config`` (base, errors, registry, files) imports nothing of hierfl outside itself;
* the core — and every feature's ``math`` module, which is core — imports neither config,
  pydantic, the registry, torch nor Ray;
* loading a scenario imports neither torch nor Ray;
* there are no import cycles between hierfl's packages (``if TYPE_CHECKING:`` imports aside); a
  module of a feature package counts as the layer of its role (``tests/interface/test_layers.py``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

from tests.interface.test_layers import FEATURES, layer_of

PACKAGE = Path(__file__).resolve().parents[2] / "hierfl"
# a feature's math: its math.py, or the modules of its math/ package
CORE_FILES = sorted((PACKAGE / "core").glob("*.py")) + [
    p for f in FEATURES for p in ([PACKAGE / f / "math.py"] if (PACKAGE / f / "math.py").is_file()
                                  else sorted((PACKAGE / f / "math").glob("*.py")))]


def _imports(path: Path, type_checking: bool = False) -> list[str]:
    """The hierfl modules ``path`` imports (at any depth; ``if TYPE_CHECKING:`` blocks only if asked)."""
    out: list[str] = []

    def visit(node: ast.AST, in_tc: bool) -> None:
        for child in ast.iter_child_nodes(node):
            tc = in_tc or (isinstance(child, ast.If) and isinstance(child.test, ast.Name)
                           and child.test.id == "TYPE_CHECKING")
            if not tc or type_checking:
                if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                    out.append(child.module)
                    # ``from hierfl.robust import math``: the submodule
                    out.extend(f"{child.module}.{a.name}" for a in child.names
                               if PACKAGE.parent.joinpath(*child.module.split("."), a.name).with_suffix(".py").is_file())
                elif isinstance(child, ast.Import):
                    out.extend(a.name for a in child.names)
            visit(child, tc)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return out


def _package(module: str) -> str:
    """The module's package; for a module of a feature package, the layer of its role."""
    layer = layer_of(module)
    return layer if layer is not None else module  # the root package, a feature package's docstring


def _modules_after(imports: str) -> set[str]:
    code = f"import sys\n{imports}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_config_bottom_imports_nothing_of_hierfl_outside_config():
    for path in (PACKAGE / "config").glob("*.py"):
        outside = [m for m in _imports(path, type_checking=True)
                   if m.startswith("hierfl") and not m.startswith("hierfl.config")]
        assert not outside, f"{path.name} imports {outside}"


def test_core_imports_no_config_pydantic_torch_or_ray():
    banned = ("hierfl.config", "hierfl.scenario", "pydantic", "torch", "ray")
    for path in CORE_FILES:
        bad = [m for m in _imports(path, type_checking=True) if m.startswith(banned) or m == "hierfl.registry"]
        assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"
    core = ", ".join(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts) for p in CORE_FILES
                     if p.stem != "__init__")
    mods = _modules_after(f"import {core}")
    assert not {m for m in mods if m.split(".")[0] in ("pydantic", "torch", "ray") or m.startswith("hierfl.config")}


def test_loading_a_scenario_imports_neither_torch_nor_ray():
    mods = _modules_after("import hierfl.scenario.loader, hierfl.assemble.world, hierfl.executors")
    assert "torch" not in mods and "ray" not in mods


def test_no_import_cycles_between_packages():
    graph = nx.DiGraph()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        src = _package(".".join(rel.parts))
        for module in _imports(path):
            if module.startswith("hierfl.") and _package(module) != src:
                graph.add_edge(src, _package(module))
    assert not list(nx.simple_cycles(graph))
