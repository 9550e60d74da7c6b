"""hierfl sweep on Ray Tune: trials equal one-by-one runs bit for bit, a failing trial is retried and
recorded without stopping the others, --resume skips finished trials, sweep.csv, plots and tables."""

from __future__ import annotations

import copy
import csv
import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import hierfl
from hierfl.cli import main
from hierfl.config.errors import ConfigError
from hierfl import api
from hierfl.sweep.aggregate import common_grid, mean_ci, sweep_table
from hierfl.sweep.run import run_sweep
from hierfl.sweep.spec import Trial, expand, expand_all, load_sweep
from tests.conftest import TINY

# (find_spec, not importorskip: collecting the suite in every worker must not import Ray Tune, about a CPU second)
if importlib.util.find_spec("ray.tune") is None:
    pytest.skip("Ray Tune is not installed", allow_module_level=True)


def _write(tmp_path: Path, grid: dict, seeds=(1, 2), **extra) -> Path:
    base = copy.deepcopy(TINY)
    base["evaluation"] = {"every_s": 1.0, "target_accuracy": 0.5}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    sweep = {"name": "tiny_sweep", "scenario": "base.yaml", "grid": grid, "seeds": list(seeds),
             "resources_per_run": {"cpu": 1}, "retries": 1, **extra}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False), encoding="utf-8")
    return path


def _evals(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in lines if r["event"] != "run_start"]


def _config(run_dir: Path) -> dict:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg.pop("versions")
    return cfg


