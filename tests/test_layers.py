"""Layers point inward: the core, config and protocols import without Ray (or torch for the core)."""

import subprocess
import sys


def _modules_after(imports: str) -> set[str]:
    code = f"import sys\n{imports}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_core_imports_without_ray_or_torch():
    mods = _modules_after("import hierfl.core.engine, hierfl.core.rng, hierfl.core.aggregate, "
                          "hierfl.core.work, hierfl.core.world, hierfl.core.grouping, hierfl.core.topomath")
    assert "ray" not in mods and "torch" not in mods


def test_config_protocols_and_local_executor_import_without_ray():
    mods = _modules_after("import hierfl.scenario.loader, hierfl.protocols, hierfl.emulator, hierfl.runtime")
    assert "ray" not in mods
