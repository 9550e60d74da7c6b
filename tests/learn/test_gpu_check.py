"""The prepared GPU check (``analysis/bench/gpu_check.py``) runs every section with ``--smoke`` on the CPU and
writes its result files; the shell wrapper and the wheel script are well-formed."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "analysis" / "bench"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", BENCH / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # (its dataclass looks its module up there)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_runs_every_section_and_writes_the_results(tmp_path: Path) -> None:
    res = _module().main(["--smoke", "--out", str(tmp_path)])
    assert [m["precision"] for m in res["micro"]] == ["fp32", "bf16"]
    for m in res["micro"]:
        assert m["hierfl_steps_per_s"] > 0 and m["floor_steps_per_s"] > 0
        assert math.isclose(m["ratio"], m["hierfl_steps_per_s"] / m["floor_steps_per_s"], rel_tol=1e-9)
    assert [e["precision"] for e in res["e2e"]] == ["bf16", "fp32"]
    for e in res["e2e"]:
        # rounds beyond the calibration run; the extrapolation adds the unrun rounds at the measured pace
        assert e["rounds"] > e["calibration"]["rounds"] and e["measured_s"] > 0
        assert math.isclose(e["extrapolated_1500_s"], e["measured_s"] + e["s_per_round"] * (1500 - e["rounds"]))
        assert 0.0 <= e["final_accuracy"] <= 1.0
    c = res["compare"]
    # batched and job by job start from one model and seed: after two rounds they differ by float rounding only
    assert c["rounds"] == 2 and 0.0 <= c["max_abs_param_diff"] < 1e-4 and c["within"]
    # the staging code counts the crossings a GPU would make, on the CPU too: one start model up per round at
    # most (later rounds start from the aggregate's device copy), never one per job
    t = res["transfers_per_round"]
    assert t is not None and 0 < t["h2d_models"] <= 1.0 and 0 < t["d2h_models"] <= 2.0
    assert res["tests"] is None  # (the CUDA tests run in a full check only)
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["compare"]["rounds"] == 2 and saved["smoke"] is True
    page = (tmp_path / "gpu_check.md").read_text()
    assert "vmap floor" in page and "| bf16 |" in page and "extrapolated to 1,500" in page


def test_the_shell_scripts_parse() -> None:
    for script in ("gpu_check.sh", "gpu_wheels.sh"):
        subprocess.run(["bash", "-n", str(BENCH / script)], check=True)
    text = (BENCH / "gpu_check.sh").read_text()
    assert "--no-index" in text and "analysis/bench/gpu_check.py" in text
    assert "/analysis/bench/wheels/" in (ROOT / ".gitignore").read_text().splitlines()
