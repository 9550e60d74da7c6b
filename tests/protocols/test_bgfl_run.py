"""BGFL through the real driver: jobs train on D_i ∪ D_g (and take its time), refused placements, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hierfl.driver import run_scenario
from tests.conftest import tiny

ROOT = Path(__file__).resolve().parents[2]
BGFL = {"name": "bgfl", "chain_scope": "global", "alpha": 0.5, "committee_fraction": 0.5, "fraction": 1.0,
        "block_time_s": 1.0, "block_interval": "fixed"}


def _run(tmp_path: Path, out: str, **knobs):
    res = run_scenario(tiny(protocol={**BGFL, **knobs}, stop={"rounds": 2}), tmp_path / out)
    trace = json.loads((tmp_path / out / "trace.json").read_text())
    return res, trace, json.loads((tmp_path / out / "summary.json").read_text())


def test_jobs_train_on_the_shared_set_and_take_its_time(tmp_path: Path) -> None:
    # 4 devices × 60 samples (iid), 100 samples/s, 2 epochs. Two sharers give ⌊0.5·60 + ½⌋ = 30 each: |D_g| = 60.
    # A sharer trains on 60 + 30 (the other's share) = 90 samples: 1.8 s; the others on 120: 2.4 s
    res, trace, summary = _run(tmp_path, "a")
    durs = sorted({round(e["dur"] / 1e6, 9) for e in trace if e.get("name") == "train"})
    assert durs == [1.8, 2.4]
    sharers = {e["args"]["device"] for e in trace if e.get("name") == "submit" and e["args"]["what"] == "share"}
    assert len(sharers) == 2
    assert {e["tid"] for e in trace if e.get("name") == "train" and round(e["dur"] / 1e6, 9) == 1.8} == sharers
    # on the chain: 4·(4·3 + 4) = 64 bytes of histograms, 2 shares of 30 samples × (4·5 + 4) bytes, 2 rounds'
    # records of (4 + 1) × 32 bytes of hashes
    assert summary["totals"]["bytes_on_chain"] == 64 + 2 * 30 * 24 + 2 * 5 * 32
    # confirmed one block (1 s, fixed) after the block that holds it, plus the propagation of a full block to
    # the committee: 1e6 bytes over a 1 Mbit/s downlink plus 20 ms
    for e in (e for e in trace if e.get("name") == "confirm"):
        assert e["ts"] / 1e6 == pytest.approx(e["args"]["block"] + 2 + 8.02, abs=1e-9)
    names = {e["args"]["name"] for e in trace if e.get("ph") == "M" and e.get("pid") == 4 and "tid" in e}
    assert names == {"chain 0"}
    # without sharing every job is 2 epochs of 60: 1.2 s, and the model differs
    plain, trace0, _ = _run(tmp_path, "b", alpha=0.0)
    assert sorted({round(e["dur"] / 1e6, 9) for e in trace0 if e.get("name") == "train"}) == [1.2]
    assert not np.array_equal(plain.final_params, res.final_params)
    again, _, _ = _run(tmp_path, "c")
    assert np.array_equal(again.final_params, res.final_params)


@pytest.mark.parametrize("override, key, text", [
    (["protocol.chain_scope=edge"], "protocol.chain_scope", "allowed: global"),
    (["topology.edge_servers=2", "protocol.chain_scope=global"], "protocol.chain_scope", "allowed: edge"),
    (["protocol.difficulty_bits=10"], "protocol.hash_rate_hps", "together"),
    (["protocol.selection=best"], "protocol.selection", "js_lowest"),
    (["protocol.alpha=1.5"], "protocol.alpha", "1"),
    (["protocol.malicious_sharers=0.5", "runtime.fast_path=true"], "runtime.fast_path", "allowed: false"),
])
def test_bad_input_is_refused_with_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], override: list[str],
                                           key: str, text: str) -> None:
    from hierfl.cli import main

    args = ["run", str(ROOT / "scenarios" / "bgfl.yaml"), "--out", str(tmp_path / "x"), "-q"]
    for item in override:
        args += ["--set", item]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert key in err and text in err


@pytest.mark.parametrize("stem", ["bgfl", "bgfl_edge"])
def test_resume_ends_as_the_uninterrupted_run(tmp_path: Path, stem: str) -> None:
    """Interrupted at 20 virtual seconds (a checkpoint every round) and resumed: the same files."""
    from hierfl.driver import resume_run
    from hierfl.scenario.loader import load_scenario
    from tests.protocols.test_gossip_runs import assert_same_run

    path = ROOT / "scenarios" / f"{stem}.yaml"
    sets = ["runtime.executor=local", "runtime.checkpoint.every_s=1", "runtime.checkpoint.every_cloud_aggregations=1",
            "stop.virtual_time_s=40"]
    ref = tmp_path / "ref"
    run_scenario(load_scenario(path, sets), ref, source=str(path))

    def stop(t: float, rounds: int, acc: float | None) -> None:
        if t >= 20:
            raise KeyboardInterrupt

    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(path, sets), out, progress=stop, source=str(path))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_t"] > 5  # after stage 1
    assert resume_run(out).summary["status"] == "completed"
    assert_same_run(ref, out)


def test_the_world_carries_class_histograms_only_for_protocols_that_ask() -> None:
    from hierfl.assemble import build

    built = build(tiny(protocol=BGFL))
    counts = built.world.label_counts
    assert counts is not None and counts.shape == (4, 3)
    for d, rows in enumerate(built.parts):  # each device's labels, counted
        assert counts[d].tolist() == np.bincount(built.dataset.y_train[rows], minlength=3).tolist()
    assert built.world.sample_bytes == 4 * (5 + 1)  # 5 float32 features and a 4-byte label
    assert build(tiny()).world.label_counts is None  # fedavg does not ask


def test_malicious_sharers_train_others_on_flipped_labels(tmp_path: Path) -> None:
    honest, trace, _ = _run(tmp_path, "honest")
    bad, trace_bad, _ = _run(tmp_path, "bad", malicious_sharers=1.0)
    spans = [(e["tid"], e["ts"], e["dur"]) for e in trace if e.get("name") == "train"]
    assert spans == [(e["tid"], e["ts"], e["dur"]) for e in trace_bad if e.get("name") == "train"]  # same times
    assert not np.array_equal(honest.final_params, bad.final_params)
