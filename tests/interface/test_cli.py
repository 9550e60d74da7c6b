"""End to end through the CLI: every output file of the contract, plot and timeline."""

import csv
import json
from pathlib import Path

import yaml

from hierfl.cli import main
from hierfl.scenario.loader import load_scenario
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


def test_run_writes_the_output_contract_then_plot_and_timeline(tmp_path, capsys):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({**TINY, "topology": {"edge_servers": 2},
                                    "protocol": {"name": "hierfavg", "kappa1": 3, "kappa2": 2},
                                    "training": {"batch_size": 10, "lr": 0.1}}))
    out = tmp_path / "run"
    assert main(["run", str(scen), "--out", str(out), "-q", "--set", "stop.rounds=2"]) == 0
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "devices.csv", "clusters.jsonl", "trace.json",
                 "final_model.npy"):
        assert (out / name).stat().st_size > 0, name
    resolved = load_scenario(out / "config.yaml")  # the resolved config runs again as is
    assert resolved.stop.rounds == 2 and resolved.versions and "torch" in resolved.versions
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert all({"t", "wall_s", "event"} <= set(x) for x in lines)
    evals = [x for x in lines if x["event"] == "eval"]
    assert evals[0]["t"] == 0.0 and {"accuracy", "loss", "round", "bytes_cloud", "edge_aggregations"} <= set(evals[-1])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 2
    assert {"final_accuracy", "time_to_target_s", "virtual_time_s", "wall_s"} <= set(summary)
    rows = list(csv.DictReader((out / "devices.csv").open()))
    assert len(rows) == 4 and {r["edge"] for r in rows} == {"0", "1"} and float(rows[0]["speed_sps"]) == 100
    clusters = [json.loads(x) for x in (out / "clusters.jsonl").read_text().splitlines()]
    assert clusters[0]["members"] == [[0, 2], [1, 3]] and clusters[0]["reason"] == "initial"
    trace = json.loads((out / "trace.json").read_text())
    names = {(e.get("pid"), e["name"]) for e in trace if e["ph"] in ("X", "i")}
    assert {(3, "train"), (3, "download"), (3, "upload"), (2, "aggregate"), (2, "upload"), (1, "aggregate")} <= names

    png = tmp_path / "acc.svg"
    assert main(["plot", str(out), str(out), "-o", str(png), "--x", "round"]) == 0
    assert png.read_text().startswith("<?xml")
    tl = tmp_path / "tl.png"
    assert main(["timeline", str(out), "-o", str(tl)]) == 0
    assert tl.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(out), "-o", str(tmp_path / "x.gif")]) == 2
    assert main(["plot", str(tmp_path / "nowhere")]) == 2
    capsys.readouterr()


def test_quickstart_reaches_target_on_local_executor(tmp_path):
    from hierfl.driver import run_scenario

    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["runtime.executor=local"])
    summary = run_scenario(sc, tmp_path).summary
    assert sc.devices.count == 20 and sc.protocol.name == "fedavg"
    assert summary["final_accuracy"] >= 0.8 and summary["time_to_target_s"] is not None


def test_validate_a_sweep_file_checks_every_trial(tmp_path, capsys):
    shipped = ROOT / "scenarios" / "sweeps" / "stragglers_seeds.yaml"
    assert main(["validate", str(shipped)]) == 0
    out = capsys.readouterr().out
    assert "all 9 trials valid" in out and "t004_straggler=deadline_seed=2: OK" in out
    # one grid point is invalid: its trials are named, the others are not, exit 2
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(TINY))
    sweep = {"name": "bad", "scenario": "base.yaml", "grid": {"protocol.fraction": [0.5, 1.5]}, "seeds": [1, 2]}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    assert main(["validate", str(tmp_path / "sweep.yaml")]) == 2
    err = capsys.readouterr().err
    assert "trial t002_protocol.fraction=1.5_seed=1: protocol.fraction" in err
    assert "trial t003_protocol.fraction=1.5_seed=2: protocol.fraction" in err
    assert "t000_" not in err and "2 of 4 trials invalid" in err and "required key is missing" not in err
    # --set reaches every trial; --seed is refused; a missing base file is named
    assert main(["validate", str(tmp_path / "sweep.yaml"), "--set", "protocol.fraction=0.25"]) == 0
    assert main(["validate", str(shipped), "--seed", "3"]) == 2
    sweep["scenario"] = "nowhere.yaml"
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    assert main(["validate", str(tmp_path / "sweep.yaml")]) == 2
    assert "base scenario file not found" in capsys.readouterr().err


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, deeper in _subparsers(sub):
                    yield f"{name} {inner}", deeper


def test_every_command_has_a_description_and_every_option_help_with_its_default():
    import argparse

    from hierfl.cli import _parser

    problems = []
    for name, sub in _subparsers(_parser()):
        if not (sub.description or "").strip():
            problems.append(f"{name}: no description")
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                problems.append(f"{label}: no help")
            elif action.option_strings and not isinstance(action, argparse._StoreTrueAction) \
                    and "default" not in action.help:
                problems.append(f"{label}: the help does not state the default")
    assert not problems, "\n".join(problems)


def test_the_summary_line_gives_the_commands_real_times_on_one_line(tmp_path, capsys, monkeypatch):
    import re

    import hierfl.cli as cli

    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(TINY))
    out = tmp_path / ("a-run-directory-whose-name-is-long-enough-to-push-the-line-past-eighty-columns" * 2)
    monkeypatch.setattr(cli, "_LAUNCHED", cli._LAUNCHED - 100.0)  # as if launched 100 s ago
    assert main(["run", str(scen), "--out", str(out), "-q"]) == 0
    err = capsys.readouterr().err
    done = [line for line in err.splitlines() if line.startswith("done:")]
    assert len(done) == 1 and done[0].endswith(str(out)), err  # not wrapped at 80 columns
    wall, startup = (float(x) for x in re.search(r"wall ([\d.]+)s \(start-up ([\d.]+)s\)", done[0]).groups())
    summary = json.loads((out / "summary.json").read_text())
    # (each printed to 0.1 s: their difference is off by up to 0.1 s)
    assert wall >= 100.0 and startup >= 100.0 and wall - startup <= summary["wall_s"] + 0.1 + 1e-9
    # summary.json's start-up counts from the executor's start, the data's build included
    assert summary["startup_s"] <= summary["wall_s"]


def test_table_of_a_run_directory_says_what_it_reads(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    assert main(["table", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "not a sweep directory" in err and "--group-by" not in err and "hierfl report" in err
    assert main(["plot", str(tmp_path / "run"), "--group-by", "seed"]) == 2
    assert "leave out --group-by" in capsys.readouterr().err