@pytest.mark.ray
def test_sweep_trials_equal_one_by_one_runs_and_a_failure_is_recorded(ray_session, tmp_path):
    # two trials: the tiny world under a deadline policy, and one whose dataset directory does not exist
    # (it fails when the trial builds its data, is retried once, then recorded; the other is not stopped)
    grid = {"data.dataset": [TINY["data"]["dataset"], {"name": "mnist", "root": str(tmp_path / "nowhere")}]}
    path = _write(tmp_path, grid, seeds=[1], set=["straggler={name: deadline, seconds: 2.5}"])
    result = run_sweep(path, tmp_path / "out", quiet=True)
    rows = {r["trial"]: r for r in result["rows"]}
    assert len(rows) == 2 and result["counts"] == {"completed": 1, "failed": 1, "not run": 0}
    for tid, row in rows.items():
        if "mnist" in tid:
            assert row["status"] == "failed" and row["attempts"] == 2  # tried, retried once, recorded
            assert "nowhere" in row["error"] and "does not exist" in row["error"]
            continue
        assert row["status"] == "completed" and row["attempts"] == 1
        # the same run made by hand (hierfl.run = hierfl run --set ... --seed 1): identical files
        manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
        trial = next(t for t in manifest["trials"] if t["id"] == tid)
        alone = hierfl.run(tmp_path / "base.yaml", overrides=[*trial["overrides"], "runtime.executor=local"],
                           seed=1, out=tmp_path / "alone" / tid)
        swept = tmp_path / "out" / "runs" / tid
        assert (swept / "final_model.npy").read_bytes() == (alone.dir / "final_model.npy").read_bytes()
        assert _evals(swept) == _evals(alone.dir)
        assert _config(swept) == _config(alone.dir)
        assert float(row["final_accuracy"]) == alone.summary["final_accuracy"]
    # sweep.csv: one row per trial, changed keys (a section also by name), seed, status, summary fields
    with open(tmp_path / "out" / "sweep.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["trial"] for r in table] == list(rows)
    assert {"trial", "status", "seed", "data.dataset", "data.dataset.name", "final_accuracy", "totals.train_jobs",
            "time_to_target_s", "attempts", "error"} <= set(table[0])
    assert [(r["data.dataset.name"], r["status"]) for r in table] == [("blobs", "completed"), ("mnist", "failed")]
    assert float(table[0]["final_accuracy"]) > 0.5 and table[1]["final_accuracy"] == ""


@pytest.mark.ray
def test_resume_runs_only_unfinished_trials(ray_session, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a file store here; sqlite needs the full mlflow
    # the sweep also names MLflow: Tune's MLflowLoggerCallback logs each trial it runs
    path = _write(tmp_path, {"protocol.fraction": [0.5, 1.0]}, seeds=[4],
                  mlflow={"tracking_uri": (tmp_path / "mlruns").as_uri(), "experiment_name": "tiny"})
    spec = load_sweep(path)
    trials, _ = expand(spec, tmp_path / "base.yaml")
    out = tmp_path / "out"
    # an interrupted sweep: the manifest and the first trial's finished run, nothing else
    first = trials[0]
    hierfl.run(tmp_path / "base.yaml", overrides=[*first.overrides, "runtime.executor=local"], seed=4,
               out=out / "runs" / first.id)
    manifest = {"name": spec.name, "sweep_file": str(path), "base": str(tmp_path / "base.yaml"),
                "cwd": str(tmp_path), "spec": spec.model_dump(mode="json"), "trials": [t.as_dict() for t in trials]}
    (out / "sweep.json").write_text(json.dumps(manifest))
    before = (out / "runs" / first.id / "summary.json").stat().st_mtime_ns
    assert main(["sweep", "--resume", str(out), "-q"]) == 0
    assert (out / "runs" / first.id / "summary.json").stat().st_mtime_ns == before  # not run again
    assert json.loads((out / "runs" / trials[1].id / "summary.json").read_text())["status"] == "completed"
    frame = hierfl.load_sweep(out)
    assert list(frame["status"]) == ["completed", "completed"] and list(frame["protocol.fraction"]) == [0.5, 1.0]
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    logged = {r.data.params["trial/id"]: r.data.metrics for r in runs}
    assert trials[1].id in logged  # the trial this invocation ran
    assert logged[trials[1].id]["final_accuracy"] == pytest.approx(float(frame["final_accuracy"][1]))


def test_bad_sweep_files_are_config_errors_naming_the_key(tmp_path, capsys):
    path = _write(tmp_path, {"protocol.fraction": [0.5, 7.0]}, seeds=[1])
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "grid point (protocol.fraction=7.0): protocol.fraction" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing written
    path = _write(tmp_path, {"protocol.fraction": [0.5]}, seeds=[1], retrys=2)
    with pytest.raises(ConfigError, match="retrys: unknown key; allowed: name, scenario"):
        load_sweep(path)
    assert main(["sweep", str(path), "--address", "ray://h:10001"]) == 2
    err = capsys.readouterr().err
    assert "--address: ray:// (Ray Client) is not supported for sweeps" in err and "ray job submit" in err


def test_seed_count_and_trial_ids(tmp_path):
    path = _write(tmp_path, {"straggler": [{"name": "wait_all"}, {"name": "over_select", "factor": 1.5}]}, seeds=[])
    raw = yaml.safe_load(path.read_text())
    raw["seeds"] = 2
    path.write_text(yaml.safe_dump(raw))
    trials, scenarios = expand(load_sweep(path), tmp_path / "base.yaml")
    assert [t.id for t in trials] == ["t000_straggler=wait_all_seed=0", "t001_straggler=wait_all_seed=1",
                                      "t002_straggler=over_select_seed=0", "t003_straggler=over_select_seed=1"]
    assert [s.seed for s in scenarios] == [0, 1, 0, 1]
    assert scenarios[2].straggler.factor == 1.5 and scenarios[0].evaluation.target_accuracy == 0.5


def test_mean_ci_and_common_grid_numbers():
    mean, half = mean_ci(np.array([[0.5, 0.7], [0.7, 0.9], [0.6, 0.8]]))
    # t(0.975, 2) = 4.302653; s = 0.1; sem = 0.1 / sqrt(3)
    assert np.allclose(mean, [0.6, 0.8]) and np.allclose(half, 4.302653 * 0.1 / math.sqrt(3), rtol=1e-6)
    grid, values = common_grid([(np.array([0.0, 2.0, 4.0]), np.array([0.0, 0.4, 0.8])),
                                (np.array([0.0, 3.0]), np.array([0.1, 0.7]))])
    assert list(grid) == [0.0, 2.0, 3.0]  # cut at the earliest final evaluation (3 s)
    assert np.allclose(values, [[0.0, 0.4, 0.6], [0.1, 0.5, 0.7]])
    m, h = mean_ci(np.array([0.8]))
    assert m == 0.8 and math.isnan(h)


def test_table_and_plot_of_a_sweep_directory(tmp_path, capsys):
    # a sweep directory made by hand (the manifest plus ordinary runs): two policies x two seeds
    path = _write(tmp_path, {"straggler": [{"name": "wait_all"}, {"name": "deadline", "seconds": 2.5}]},
                  seeds=[1, 2])
    spec = load_sweep(path)
    trials, _ = expand(spec, tmp_path / "base.yaml")
    out = tmp_path / "sw"
    finals: dict[str, list[float]] = {}
    for t in trials:
        r = hierfl.run(tmp_path / "base.yaml", overrides=t.overrides, seed=t.seed, out=out / "runs" / t.id)
        finals.setdefault(t.changed["straggler"]["name"], []).append(r.summary["final_accuracy"])
    (out / "sweep.json").write_text(json.dumps({"trials": [t.as_dict() for t in trials]}))
    rows = sweep_table(out, group_by="straggler.name")
    assert [r["group"] for r in rows] == ["wait_all", "deadline"]
    for r in rows:
        m, h = mean_ci(np.array(finals[r["group"]]))
        assert r["final_accuracy_mean"] == pytest.approx(float(m)) and r["final_accuracy_ci95"] == pytest.approx(float(h))
        assert r["runs"] == 2 and r["completed"] == 2
    assert main(["table", str(out), "--group-by", "straggler.name", "--csv", str(tmp_path / "t.csv")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("| straggler.name | runs | final accuracy | time to 0.5 (s)")
    assert f"| wait_all | 2/2 | {rows[0]['final_accuracy_mean']:.4f} ± {rows[0]['final_accuracy_ci95']:.4f}" in text
    assert (tmp_path / "t.csv").read_text().splitlines()[0].startswith("group,runs,completed,final_accuracy_mean")
    assert main(["plot", str(out), "--group-by", "straggler.name", "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 10_000
    assert main(["plot", str(out), "--group-by", "nope.key", "-o", str(tmp_path / "q.png")]) == 2
    assert "no key 'nope.key'" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted([*Path(__file__).resolve().parents[2].glob("scenarios/sweeps/*.yaml"),
                                         *Path(__file__).resolve().parents[2].glob("analysis/sweeps/*.yaml")]),
                         ids=lambda p: p.name)
def test_shipped_sweep_files_expand(path):
    spec = load_sweep(path)
    trials, scenarios, refused = expand_all(spec, source=str(path))  # every trial validated (or refused)
    assert len(trials) + len(refused) == (len(spec.scenarios or [None]) * math.prod(len(v) for v in spec.grid.values())
                                          * len(spec.seed_list))
    assert not refused or spec.refused == "skip"
    if path.name == "async.yaml":  # the former analysis/async_comparison.py: each protocol from its own file
        assert [s.protocol.name for s in scenarios] == ["ahfl", "fedasync", "fedbuff", "hierfavg", "fedavg"]
        assert [s.topology.edge_servers for s in scenarios] == [4, 0, 0, 4, 0]
        assert {s.seed for s in scenarios} == {11} and {s.stop.virtual_time_s for s in scenarios} == {150}
        assert scenarios[4].protocol.fraction == 1.0 and scenarios[4].training.steps == 20
    if path.name == "stragglers_seeds.yaml":
        assert [s.straggler.name for s in scenarios] == ["wait_all"] * 3 + ["deadline"] * 3 + ["over_select"] * 3
        assert {s.devices.count for s in scenarios} == {20} and [t.seed for t in trials[:3]] == [1, 2, 3]


def test_progress_view_counts_trials_and_survives_pickling(capsys):
    from types import SimpleNamespace

    from ray import cloudpickle as pickle  # what Tune saves its experiment (callbacks included) with

    from hierfl.sweep.run import _progress_callback

    cb = _progress_callback(4, "demo", quiet=False)
    trials = [SimpleNamespace(status=s, config={"trial": {"id": f"t{i}"}})
              for i, s in enumerate(["TERMINATED", "RUNNING", "ERROR", "PENDING"])]
    cb.on_trial_recover(0, trials, trials[2])
    cb.on_trial_error(0, trials, trials[2])
    assert cb._last == (1, 1, 1, 1) and cb.failures == {"t2": 2}  # done, running, failed, pending
    cb.on_experiment_end(trials)
    assert "done 1 · running 1 · failed 1 · pending 1" in capsys.readouterr().err
    again = pickle.loads(pickle.dumps(cb))  # Tune pickles callbacks with the experiment state
    assert again.total == 4 and again.failures == {}


def _write_bases(tmp_path: Path, scenarios: dict, **extra) -> Path:
    """Two tiny bases: a.yaml (FedAvg) and b.yaml (a higher learning rate, 3 devices)."""
    a = copy.deepcopy(TINY)
    a["evaluation"] = {"every_s": 1.0, "target_accuracy": 0.5}
    b = copy.deepcopy(a)
    b["training"]["lr"] = 0.3
    b["devices"]["count"] = 3
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(a), encoding="utf-8")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(b), encoding="utf-8")
    sweep = {"name": "bases", "scenarios": scenarios, "seeds": [1, 2], "resources_per_run": {"cpu": 1}, **extra}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False), encoding="utf-8")
    return path


def test_scenarios_are_a_grid_axis_with_their_own_overrides(tmp_path):
    path = _write_bases(tmp_path, {"plain": "a.yaml", "fast b": {"scenario": "b.yaml", "set": ["stop.rounds=2"]}},
                        set=["stop.rounds=4"], grid={"protocol.fraction": [0.5, 1.0]}, seeds=[7])
    trials, scenarios = expand(load_sweep(path), source=str(path))
    # bases outermost, then the grid, then seeds; the label is the changed key `scenario`
    assert [t.id for t in trials] == ["t000_scenario=plain_protocol.fraction=0.5_seed=7",
                                      "t001_scenario=plain_protocol.fraction=1.0_seed=7",
                                      "t002_scenario=fast_b_protocol.fraction=0.5_seed=7",
                                      "t003_scenario=fast_b_protocol.fraction=1.0_seed=7"]
    assert [t.changed for t in trials][2] == {"scenario": "fast b", "protocol.fraction": 0.5}
    # a base's own overrides come after the sweep's `set` (so they win), before the grid values
    assert trials[2].overrides == ["stop.rounds=4", "stop.rounds=2", "protocol.fraction=0.5"]
    assert [(s.training.lr, s.devices.count, s.stop.rounds, s.protocol.fraction) for s in scenarios] == [
        (0.1, 4, 4, 0.5), (0.1, 4, 4, 1.0), (0.3, 3, 2, 0.5), (0.3, 3, 2, 1.0)]
    assert [Path(t.base).name for t in trials] == ["a.yaml", "a.yaml", "b.yaml", "b.yaml"]
    assert Trial.from_dict(trials[3].as_dict()) == trials[3]  # the base survives the manifest


def test_bad_scenarios_are_config_errors_naming_the_key(tmp_path, capsys):
    path = _write_bases(tmp_path, {"a": "a.yaml", "gone": "missing.yaml"})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "scenarios.gone: base scenario file not found" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing written
    path = _write_bases(tmp_path, {"a": "a.yaml", "b": {"scenario": "b.yaml", "set": ["protocol.fraction=7"]}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "grid point (scenario=b): protocol.fraction" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    cases = [({"a": "a.yaml"}, {"scenario": "a.yaml"}, "scenario: give exactly one of `scenario`"),
             ({"a": "a.yaml"}, {"grid": {"scenario": ["a.yaml"]}}, "grid: use `scenarios: {label: file, ...}`"),
             ({"b": {"scenario": "b.yaml", "sett": []}}, {}, "scenarios.b.sett: unknown key"),
             ({}, {}, "scenarios: give at least one label")]
    for scenarios, extra, message in cases:
        path = _write_bases(tmp_path, scenarios, **extra)
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_sweep(path)
    path = _write_bases(tmp_path, {"a": "a.yaml"})
    raw = yaml.safe_load(path.read_text())
    del raw["scenarios"]
    path.write_text(yaml.safe_dump(raw))
    assert main(["sweep", str(path)]) == 2
    assert "scenario: give exactly one of `scenario`" in capsys.readouterr().err


@pytest.mark.ray
def test_a_scenarios_sweep_runs_each_base_and_groups_by_scenario(ray_session, tmp_path, capsys):
    path = _write_bases(tmp_path, {"a": "a.yaml", "b": {"scenario": "b.yaml", "set": ["protocol.fraction=0.5"]}})
    result = run_sweep(path, tmp_path / "out", quiet=True)
    assert result["counts"] == {"completed": 4, "failed": 0, "not run": 0}
    rows = result["rows"]
    assert [(r["scenario"], r["seed"]) for r in rows] == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
    finals: dict[str, list[float]] = {}
    for row, trial in zip(rows, json.loads((tmp_path / "out" / "sweep.json").read_text())["trials"]):
        # each trial is the run of ITS base with its overrides, bit for bit
        base = tmp_path / f"{row['scenario']}.yaml"
        alone = hierfl.run(base, overrides=[*trial["overrides"], "runtime.executor=local"], seed=row["seed"],
                           out=tmp_path / "alone" / row["trial"])
        swept = tmp_path / "out" / "runs" / row["trial"]
        assert (swept / "final_model.npy").read_bytes() == (alone.dir / "final_model.npy").read_bytes()
        assert _evals(swept) == _evals(alone.dir) and _config(swept) == _config(alone.dir)
        finals.setdefault(row["scenario"], []).append(alone.summary["final_accuracy"])
    assert _config(tmp_path / "out" / "runs" / rows[2]["trial"])["devices"]["count"] == 3  # b's world
    table = sweep_table(tmp_path / "out", group_by="scenario")
    assert [(r["group"], r["completed"]) for r in table] == [("a", 2), ("b", 2)]
    for r in table:
        m, h = mean_ci(np.array(finals[r["group"]]))
        assert r["final_accuracy_mean"] == pytest.approx(float(m)) and r["final_accuracy_ci95"] == pytest.approx(float(h))
    assert main(["table", str(tmp_path / "out"), "--group-by", "scenario"]) == 0
    assert capsys.readouterr().out.startswith("| scenario | runs |")
    assert main(["plot", str(tmp_path / "out"), "--group-by", "scenario", "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 10_000


@pytest.mark.ray
def test_a_plugin_given_with_plugins_runs_in_every_trial(ray_session, tmp_path):
    # the tutorial's plug-in, outside the checkout, given only to hierfl.sweep: the driver validates the
    # trials with it, and each Tune trial (its own worker process) loads it from the text the driver read
    plugin = tmp_path / "mine" / "my_fedavg.py"
    plugin.parent.mkdir()
    plugin.write_text((Path(__file__).resolve().parents[2] / "examples" / "own_method" / "my_fedavg.py").read_text())
    grid = {"protocol": [{"name": "fedavg", "fraction": 1.0}, {"name": "my_fedavg", "clients": 3}]}
    path = _write(tmp_path, grid, seeds=[1], set=["stop.rounds=2"])
    frame = api.sweep(path, tmp_path / "out", plugins=[plugin])  # hierfl.sweep (the package shadows the name here)
    assert list(frame["status"]) == ["completed", "completed"] and set(frame["protocol.name"]) == {"fedavg", "my_fedavg"}
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["plugins"] == [str(plugin.resolve())]  # a resumed sweep loads it again
    mine = next(tmp_path / "out" / "runs" / t["id"] for t in manifest["trials"] if "my_fedavg" in t["id"])
    assert _config(mine)["plugins"] == [str(plugin.resolve())]
