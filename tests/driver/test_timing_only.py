"""Timing-only mode (``training.trainer: none``, scale): the same times, selections and counters as training.

For every protocol, a shipped scenario runs twice — training, and timing only — and every output
is compared: metrics lines without wall-clock fields and without accuracy/loss, the trace without
the evaluation instants (which carry the accuracy), ``devices.csv`` and ``clusters.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hierfl.driver import run_scenario
from hierfl.protocols import PROTOCOLS
from hierfl.scenario.loader import load_scenario
from tests.golden import PROPERTY_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
# one shipped scenario per protocol (plus churn and a partial-work deadline, which change timings)
CASES = ["quickstart", "hierfavg", "fedasync", "fedbuff", "ahfl", "fedhisyn", "fedch", "fedch_churn", "churn",
         "stragglers_deadline", "hierfavg_contention", "fedat", "dpsgd_ring", "adpsgd_torus", "p2p_rgg", "coop", "bgfl"]
SHORT = ["stop.rounds=3", "stop.target_accuracy=null", "evaluation.target_accuracy=null",
         "runtime.executor=local"]
VOLATILE = ("wall_s", "startup_s", "accuracy", "loss", "consensus_distance", "node_accuracy_mean",
            "node_accuracy_min", "node_accuracy_max")


def _metrics(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append({k: v for k, v in rec.items() if k not in VOLATILE})
    return out


def _trace(run: Path) -> list[dict]:
    return [e for e in json.loads((run / "trace.json").read_text()) if e.get("name") != "evaluate"]


def test_every_protocol_is_covered():
    names = {load_scenario(ROOT / "scenarios" / f"{c}.yaml").protocol.name for c in CASES}
    assert names == {n for n in PROTOCOLS.names() if PROTOCOLS.get(n).decides_on_models is None}


def test_a_protocol_deciding_on_model_values_refuses_timing_only(tmp_path, capsys):
    """WSCC clusters by the similarity of trained updates: without training its clusters (and times) would differ."""
    from hierfl.cli import main

    code = main(["run", str(ROOT / "scenarios" / "wscc.yaml"), "--set", "training.trainer=none",
                 "--out", str(tmp_path / "x"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "x").exists()
    assert "training.trainer" in err and "cosine similarity" in err


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_timing_only_gives_the_training_runs_times_selections_and_counters(case, tmp_path):
    path = ROOT / "scenarios" / f"{case}.yaml"
    short = [*SHORT, *PROPERTY_OVERRIDES.get(case, ())]
    trained = run_scenario(load_scenario(path, short), tmp_path / "train", source=str(path))
    timing = run_scenario(load_scenario(path, [*short, "training.trainer=none"]), tmp_path / "none", source=str(path))
    serverless = type(load_scenario(path).protocol).serverless  # no server: no rounds, peers only
    assert trained.summary["rounds"] == timing.summary["rounds"] >= (0 if serverless else 1)
    assert _metrics(tmp_path / "train") == _metrics(tmp_path / "none")
    assert _trace(tmp_path / "train") == _trace(tmp_path / "none")
    for name in ("devices.csv", "clusters.jsonl"):
        assert (tmp_path / "train" / name).read_bytes() == (tmp_path / "none" / name).read_bytes()
    assert trained.summary["totals"] == timing.summary["totals"]
    assert trained.summary["virtual_time_s"] == timing.summary["virtual_time_s"]
    # and timing only trains and evaluates nothing: no accuracy anywhere
    assert timing.summary["final_accuracy"] is None and timing.summary["best_accuracy"] is None
    evals = [json.loads(x) for x in (tmp_path / "none" / "metrics.jsonl").read_text().splitlines()]
    assert all(e["accuracy"] is None for e in evals if e["event"] == "eval")
    assert trained.summary["final_accuracy"] is not None


def test_timing_only_refuses_accuracy_targets(tmp_path):
    from hierfl.cli import main

    code = main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--set", "training.trainer=none",
                 "--out", str(tmp_path / "x"), "-q"])
    assert code == 2 and not (tmp_path / "x").exists()
