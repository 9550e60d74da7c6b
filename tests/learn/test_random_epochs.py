"""The ``random_epochs`` straggler policy: FedProx's systems heterogeneity (Li et al., MLSys 2020, §5.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hierfl.core.rng import stream
from hierfl.driver import run_scenario
from hierfl.policies.straggler import RandomEpochs
from tests.badinput import assert_refused
from tests.conftest import TINY, tiny


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _trace(run: Path) -> list[dict]:
    text = (run / "trace.json").read_text().rstrip().rstrip(",")
    return json.loads(text + ("]" if not text.endswith("]") else ""))


def _scenario(partial: bool, fraction: float = 0.5, **kw):
    # 8 devices, 4 per round, E = 5: round(4·(1 − 0.5)) = 2 active devices, 2 stragglers per round
    return tiny(devices={"count": 8}, protocol={"name": "fedavg", "fraction": 0.5},
                training={"epochs": 5, "batch_size": 10},
                straggler={"name": "random_epochs", "fraction": fraction, "partial": partial},
                stop={"rounds": 3}, evaluation={"every_s": None}, **kw)


def test_straggler_count_follows_the_reference_code():
    # active = round(K·(1 − fraction)) (litian96/FedProx), the rest are stragglers
    assert [RandomEpochs(fraction=0.9).assigned_stragglers(10), RandomEpochs(fraction=0.5).assigned_stragglers(10),
            RandomEpochs(fraction=0.0).assigned_stragglers(10), RandomEpochs(fraction=0.99).assigned_stragglers(10),
            RandomEpochs(fraction=0.9).assigned_stragglers(4), RandomEpochs(fraction=0.9).assigned_stragglers(1)] \
        == [9, 5, 0, 9, 3, 0]


def test_fedavg_drops_the_stragglers_and_fedprox_keeps_their_partial_epochs(tmp_path):
    drop = run_scenario(_scenario(False), tmp_path / "drop")
    keep = run_scenario(_scenario(True), tmp_path / "keep")
    dropped = [r for r in _lines(tmp_path / "drop") if r["event"] == "round_close"]
    kept = [r for r in _lines(tmp_path / "keep") if r["event"] == "round_close"]
    assert len(dropped) == len(kept) == 3
    # dropping: 2 of 4 selected per round compute and arrive; nothing is wasted (dropped before computing)
    assert [(r["selected"], r["arrived"]) for r in dropped] == [(4, 2)] * 3
    assert drop.summary["totals"]["train_jobs"] == 6 and drop.summary["totals"]["stragglers_dropped"] == 6
    assert drop.summary["totals"]["wasted_compute_s"] == 0
    # keeping: all 4 arrive; the stragglers ran 1 … E − 1 = 4 epochs, the active ones E = 5
    assert [(r["selected"], r["arrived"]) for r in kept] == [(4, 4)] * 3
    assert keep.summary["totals"]["train_jobs"] == 12 and keep.summary["totals"]["stragglers_dropped"] == 0
    partial = [e for e in _trace(tmp_path / "keep") if e.get("name") == "partial_work"]
    assert len(partial) == 6 and all(1 <= e["args"]["epochs"] <= 4 and e["args"]["of"] == 5 for e in partial)
    # the stragglers are one seeded draw per round, the same whether they are dropped or kept
    seed, bounds = keep.summary["seed"], [0.0] + [r["t"] for r in kept]
    for r in range(3):
        sel = sorted(int(i) for i in stream(seed, "fedavg.select", r).choice(8, size=4, replace=False))
        want = sorted(int(i) for i in stream(seed, "straggler.assigned.cloud", 0, r).choice(sel, size=2, replace=False))
        got = sorted(e["tid"] for e in partial if bounds[r] <= e["ts"] / 1e6 <= bounds[r + 1])
        assert got == want
    drop_bounds = [0.0] + [r["t"] for r in dropped]
    no_compute = [e for e in _trace(tmp_path / "drop") if e.get("name") == "straggler_dropped"]
    for r in range(3):
        sel = sorted(int(i) for i in stream(seed, "fedavg.select", r).choice(8, size=4, replace=False))
        want = sorted(int(i) for i in stream(seed, "straggler.assigned.cloud", 0, r).choice(sel, size=2, replace=False))
        assert sorted(e["tid"] for e in no_compute if drop_bounds[r] <= e["ts"] / 1e6 <= drop_bounds[r + 1]) == want
        assert dropped[r]["dropped"] == 0  # dropped before computing: not waited for, not late at the close
    # compute: samples per device × epochs / speed — the kept stragglers' epochs, drawn per device and round
    from hierfl.assemble import build

    world = build(_scenario(True)).world
    straggler_compute = sum(int(world.samples[e["tid"]]) * e["args"]["epochs"] / float(world.speed_sps[e["tid"]])
                            for e in partial)
    assert straggler_compute > 0
    assert keep.summary["totals"]["compute_s"] - straggler_compute == pytest.approx(
        drop.summary["totals"]["compute_s"], rel=1e-9)


def test_one_device_of_every_round_always_computes(tmp_path):
    # fraction 0.9 of 4 would leave round(0.4) = 0 active devices: one is kept active, so no round is empty
    res = run_scenario(_scenario(False, fraction=0.9), tmp_path)
    assert res.summary["totals"]["train_jobs"] == 3 and res.summary["totals"]["stragglers_dropped"] == 9
    assert [r["arrived"] for r in _lines(tmp_path) if r["event"] == "round_close"] == [1, 1, 1]


def test_bad_fraction_is_refused_with_its_key_path(tmp_path, capsys):
    raw = dict(TINY, straggler={"name": "random_epochs", "fraction": 1.0})
    assert_refused(tmp_path, capsys, raw, "straggler")
