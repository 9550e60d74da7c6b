"""Reliability, parts 4 and 5: non-finite updates, and the input and signal defects.

Hostile input is table-driven through the CLI: exit 2, the key path in stderr, no traceback,
nothing written. Signals, full disks, run directories, addresses and divergence each get a test
that checks real files and numbers.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hierfl.cli import main
from hierfl.config.yamlsafe import load_yaml
from hierfl.scenario.loader import load_scenario
from tests.conftest import TINY, tiny

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, raw: dict[str, Any] | str) -> Path:
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw), encoding="utf-8")
    return path


def _with(**sections: Any) -> dict[str, Any]:
    raw = copy.deepcopy(TINY)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


_TINY_YAML = yaml.safe_dump(TINY)
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)) + _TINY_YAML

# (case, scenario: raw mapping or YAML text, key path expected in stderr)
HOSTILE: list[tuple[str, Any, str]] = [
    ("speed nan", _with(devices={"speed_sps": float("nan")}), "devices.speed_sps"),
    ("speed inf", _with(devices={"speed_sps": float("inf")}), "devices.speed_sps"),
    ("latency nan", _with(devices={"latency_ms": float("nan")}), "devices.latency_ms"),
    ("jitter inf", _with(devices={"jitter_sigma": float("inf")}), "devices.jitter_sigma"),
    ("uniform nan", _with(devices={"speed_sps": {"dist": "uniform", "low": float("nan"), "high": float("nan")}}),
     "devices.speed_sps.low"),
    ("lognormal inf", _with(devices={"uplink_mbps": {"dist": "lognormal", "median": float("inf"), "sigma": 0.1}}),
     "devices.uplink_mbps.median"),
    ("choice nan", _with(devices={"downlink_mbps": {"dist": "choice", "values": [1.0, float("nan")]}}),
     "devices.downlink_mbps.values.1"),
    ("edge latency inf", _with(topology={"edge_latency_ms": float("inf")}), "topology.edge_latency_ms"),
    ("stop inf", _with(stop={"virtual_time_s": float("inf")}), "stop.virtual_time_s"),
    ("lr nan", _with(training={"lr": float("nan")}), "training.lr"),
    ("deadline 1e-9", _with(straggler={"name": "deadline", "seconds": 1e-9}), "straggler.seconds"),
    ("every_s 1e-9", _with(evaluation={"every_s": 1e-9}), "evaluation.every_s"),
    ("duplicate key", _TINY_YAML + "seed: 4\n", "duplicate key 'seed'"),
    ("alias bomb", _BOMB, "aliases"),
]


@pytest.mark.parametrize("case,raw,key", HOSTILE, ids=[c for c, _, _ in HOSTILE])
def test_hostile_input_exits_2_naming_the_key_and_writes_nothing(tmp_path, capsys, case, raw, key):
    scen = _write(tmp_path / "s.yaml", raw)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert main(["run", str(scen), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err, err
    assert not out.exists()
    assert time.perf_counter() - t0 < 10  # the bomb is refused, not expanded


def test_error_messages_cut_a_huge_value_and_key(tmp_path, capsys):
    text = _TINY_YAML.replace("speed_sps: 100", "speed_sps: " + "x" * 5_000_000)
    assert text != _TINY_YAML
    scen = _write(tmp_path / "s.yaml", text + "? " + "k" * 100_000 + "\n: 1\n")  # an explicit key: no length limit
    assert main(["validate", str(scen)]) == 2
    err = capsys.readouterr().err
    assert "devices.speed_sps: unknown distribution" in err and "kkkk… (100,000 characters)" in err
    assert len(err) < 5_000, len(err)  # was the whole value: megabytes


def test_duplicate_keys_name_both_lines_and_merge_keys_still_work():
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml("a: 1\nb: 2\na: 3\n")
    assert "duplicate key 'a'" in str(info.value) and "line 1" in str(info.value)
    assert load_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n") == {"base": {"x": 1, "y": 2},
                                                                       "d": {"x": 1, "y": 3}}
    shared = load_yaml("a: &a [1, 2]\nb: [*a, *a]\n")  # ordinary aliases are fine
    assert shared["b"] == [[1, 2], [1, 2]]


def test_dist_mapping_is_replaced_whole_by_set_and_by_extends(tmp_path, capsys):
    base = _write(tmp_path / "base.yaml", _with(devices={"speed_sps": {"dist": "lognormal", "median": 200,
                                                                         "sigma": 0.5}}))
    # the README's own example
    sc = load_scenario(base, ["devices.speed_sps={dist: uniform, low: 10, high: 50}"])
    assert (sc.devices.speed_sps.dist, sc.devices.speed_sps.low, sc.devices.speed_sps.high) == ("uniform", 10, 50)
    assert main(["validate", str(base), "--set", "devices.speed_sps={dist: uniform, low: 10, high: 50}"]) == 0
    child = _write(tmp_path / "child.yaml", {"extends": "base.yaml",
                                              "devices": {"speed_sps": {"dist": "choice", "values": [5, 9]}}})
    sc = load_scenario(child)
    assert sc.devices.speed_sps.dist == "choice" and sc.devices.speed_sps.values == [5, 9]
    # a mapping without `dist` still edits the distribution key by key
    sc = load_scenario(base, ["devices.speed_sps.median=300"])
    assert (sc.devices.speed_sps.median, sc.devices.speed_sps.sigma) == (300, 0.5)
    capsys.readouterr()


# -- --out -----------------------------------------------------------------------------------------------

def test_out_is_checked_before_the_build_and_never_clobbers(tmp_path, capsys, monkeypatch):
    import hierfl.assemble

    scen = _write(tmp_path / "s.yaml", _with(stop={"rounds": 1}))
    built: list[int] = []
    real_build = hierfl.assemble.build
    monkeypatch.setattr(hierfl.assemble, "build", lambda *a, **k: built.append(1) or real_build(*a, **k))
    a_file = _write(tmp_path / "file.txt", "keep me")
    for bad in (a_file, a_file / "sub"):
        assert main(["run", str(scen), "--out", str(bad), "-q"]) == 2
        err = capsys.readouterr().err
        assert "--out" in err and "Traceback" not in err, err
    assert not built and a_file.read_text() == "keep me"

    mine = tmp_path / "mine"  # `--out .` in a folder of the user's own files
    mine.mkdir()
    _write(mine / "config.yaml", "my: own file\n")
    assert main(["run", str(scen), "--out", str(mine), "-q"]) == 2
    assert main(["run", str(scen), "--out", str(mine), "-q", "--force"]) == 2  # not even with --force
    assert "not a run directory" in capsys.readouterr().err
    assert (mine / "config.yaml").read_text() == "my: own file\n" and not built

    run = tmp_path / "run"
    assert main(["run", str(scen), "--out", str(run), "-q"]) == 0
    first = (run / "metrics.jsonl").read_text()
    _write(run / "notes.txt", "mine")
    assert main(["run", str(scen), "--out", str(run), "-q"]) == 2  # an earlier run: refused
    assert "--force" in capsys.readouterr().err and (run / "metrics.jsonl").read_text() == first
    assert main(["run", str(scen), "--out", str(run), "-q", "--force"]) == 0
    assert "notes.txt" in capsys.readouterr().err and (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_prepare_dir_hook_for_resume(tmp_path):
    from hierfl.output.rundir import RunDirError, prepare_dir

    run = tmp_path / "r"
    assert prepare_dir(run) == []
    _write(run / "metrics.jsonl", "{}\n")
    with pytest.raises(RunDirError):
        prepare_dir(run)
    assert prepare_dir(run, resume=True) == [] and (run / "metrics.jsonl").exists()  # kept as it is
    with pytest.raises(RunDirError, match="no such run directory"):
        prepare_dir(tmp_path / "none", resume=True)


# -- --address ---------------------------------------------------------------------------------------------

def test_address_with_nothing_listening_fails_fast(tmp_path, capsys):
    # the start-up's probe (tests/runtime/test_startup.py): a clear error within seconds, not a hang
    scen = _write(tmp_path / "s.yaml", _with(runtime={"executor": "ray"}))
    t0 = time.perf_counter()
    assert main(["run", str(scen), "--address", "127.0.0.1:1", "--out", str(tmp_path / "o"), "-q"]) == 1
    err = capsys.readouterr().err
    assert time.perf_counter() - t0 < 15 and "nothing answers at 127.0.0.1:1" in err, err
    assert "Traceback" not in err


# -- SIGTERM ---------------------------------------------------------------------------------------------

@pytest.fixture(params=["local", "ray"])
def executor_args(request: pytest.FixtureRequest) -> list[str]:
    """CLI arguments for each executor; Ray joins the session's instance (a second driver: no cluster start-up)."""
    if request.param == "local":
        return ["--executor", "local"]
    return ["--executor", "ray", "--address", request.getfixturevalue("ray_address")]


