"""The determinism contract's clause on what model values may and may not change (docs/determinism.md).

Emulated times, counters, selections and event counts are computed from the scenario alone, never
from the model's numbers. Changing only the learning numerics (the learning rate, which changes
every weight and every accuracy) must therefore leave every one of them exactly as it was, on the
same machine, bit for bit. This is why another machine, whose kernels give other model bits, still
gives the same emulation (tests/determinism/test_portability.py checks that directly under forced kernels).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hierfl.driver import run_scenario
from hierfl.scenario.loader import load_scenario
from tests.golden import GOLDEN_DIR, GOLDEN_OVERRIDES, LEARNING_PATHS, PROPERTY_OVERRIDES, kind_of

ROOT = Path(__file__).resolve().parents[2]

# scenarios whose decisions read no model value (tests/golden.py lists those that do)
CASES = ["quickstart", "hierfavg", "ahfl", "fedch", "fedasync", "fedbuff", "fedhisyn", "fedper", "digits_cnn"]


def _without_learning(rec: dict, prefix: str) -> dict:
    return {k: v for k, v in rec.items() if kind_of(f"{prefix}.{k}") != "learning" and not k.startswith("wall")
            and k not in ("startup_s", "startup")}


def _emulation(run_dir: Path) -> tuple[list[dict], dict]:
    lines = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return [_without_learning(r, "metrics") for r in lines], _without_learning(summary, "summary")


@pytest.mark.slow
@pytest.mark.parametrize("stem", CASES)
def test_times_counts_and_selections_do_not_depend_on_model_values(stem, tmp_path):
    path = ROOT / "scenarios" / f"{stem}.yaml"
    short = [*GOLDEN_OVERRIDES, *PROPERTY_OVERRIDES.get(stem, ()), "runtime.executor=local"]
    base = load_scenario(path, short)
    runs = []
    for scale in (1.0, 0.37):
        # the learning rate moves every weight; a protocol with its own step size (FedCH) too
        sets = [f"training.lr={base.training.lr * scale}"]
        if isinstance(getattr(base.protocol, "lr", None), float):
            sets.append(f"protocol.lr={base.protocol.lr * scale}")
        sc = load_scenario(path, [*short, *sets])
        res = run_scenario(sc, tmp_path / f"x{scale}")
        runs.append((_emulation(tmp_path / f"x{scale}"), res.final_params))
    ((lines_a, sum_a), first), ((lines_b, sum_b), second) = runs
    # the learning did change ...
    assert not np.array_equal(first, second)
    # ... and nothing else did, to the last bit
    assert sum_a == sum_b
    assert len(lines_a) == len(lines_b)
    for a, b in zip(lines_a, lines_b):
        assert a == b


def test_learning_paths_cover_every_model_value_the_outputs_hold():
    # every field name in the committed snapshots that holds a model value must be a learning path
    names = set()
    for f in GOLDEN_DIR.glob("*.json"):
        names |= set(re.findall(r'"([a-z_]*(?:accuracy|loss|dist_|similarity)[a-z_]*)"', f.read_text()))
    assert names, "no model values found in the snapshots"
    for name in names:
        assert kind_of(f"summary.{name}") == "learning" or name == "similarity" or name.endswith("_kind"), (
            name, LEARNING_PATHS)


def test_no_golden_file_stores_the_bits_of_an_output():
    # snapshots are readable values with tolerances, never digests of model-dependent bytes
    for f in GOLDEN_DIR.glob("*"):
        assert not re.search(r"\b[0-9a-f]{40,}\b", f.read_text(encoding="utf-8")), f.name
