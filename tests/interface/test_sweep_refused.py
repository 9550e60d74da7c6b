"""A sweep that crosses protocols with straggler policies: combinations a protocol refuses by
declaration are an error by default, and with ``refused: skip`` they are recorded as
``refused: <reason>`` (in ``hierfl validate``, ``hierfl sweep``, ``sweep.csv`` and ``hierfl table``)
while the other trials run. Also: the shipped ``policies_compare`` sweep validates, and a one-seed,
very short version of it runs end to end with its analysis script."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl.sweep.spec import expand, expand_all, load_sweep

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "scenarios" / "sweeps" / "policies_compare.yaml"
AHFL_WHY = ("straggler.name: device→edge: a leader applies its queue every leader_period, whatever has arrived")


def _short(tmp_path: Path, **changes) -> Path:
    """policies_compare.yaml, 1 seed, 12 s of emulated time, re-clustering never only: 3 + 1 + 3 = 7 runs,
    2 refused (AHFL with deadline and with over_select)."""
    spec = yaml.safe_load(SWEEP.read_text(encoding="utf-8"))
    for label, base in spec["scenarios"].items():  # the base files stay where they are
        if isinstance(base, str):
            spec["scenarios"][label] = str((SWEEP.parent / base).resolve())
        else:
            base["scenario"] = str((SWEEP.parent / base["scenario"]).resolve())
    spec["set"] = [s for s in spec["set"] if not s.startswith("stop.virtual_time_s")] + ["stop.virtual_time_s=12"]
    spec["grid"]["protocol.recluster"] = [{"name": "never"}]
    spec["seeds"] = [1]
    spec.update(changes)
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def test_shipped_sweep_validates_with_its_refused_trials_named(capsys):
    assert main(["validate", str(SWEEP)]) == 0
    out = capsys.readouterr().out
    # 3 protocols x 3 re-clustering x 3 straggler policies x 3 seeds = 81 trials; AHFL takes only wait_all:
    # 3 re-clustering x 2 policies x 3 seeds = 18 refused, 63 run
    assert out.strip().endswith("all 63 trials valid, 18 refused by declaration (skipped)")
    refused = [line for line in out.splitlines() if ": refused: " in line]
    assert len(refused) == 18 and all("scenario=ahfl" in line and line.endswith(AHFL_WHY) for line in refused)
    assert sum(line.startswith("  trial ") and ": OK — " in line for line in out.splitlines()) == 63
    spec = load_sweep(SWEEP)
    trials, scenarios, skipped = expand_all(spec, source=str(SWEEP))
    assert len(trials) == 63 and len(skipped) == 18
    assert {t.changed["straggler"]["name"] for t in skipped} == {"deadline", "over_select"}
    # the straggler policy sits at the device-level synchronous round, 70 % of a group sampled per round
    hier = [s for s in scenarios if s.protocol.name == "hierfavg"]
    assert {s.protocol.fraction for s in hier} == {0.7} and len(hier) == 27
    assert [s.straggler.name for s in hier[:9]] == ["wait_all"] * 3 + ["deadline"] * 3 + ["over_select"] * 3
    assert {s.straggler.cloud.name for s in scenarios} == {"wait_all"}
    assert {s.devices.availability.name for s in scenarios} == {"markov"}
    assert {s.stop.virtual_time_s for s in scenarios} == {200}


def test_refused_trials_are_an_error_unless_skipped(tmp_path, capsys):
    path = _short(tmp_path, refused="error")  # the default
    with pytest.raises(ConfigError) as exc:
        expand(load_sweep(path), source=str(path))
    text = exc.value.report()
    assert "grid point (scenario=ahfl, protocol.recluster=never, straggler=deadline): straggler.name" in text
    assert "allowed: wait_all" in text
    assert "refused: some trials are refused by declaration" in text and "`refused: skip`" in text
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "straggler.name" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    # only refusals are skipped: a bad value stays an error naming its key
    path = _short(tmp_path, refused="skip", grid={"straggler": [{"name": "deadline", "seconds": -1}]})
    assert main(["validate", str(path)]) == 2
    assert "straggler.seconds" in capsys.readouterr().err
    # a sweep whose every trial is refused would run nothing
    path = _short(tmp_path, refused="skip", scenarios={"ahfl": str(ROOT / "scenarios/ahfl_recluster.yaml")},
                  grid={"straggler": [{"name": "deadline", "seconds": 4.0}]})
    assert main(["validate", str(path)]) == 2
    assert "refused: every trial is refused by declaration" in capsys.readouterr().err
    path.write_text(path.read_text().replace("refused: skip", "refused: sometimes"), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    assert "refused" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.slow  # about a minute on 2 busy cores
def test_short_policies_compare_runs_end_to_end(ray_session, tmp_path, capsys):
    path = _short(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    assert f"refused: scenario=ahfl, protocol.recluster=never, straggler=deadline: {AHFL_WHY}" in err
    assert f"refused: scenario=ahfl, protocol.recluster=never, straggler=over_select: {AHFL_WHY}" in err
    assert "sweep: 7 completed, 0 failed, 0 not run, 2 refused" in err and "Traceback" not in err
    rows = list(csv.DictReader((out / "sweep.csv").open(encoding="utf-8")))
    assert [r["status"] for r in rows] == ["completed"] * 4 + ["refused"] * 2 + ["completed"] * 3
    assert rows[4]["error"] == AHFL_WHY and not (out / "runs" / rows[4]["trial"]).exists()
    manifest = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert [t["id"][:4] for t in manifest["trials"]] == [f"t{i:03d}" for i in range(9)]
    # the table keeps the grid's order, a refused point as one line
    assert main(["table", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 9
    assert lines[6] == ("| scenario=ahfl, protocol.recluster=never, straggler=deadline seconds=4 | 0/1 | "
                        f"refused: {AHFL_WHY} | – | – | – |")
    assert lines[5].startswith("| scenario=ahfl, protocol.recluster=never, straggler=wait_all | 1/1 | ")
    # the analysis script: its table (a refused row) and its band plot
    import importlib.util

    spec = importlib.util.spec_from_file_location("policies_compare", ROOT / "analysis" / "policies_compare.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    assert mod.main([str(out), "-o", str(tmp_path / "p.png"), "--table", str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text(encoding="utf-8").splitlines()
    assert table[0] == "| protocol | re-clustering | straggler | runs | final accuracy | time to 0.6 (s) | reached |"
    assert table[2 + 4] == f"| ahfl | never | deadline | 0/1 | refused: {AHFL_WHY} | – | – |"
    assert table[2].startswith("| hierfavg | never | wait_all | 1/1 | 0.")
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_a_refusal_by_declaration_is_marked_and_nothing_else_is():
    from hierfl.scenario.loader import load_scenario
    from hierfl.sweep.spec import refusal_text

    with pytest.raises(ConfigError) as exc:
        load_scenario(ROOT / "scenarios" / "ahfl_recluster.yaml", ["straggler={name: deadline, seconds: 4.0}"])
    assert [p.refused for p in exc.value.problems] == [True]
    assert refusal_text(exc.value.problems) == AHFL_WHY
    # HierFAVG's cloud round takes every edge server: over_select is refused there too
    with pytest.raises(ConfigError) as exc:
        load_scenario(ROOT / "scenarios" / "hierfavg_recluster.yaml",
                      ["straggler={name: wait_all, cloud: {name: over_select}}"])
    assert [p.path for p in exc.value.problems] == ["straggler.cloud.name"] and exc.value.problems[0].refused
    with pytest.raises(ConfigError) as exc:
        load_scenario(ROOT / "scenarios" / "ahfl_recluster.yaml", ["straggler={name: deadline, seconds: -1}"])
    assert not any(p.refused for p in exc.value.problems) and refusal_text(exc.value.problems) is None