@pytest.mark.slow
def test_sigterm_is_ctrl_c(tmp_path, executor_args):
    raw = _with(stop={"rounds": 100000, "virtual_time_s": 1e7}, runtime={"executor": "local", "workers": 1},
                evaluation={"every_s": 1.0})
    scen = _write(tmp_path / "s.yaml", raw)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "hierfl.cli", "run", str(scen), "--out", str(out), "-q",
                             *executor_args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until the run is under way (its first rounds are out)
            metrics = out / "metrics.jsonl"
            if metrics.exists() and metrics.read_text().count('"cloud_aggregate"') >= 3:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "interrupted" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds"] >= 3
    trace = json.loads((out / "trace.json").read_text())  # valid JSON, closing bracket and all
    assert any(e.get("name") == "aggregate" for e in trace)
    assert all(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())


# -- a full disk ---------------------------------------------------------------------------------------------

def test_full_disk_leaves_whole_lines_and_no_temporary_summary(tmp_path, monkeypatch):
    import hierfl.output.files as files
    from hierfl.driver import run_scenario

    real_write = os.write
    budget = {"bytes": 6000}

    def short_disk(fd: int, data: Any) -> int:  # the disk fills up part-way through a write
        if budget["bytes"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(data), budget["bytes"], 100)
        budget["bytes"] -= n
        return real_write(fd, bytes(data[:n]))

    monkeypatch.setattr(files.os, "write", short_disk)
    with pytest.raises(Exception) as info:
        run_scenario(tiny(stop={"rounds": 50}), tmp_path)
    assert "No space left on device" in str(info.value) and "disk is full" in str(info.value)
    for name in ("metrics.jsonl", "clusters.jsonl"):
        for line in (tmp_path / name).read_text().splitlines():
            json.loads(line)  # every line whole
    trace = (tmp_path / "trace.json").read_text()
    json.loads(trace.rstrip().rstrip(",") + ("" if trace.rstrip().endswith("]") else "]"))  # a valid prefix
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left" in summary["error"]
    assert not (tmp_path / "summary.json.tmp").exists()

    def full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(files.OutputWriteError, match="summary.json: No space left on device"):
        files.write_summary(tmp_path, {"status": "completed"})
    assert not (tmp_path / "summary.json.tmp").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"  # the earlier one, whole


