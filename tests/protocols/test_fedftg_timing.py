"""FedFTG in the real driver: round times, the server job's exact duration and the bad placements refused.

tiny's blobs: 240 training samples (5 features, 3 classes) split iid over 4 devices → 60 each; every
device trains each round (fraction 1). Links without latency: downlink 0.016 Mbit/s (2000 B/s), uplink
0.008 Mbit/s (1000 B/s); 100 samples/s. The model is a logistic regression: 5·3 + 3 = 18 parameters,
72 bytes; F = 2·5·3 = 30 FLOPs per sample. A label histogram is 4·C = 12 bytes.

The generator for flat 5-feature samples with noise_dim 2 and width 2 has the multiply-adds
2·2 + 3·2 (noise and label maps) + 4·4 + 4·2 + 2·5 = 44 → F_G = 88 FLOPs. One job with B = 4, I = 2,
I_g = 1, I_d = 1 and K = 4 teachers costs

    B·I·[I_g·K·3(F_G + 2F) + I_d·(F_G + 3F + K·F)] = 8·[4·3·148 + (88 + 90 + 120)] = 8·2074 = 16592 FLOPs,

1.6592 s at the cloud's 1e4 FLOP/s (servers.cloud.gflops 1e-5). Per device and round: download
72/2000 = 0.036 s, 2 epochs on 60 samples 1.2 s, upload 0.072 s (+ 0.012 s with the histogram).

* round 0 closes at 0.036 + 1.2 + 0.084 = 1.32; its job runs 1.32 → 2.9792, when the aggregation is
  complete and the fine-tuned model is broadcast;
* round 1 closes at 2.9792 + 0.036 + 1.2 + 0.072 = 4.2872 (4.2992 when every upload carries the
  histogram); its job ends at 5.9464.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from hierfl.assemble import build
from hierfl.config.errors import ConfigError
from hierfl.driver import run_scenario
from hierfl.scenario.loader import validate_raw
from tests.conftest import TINY

PROTOCOL = {"name": "fedftg", "fraction": 1.0, "iters": 2, "gen_steps": 1, "student_steps": 1, "batch_size": 4,
            "noise_dim": 2, "gen_width": 2}


def _raw(**protocol):
    raw = copy.deepcopy(TINY)
    raw["devices"].update(speed_sps=100, uplink_mbps=0.008, downlink_mbps=0.016, latency_ms=0)
    raw.update(protocol={**PROTOCOL, **protocol}, servers={"cloud": {"gflops": 1e-5}},
               stop={"virtual_time_s": 6.0})
    return raw


def _run(tmp_path, **protocol):
    sc = validate_raw(_raw(**protocol))
    built = build(sc)
    assert [len(p) for p in built.parts] == [60] * 4
    out = tmp_path / "run"
    run_scenario(sc, out, built=built)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    trace = json.loads((out / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    jobs = [e for e in events if e.get("name") == "server_job:fedftg"]
    summary = json.loads((out / "summary.json").read_text())
    return built, lines, jobs, summary


def test_a_run_bounded_by_rounds_ends_with_the_fine_tuned_model(tmp_path):
    raw = _raw()
    raw["stop"] = {"rounds": 1}
    sc = validate_raw(raw)
    out = tmp_path / "run"
    run_scenario(sc, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["virtual_time_s"] == pytest.approx(2.9792, abs=1e-9)
    assert summary["server_jobs"]["tasks"] == {"cloud": 1}


def test_round_and_server_job_times_by_hand(tmp_path):
    built, lines, jobs, summary = _run(tmp_path)
    # the label histograms the cloud weighs the teachers by: each device's training labels per class
    counts = built.world.label_counts
    assert counts.shape == (4, 3)
    assert counts.sum(axis=1).tolist() == [60] * 4
    assert counts[1].tolist() == np.bincount(built.dataset.y_train[built.parts[1]], minlength=3).tolist()
    closes = [x["t"] for x in lines if x["event"] == "round_close"]
    assert closes == pytest.approx([1.32, 4.2872], abs=1e-9)
    aggs = [x["t"] for x in lines if x["event"] == "cloud_aggregate"]
    assert aggs == pytest.approx([2.9792, 5.9464], abs=1e-9)
    # the two server jobs on the cloud's lane: 1.6592 s each, from the round's close (µs in the trace)
    assert [j["args"]["flops"] for j in jobs] == [16592.0, 16592.0]
    assert [j["ts"] / 1e6 for j in jobs] == pytest.approx([1.32, 4.2872], abs=1e-9)
    assert [j["dur"] / 1e6 for j in jobs] == pytest.approx([1.6592, 1.6592], abs=1e-9)
    assert jobs[0]["args"]["gen_flops"] == 88.0 and jobs[0]["args"]["teachers"] == 4.0
    # uplink bytes: 4 × 84 in round 0, 4 × 72 in round 1; downlink 4 × 72 per round, 3 rounds begun
    last = [x for x in lines if x["event"] == "eval"][-1]
    assert last["t"] == 6.0
    assert last["bytes_cloud"] == 4 * 84 + 4 * 72 + 3 * 4 * 72
    # the generator lives in the cloud's server state (weights and batch-norm statistics)
    assert summary["server_jobs"]["tasks"] == {"cloud": 2}
    assert summary["server_jobs"]["state_bytes"]["cloud"] > 0


def test_histograms_every_round_lengthen_every_upload(tmp_path):
    _, lines, _, _ = _run(tmp_path, histograms="every_round")
    closes = [x["t"] for x in lines if x["event"] == "round_close"]
    assert closes == pytest.approx([1.32, 4.2992], abs=1e-9)


def test_placements_fedftg_cannot_run_at_are_refused_with_their_keys():
    raw = _raw()
    raw["topology"] = {"edge_servers": 2}
    raw["training"]["trainer"] = "scaffold"
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert {p.path for p in info.value.problems} == {"topology.edge_servers", "training.trainer"}
    assert "allowed: sgd, fedprox" in str(info.value)
    raw = _raw(md_loss="paper")
    with pytest.raises(ConfigError) as info:
        validate_raw(raw)
    assert [p.path for p in info.value.problems] == ["protocol.md_loss"]
    assert "kl" in str(info.value)


def test_an_interrupted_run_resumes_to_the_same_bits_with_its_generator(tmp_path):
    """Ctrl-C after round 2, resume: the uninterrupted run's files (the generator comes back from the
    checkpoint; a fresh one would change every later fine-tuning)."""
    from hierfl.driver import resume_run
    from tests.driver.test_recovery import _stop_at, assert_same_run

    raw = _raw()
    raw["stop"] = {"rounds": 4}
    raw["runtime"]["checkpoint"] = {"every_cloud_aggregations": 1}
    ref = tmp_path / "ref"
    run_scenario(validate_raw(raw), ref)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_raw(raw), out, progress=_stop_at(2))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 0 < summary["checkpoint_t"] < 4 * 2.9
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_the_cli_refuses_an_edge_placement_with_exit_status_2(tmp_path, capsys):
    from pathlib import Path

    from hierfl.cli import main

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "fedftg.yaml"
    for key, value, allowed in (("topology.edge_servers", "2", "allowed: 0"),
                                ("protocol.md_loss", "paper", "'code' or 'kl'")):
        code = main(["run", str(scenario), "--set", f"{key}={value}", "--out", str(tmp_path / "x"), "-q"])
        err = capsys.readouterr().err
        assert code == 2 and not (tmp_path / "x").exists()
        assert key in err and allowed in err and "Traceback" not in err


def test_fine_tuning_at_gpu_edges_by_hand(tmp_path):
    """fedftg_hier with at: edge in the real driver. Edges by round robin: edge 0 = {0, 2}, edge 1 = {1, 3};
    the edge ↔ cloud link runs at the devices' rates (1000 B/s up, 2000 B/s down), no latency. κ1 = 6 steps
    of batch 10 (60 samples: 0.6 s), κ2 = 1. Each edge's job has K = 2 teachers:
    8·[2·3·148 + (88 + 90 + 60)] = 8·1126 = 9008 FLOPs, 0.9008 s at the edges' 1e4 FLOP/s.

    cloud round 0: model down to the devices 0.036, train 0.6, upload with the histogram 0.084 → the edge
    round closes at 0.72; its job ends at 1.6208 (edge aggregation); edge → cloud 0.072 → 1.6928 (cloud
    aggregation). Round 1: cloud → edge 0.036, edge → device 0.036, train 0.6, upload 0.072 → 2.4368;
    job → 3.3376; cloud at 3.4096.
    """
    raw = _raw(at="edge", kappa1=6, kappa2=1, fraction=1.0)
    raw["protocol"]["name"] = "fedftg_hier"
    raw["topology"] = {"edge_servers": 2, "grouping": "round_robin",
                       "edge_cloud": {"uplink_mbps": 0.008, "downlink_mbps": 0.016, "latency_ms": 0}}
    raw["servers"] = {"edge": {"gflops": 1e-5}}
    raw["stop"] = {"rounds": 2}
    sc = validate_raw(raw)
    out = tmp_path / "run"
    run_scenario(sc, out)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    edge_aggs = [x["t"] for x in lines if x["event"] == "edge_aggregate"]
    assert edge_aggs == pytest.approx([1.6208, 1.6208, 3.3376, 3.3376], abs=1e-9)
    cloud_aggs = [x["t"] for x in lines if x["event"] == "cloud_aggregate"]
    assert cloud_aggs == pytest.approx([1.6928, 3.4096], abs=1e-9)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["server_jobs"]["tasks"] == {"edge": 4}
    assert summary["server_jobs"]["busy_s"]["edge"] == pytest.approx(4 * 0.9008, abs=1e-9)


def test_fine_tuning_at_the_cloud_of_a_hierarchy_by_hand(tmp_path):
    """fedftg_hier at the cloud, the same hierarchy as above: the edge round closes at 0.72 (edge
    aggregation); the edge model goes up with the edge's histogram, (72 + 12)/1000 = 0.084 → 0.804; the
    cloud's job over the 2 edge models (9008 FLOPs at 1e4 FLOP/s) ends at 1.7048 (cloud aggregation).
    Round 1: down 0.036 + 0.036, train 0.6, up 0.072 → edge at 2.4488; to the cloud 0.072 (no histogram:
    the members did not change) → 2.5208; the job ends at 3.4216."""
    raw = _raw(kappa1=6, kappa2=1, fraction=1.0)
    raw["protocol"]["name"] = "fedftg_hier"
    raw["topology"] = {"edge_servers": 2, "grouping": "round_robin",
                       "edge_cloud": {"uplink_mbps": 0.008, "downlink_mbps": 0.016, "latency_ms": 0}}
    raw["stop"] = {"rounds": 2}
    out = tmp_path / "run"
    run_scenario(validate_raw(raw), out)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    edge_aggs = [x["t"] for x in lines if x["event"] == "edge_aggregate"]
    assert edge_aggs == pytest.approx([0.72, 0.72, 2.4488, 2.4488], abs=1e-9)
    cloud_aggs = [x["t"] for x in lines if x["event"] == "cloud_aggregate"]
    assert cloud_aggs == pytest.approx([1.7048, 3.4216], abs=1e-9)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["server_jobs"]["tasks"] == {"cloud": 2}
