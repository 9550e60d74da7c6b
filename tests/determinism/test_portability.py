"""One CI machine standing in for others: shipped scenarios under forced CPU kernels.

Users' machines compute with other kernels than this one: another ATen vectorisation level (AVX2
or none instead of AVX-512), another MKL or oneDNN code path, another OpenBLAS core. Their bits
differ; the determinism contract says the emulation must not. Each case runs a handful of shipped
scenarios (FedAvg, HierFAVG, AHFL, FedCH, a robust rule, personalisation, real digits with an MLP
and a CNN) in a subprocess whose kernels are forced away from this host's defaults, and compares
them with the committed golden snapshots: counts and ids exactly, emulated times to 1e-9
relative, accuracy and loss within the learning tolerance (``python -m tests.golden --check``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.golden import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]

STEMS = ["quickstart", "hierfavg", "ahfl", "fedch", "byzantine", "fedper", "digits_mlp", "digits_cnn"]

# forced settings, and what the subprocess must then report (see tests.golden.kernels)
CASES = {
    "no-vectorisation": ({"ATEN_CPU_CAPABILITY": "default"}, "aten=DEFAULT"),
    "avx2-machine": (
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        "aten=AVX2",
    ),
    "openblas-sandybridge": ({"OPENBLAS_CORETYPE": "Sandybridge"}, "openblas=Sandybridge"),
    "openblas-haswell": ({"OPENBLAS_CORETYPE": "Haswell"}, "openblas=Haswell"),
}


def test_the_chosen_scenarios_are_shipped():
    assert set(STEMS) <= {p.stem for p in SCENARIOS}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_shipped_scenarios_match_their_golden_snapshots_under_other_kernels(case):
    forced, expect = CASES[case]
    env = {**os.environ, **forced}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.golden", "--check", *STEMS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    out = proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    assert first.startswith("kernels: ") and expect in first, f"the forced kernel was not used:\n{out[-3000:]}"
    assert proc.returncode == 0, f"{case} ({forced}):\n{out[-6000:]}"
    assert proc.stdout.count("within tolerance") == len(STEMS), out[-6000:]