# -- non-finite updates --------------------------------------------------------------------------------------

QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")
LR_1E6 = ["--set", "training.lr=1e6", "--set", "runtime.executor=local", "--set", "stop.rounds=3"]


def test_lr_1e6_diverges_with_device_job_and_time(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["run", QUICKSTART, *LR_1E6, "--out", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "run diverged" in err and "device 15 job 0" in err and "t=0.525577s" in err, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["stop_reason"] == "diverged"
    assert summary["rounds"] == 0 and "time_to_target_s" not in summary


def test_lr_1e6_drop_leaves_every_update_out(tmp_path, capsys):
    from hierfl.assemble import build

    out = tmp_path / "o"
    assert main(["run", QUICKSTART, *LR_1E6, "--set", "robustness.on_nonfinite=drop", "--out", str(out), "-q"]) == 0
    capsys.readouterr()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    dropped = [x for x in lines if x["event"] == "nonfinite_update"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 3
    assert len(dropped) == summary["totals"]["nonfinite_dropped"] == summary["totals"]["train_jobs"] > 0
    assert len({(x["device"], x["job"]) for x in dropped}) == len(dropped)  # each update counted once
    sc = load_scenario(QUICKSTART, ["runtime.executor=local"])
    init = np.asarray(build(sc).init_params, dtype=np.float32)
    np.testing.assert_array_equal(np.load(out / "final_model.npy"), init)  # nothing finite arrived: unmoved
    evals = [x for x in lines if x["event"] == "eval"]
    assert evals[-1]["accuracy"] == evals[0]["accuracy"] == summary["final_accuracy"]


def _poison(monkeypatch: pytest.MonkeyPatch, device: int) -> None:
    """Device ``device``'s every update is NaN (as a device whose training blew up)."""
    from hierfl.runtime.roles import DeviceHost

    real = DeviceHost._train

    def train(self, dev, seed, spec, params, control, out, **kw):  # noqa: ANN001, ANN202
        result, stats = real(self, dev, seed, spec, params, control, out, **kw)
        if dev == device:
            result[:] = np.nan
        return result, stats

    monkeypatch.setattr(DeviceHost, "_train", train)


@pytest.mark.parametrize("protocol", [
    {"name": "fedavg", "fraction": 1.0},
    {"name": "fedasync"},
    {"name": "hierfavg", "kappa1": 2, "kappa2": 1},
])
def test_one_poisoned_device_is_dropped_at_every_tier(tmp_path, monkeypatch, protocol):
    from hierfl.driver import run_scenario

    _poison(monkeypatch, 1)
    extra: dict[str, Any] = {"topology": {"edge_servers": 2}} if protocol["name"] == "hierfavg" else {}
    with pytest.raises(Exception, match="device 1 job 0: the update is not finite"):
        run_scenario(tiny(protocol=protocol, stop={"rounds": 4}, **extra), tmp_path / "fail")
    assert json.loads((tmp_path / "fail" / "summary.json").read_text())["status"] == "diverged"
    res = run_scenario(tiny(protocol=protocol, stop={"rounds": 4}, robustness={"on_nonfinite": "drop"}, **extra),
                       tmp_path / "drop")
    dropped = res.summary["totals"]["nonfinite_dropped"]
    assert dropped >= 1 and np.isfinite(res.final_params).all()
    assert res.summary["final_accuracy"] > 0.6  # the other devices still learn (3 well separated blobs)
    lines = [json.loads(x) for x in (tmp_path / "drop" / "metrics.jsonl").read_text().splitlines()]
    assert {x["device"] for x in lines if x["event"] == "nonfinite_update"} == {1}


def test_nonfinite_global_model_diverges_and_never_reaches_target(tmp_path):
    from hierfl.driver import RunError, run_scenario

    sc = tiny(server_optimizer={"name": "fedavg", "lr": 1e38}, stop={"rounds": 5})
    with pytest.raises(RunError, match="global model is not finite"):
        run_scenario(sc, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["final_accuracy"] is None
    evals = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in evals if x["event"] == "eval"]
    assert evals[0]["accuracy"] is not None and evals[-1]["accuracy"] is None and evals[-1]["loss"] is None


def test_shipped_nonfinite_drop_scenario(tmp_path, capsys):
    scen = str(ROOT / "scenarios" / "nonfinite_drop.yaml")
    assert main(["run", scen, "--out", str(tmp_path / "a"), "-q"]) == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert (summary["status"], summary["rounds"], summary["totals"]["nonfinite_dropped"]) == ("completed", 3, 1)
    assert np.isfinite(np.load(tmp_path / "a" / "final_model.npy")).all()
    assert main(["run", scen, "--set", "stop.rounds=10", "--out", str(tmp_path / "b"), "-q"]) == 1
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (summary["status"], summary["rounds"], summary["totals"]["nonfinite_dropped"]) == ("diverged", 5, 18)
    assert summary["final_accuracy"] is None and "test loss inf" in summary["error"]
    capsys.readouterr()


def test_warnings_for_settings_that_cannot_work(tmp_path, capsys):
    from hierfl.assemble import build
    from hierfl.driver.sanity import run_warnings

    sc = tiny(straggler={"name": "deadline", "seconds": 0.01}, stop={"rounds": None, "virtual_time_s": 500.0},
              evaluation={"every_s": 0.001})
    warnings = run_warnings(sc, build(sc))
    assert len(warnings) == 2, warnings
    assert "500,000 evaluations" in warnings[0]
    assert "straggler.seconds = 0.01 s is shorter than the fastest device's download + local training" in warnings[1]
    sc = tiny(devices={"latency_ms": 1e308}, stop={"rounds": None, "virtual_time_s": 60.0})
    (warning,) = run_warnings(sc, build(sc))
    assert "longer than stop.virtual_time_s = 60 s" in warning
    assert run_warnings(tiny(), build(tiny())) == []
    scen = _write(tmp_path / "s.yaml", _with(straggler={"name": "deadline", "seconds": 0.01},
                                             stop={"rounds": None, "virtual_time_s": 2.0}))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "-q"]) == 0
    assert "every round will be empty" in capsys.readouterr().err
    # without a time budget such a run would never end (empty rounds are no cloud aggregations)
    scen = _write(tmp_path / "s.yaml", _with(straggler={"name": "deadline", "seconds": 0.01}, stop={"rounds": 1}))
    assert main(["run", str(scen), "--out", str(tmp_path / "p"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "straggler.seconds" in err and "would never end" in err and not (tmp_path / "p").exists()


def test_byzantine_nonfinite_sender_under_the_plain_mean_diverges(tmp_path):
    # with Byzantine senders the robust layer owns update screening (Byzantine robustness); the plain mean screens
    # nothing, so the global model turns NaN and the global-model check ends the run
    from hierfl.driver import RunError, run_scenario

    attack = [{"at_s": 0.0, "attack": {"select": {"ids": [0]}, "behavior": {"name": "nonfinite"}}}]
    with pytest.raises(RunError, match="global model is not finite"):
        run_scenario(tiny(stop={"rounds": 2}, events=attack), tmp_path / "mean")
    assert json.loads((tmp_path / "mean" / "summary.json").read_text())["status"] == "diverged"
    res = run_scenario(tiny(stop={"rounds": 2}, events=attack, aggregation={"cloud": {"name": "geomed"}}),
                       tmp_path / "geomed")
    assert res.summary["status"] == "completed" and np.isfinite(res.final_params).all()
