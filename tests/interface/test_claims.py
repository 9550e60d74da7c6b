"""Claims reproduction: every claims scenario and sweep validates, one round of each runs, and the claims
plumbing (mean ± CI, paired ratios, the table) computes what it says."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hierfl.scenario.loader import load_scenario
from hierfl.sweep.spec import expand, load_sweep

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "analysis" / "claims"
FILES = sorted(p for p in CLAIMS.glob("*/*.yaml"))
# one round, in-process, nothing kept beyond the metrics: a smoke run, not a reproduction
SMOKE = ["stop.rounds=1", "runtime.executor=local", "runtime.checkpoint.enabled=false", "output.trace=none"]
# the emulated time an arm without collaboration (no rounds) runs for in its smoke run
NO_COLLABORATION_S = 0.02
# Before their first round the distillation methods pre-train every party (2 to 40 epochs over its data, the
# bulk of a one-round run's CPU time); one epoch of each phase shows that the phase runs. A key the case
# itself sets (a swept value) is kept.
SMOKE_PRETRAINING = {"rhfl": ["protocol.pretrain_epochs=1"], "fccl": ["protocol.pretrain_epochs=1"],
                     "fedmd": ["protocol.transfer_public_epochs=1", "protocol.transfer_private_epochs=1"]}


def _is_sweep(path: Path) -> bool:
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return isinstance(raw, dict) and ("scenario" in raw or "scenarios" in raw)


def _common() -> Any:
    spec = importlib.util.spec_from_file_location("claims_common", CLAIMS / "common.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["claims_common"] = mod
    spec.loader.exec_module(mod)
    return mod


def _cover(trials: list[Any]) -> list[Any]:
    """A few trials of the first seed such that every value of every changed key runs once."""
    first_seed = [t for t in trials if t.seed == trials[0].seed]
    seen: set[tuple[str, str]] = set()
    chosen = []
    for t in first_seed:
        keys = {(k, json.dumps(v, sort_keys=True)) for k, v in t.changed.items()}
        if not keys <= seen or not chosen:
            chosen.append(t)
            seen |= keys
    return chosen


def _first_seed_trials(spec: Any, path: Path) -> list[Any]:
    """The trials of the sweep's first seed that run (refused ones left out, as ``refused: skip`` does), each
    validated: at collection, where every pytest-xdist worker pays for it, only these (the whole sweep's trials,
    every seed, are validated by test_claims_file_validates)."""
    from hierfl.config.errors import ConfigError
    from hierfl.sweep.spec import _points, refusal_text

    trials = []
    for trial, base, _ in _points(spec, None, str(path), path.parent):
        if trial.seed != spec.seed_list[0]:
            continue
        try:
            load_scenario(base, trial.overrides, seed=trial.seed)
        except ConfigError as exc:
            if spec.refused == "skip" and refusal_text(exc.problems) is not None:
                continue
            raise
        trials.append(trial)
    return trials


def _smoke_cases() -> list[tuple[str, Path, list[str]]]:
    cases = []
    for path in FILES:
        name = str(path.relative_to(CLAIMS))
        if _is_sweep(path):
            spec = load_sweep(path)
            trials = _first_seed_trials(spec, path)
            for t in _cover(trials):
                base = Path(t.base) if t.base else path.parent / str(spec.scenario)
                label = ",".join(f"{k}={v}" for k, v in t.changed.items())
                cases.append((f"{name}[{label}]", base, list(t.overrides) + [f"seed={t.seed}"]))
        else:
            cases.append((name, path, []))
    return cases


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(CLAIMS)) for p in FILES])
def test_claims_file_validates(path: Path) -> None:
    """Every scenario validates; every sweep expands into trials that all validate."""
    if _is_sweep(path):
        spec = load_sweep(path)
        trials, scenarios = expand(spec, source=str(path), sweep_dir=path.parent)
        assert trials and len(trials) == len(scenarios)
        assert len(spec.seed_list) >= 3, "a claim is reported over at least 3 seeds"
    else:
        load_scenario(path)


CASES = _smoke_cases()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_claims_smoke_one_round(case: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    """One round of each claims scenario (each value of each swept key at least once) completes."""
    from hierfl.driver import run_scenario

    _, base, overrides = case
    smoke = [o for o in overrides if not o.startswith("seed=")] + SMOKE
    sc = load_scenario(base, smoke)
    own_keys = {o.split("=", 1)[0] for o in overrides}
    shrink = [o for o in SMOKE_PRETRAINING.get(sc.protocol.name, []) if o.split("=", 1)[0] not in own_keys]
    if shrink:
        smoke += shrink
        sc = load_scenario(base, smoke)
    if getattr(sc.protocol, "collaborate", True) is False:
        # an arm without collaboration has no rounds: stop.rounds=1 never ends it, and its own limit
        # (2-4 virtual s of private training, about 30 wall s each) would take minutes; one evaluation
        # after a fiftieth of a virtual second shows that it runs, as one round does for the other arms:
        # its parties have run several jobs each by then (FCCL's 4 parties 16, FedMD's 6 parties 119: after
        # the one-epoch pre-training, each private epoch is a few milliseconds of emulated time)
        short = min(NO_COLLABORATION_S, sc.evaluation.every_s)
        sc = load_scenario(base, [*smoke, f"stop.virtual_time_s={short}", f"evaluation.every_s={short}"])
    r = run_scenario(sc, tmp_path / "run")
    assert r.summary["status"] == "completed", r.summary.get("error")
    assert r.summary["rounds"] >= 1 or r.summary["totals"]["train_jobs"] >= 1
    if getattr(sc.protocol, "collaborate", True) is False:  # the parties ran several jobs each, not just a first one
        assert r.summary["totals"]["train_jobs"] > 2 * sc.devices.count, r.summary["totals"]


def test_every_claim_folder_has_a_script_and_a_file() -> None:
    """A claim folder holds claim.py and at least one scenario or sweep file."""
    for d in sorted(p for p in CLAIMS.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        assert (d / "claim.py").is_file(), f"{d.name}: no claim.py"
        assert list(d.glob("*.yaml")), f"{d.name}: no scenario or sweep file"


def test_mean_ci_and_fmt_numbers() -> None:
    c = _common()
    mean, half, n = c.mean_ci([1.0, 2.0, 3.0, None, float("nan")])
    assert n == 3 and mean == 2.0
    assert half == pytest.approx(4.302652729911275 * 1.0 / math.sqrt(3))  # t(0.975, 2) · sd / √n
    assert c.fmt([1.0, 2.0, 3.0, None], digits=1, unit=" s") == "2.0 ± 2.5 s (n=3; 1 never)"
    assert c.fmt([None, None]) == "none of 2 runs"
    m1, h1, n1 = c.mean_ci([5.0])
    assert (m1, n1) == (5.0, 1) and math.isnan(h1)


def test_paired_ratios_match_seeds() -> None:
    c = _common()

    class R:
        def __init__(self, seed: int, v: float | None) -> None:
            self.seed, self.v = seed, v

    a = [R(0, 10.0), R(1, 9.0), R(2, None)]
    b = [R(1, 3.0), R(0, 5.0), R(2, 1.0)]
    assert c.paired(a, b, lambda r: r.v) == [2.0, 3.0, None]
    assert c.paired([R(0, 1.0)], [R(0, 0.0)], lambda r: r.v) == [None]


def test_table_renders_rows_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _common()
    spec = importlib.util.spec_from_file_location("claims_table", CLAIMS / "table.py")
    assert spec and spec.loader
    sys.path.insert(0, str(CLAIMS))
    try:
        table = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(table)
    finally:
        sys.path.remove(str(CLAIMS))
    rows = [{"id": "b", "claim": "B | pipe", "source": "s", "paper": "3.3×", "ours": "2.0 ± 0.1 (n=3)",
             "agrees": "yes", "scenario": ["analysis/claims/b/sweep.yaml"], "notes": "n", "seeds": [0, 1, 2],
             "order": 2, "wall_s": 60.0, "details": "why"},
            {"id": "a", "claim": "A", "source": "s", "paper": "p", "ours": "o", "agrees": "no",
             "scenario": ["x.yaml"], "notes": "", "seeds": [0], "order": 1, "wall_s": 30.0}]
    for r in rows:
        (tmp_path / f"{r['id']}.json").write_text(json.dumps(r))
    monkeypatch.setattr(table, "RESULTS", tmp_path)
    md = table.render(table.load())
    assert md.index("| A ([a]") < md.index("| B \\| pipe ([b]")
    assert "**no**" in md and "1.5 min in all" in md and "## b" in md and "why" in md


def test_table_names_no_file_outside_the_repository() -> None:
    """The claim scripts cite the specification files; the page names the documentation pages instead."""
    _common()
    spec = importlib.util.spec_from_file_location("claims_table", CLAIMS / "table.py")
    assert spec and spec.loader
    sys.path.insert(0, str(CLAIMS))
    try:
        table = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(table)
    finally:
        sys.path.remove(str(CLAIMS))
    text = table.in_repo("see ALGORITHMS.md §5.2, ALGORITHMS_2.md §16, docs/ALGORITHMS.md §4 and DEVICE_TIERS.md [k]")
    assert text == ("see docs/explanation/algorithms.md §5.2, docs/explanation/algorithms.md §16, "
                    "docs/explanation/algorithms.md §4 and the device tiers' sources (hierfl/profiles/tiers.yaml) [k]")
    page = (Path(__file__).resolve().parents[2] / "analysis" / "results" / "claims.md").read_text(encoding="utf-8")
    assert "ALGORITHMS" not in page and "DEVICE_TIERS.md" not in page
