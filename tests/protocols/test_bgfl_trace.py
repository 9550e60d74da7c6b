"""BGFL against the fake environment: the exact event trace of stage 1 and one round, by hand.

4 devices, flat (one chain at the cloud); unit_s = 1 + 0.5·d per epoch; every transfer 0.25 s; a block
exactly every 1 s (found at 1, 2, 3, …), 100 bytes a block, k_conf = 1, propagation 0.125 s; 2 classes,
10 bytes a sample.

Histograms (class 0, class 1): d0 (10, 0), d1 (0, 10), d2 (5, 5), d3 (6, 4); pooled (21, 19). The
committee (half the devices) is the two closest to the pooled distribution by JS: d2 and d3. With
α = 0.2 each shares ⌊2 + ½⌋ = 2 samples, (1, 1) (floors (1, 1) for d2; (1, 0) plus the larger remainder
for d3): D_g = (2, 2), 4 samples. Scores against D_g's (½, ½): d2 (6, 6) → 0, d3 (7, 5) → small,
d0 (12, 2) and d1 (2, 12) → large, so a round of 2 selects d2 and d3.
"""

from __future__ import annotations

import numpy as np

from hierfl.methods.bgfl.protocol import BGFLConfig
from tests.fakeenv import FakeEnv, FakeWorld

KNOBS = {"chain_scope": "global", "alpha": 0.2, "committee_fraction": 0.5, "fraction": 0.5, "block_time_s": 1.0,
         "block_interval": "fixed", "block_bytes": 100, "k_conf": 1, "propagation_s": 0.125}

STAGE1 = [
    (0.25, "hist_arrived", "device=0 round=-1"),
    (0.25, "hist_arrived", "device=1 round=-1"),
    (0.25, "hist_arrived", "device=2 round=-1"),
    # the last histogram: committee {2, 3}; 4·(4·2 + 4) = 48 bytes into block 0 (found at 1): confirmed with
    # block 1 at 2 + 0.125
    (0.25, "hist_arrived", "device=3 round=-1"),
    (0.5, "share_asked", "device=2 round=-1"),
    (0.5, "share_asked", "device=3 round=-1"),
    (0.75, "share_arrived", "device=2 round=-1"),  # 20 bytes: block 0 holds 68
    (0.75, "share_arrived", "device=3 round=-1"),  # 88: still block 0, confirmed at 2.125
    (2.125, "shared_ready", "scope=0 round=-1"),
    (2.375, "shared_asked", "device=0 round=-1"),
    (2.375, "shared_asked", "device=1 round=-1"),
    (2.375, "shared_asked", "device=2 round=-1"),
    (2.375, "shared_asked", "device=3 round=-1"),
    (2.625, "shared_arrived", "device=0 round=-1"),
    (2.625, "shared_arrived", "device=1 round=-1"),
    (2.625, "shared_arrived", "device=2 round=-1"),
    (2.625, "shared_arrived", "device=3 round=-1"),  # every member holds D_g: round 0 selects {2, 3}
]
ROUND0 = [
    (2.875, "train_start", "device=2 round=0"),
    (2.875, "train_start", "device=3 round=0"),
    (4.875, "train_done", "device=2 round=0"),   # 2 s
    (5.125, "upload_done", "device=2 round=0"),
    # weight |D_i ∪ D_g| = 10 + 2 (the other sharer's share); the fake's trained model is model + d + 1
    (5.125, "tier", "cloud", 0, "add", 3.0, 12.0),
    (5.375, "train_done", "device=3 round=0"),   # 2.5 s
    (5.625, "upload_done", "device=3 round=0"),
    (5.625, "tier", "cloud", 0, "add", 4.0, 12.0),
    (5.625, "tier", "cloud", 0, "commit", [2, 3], 3.5),
]


def _env(**knobs) -> tuple[FakeEnv, list[tuple]]:
    world = FakeWorld([10, 10, 10, 10])
    world.label_counts = np.array([[10, 0], [0, 10], [5, 5], [6, 4]])
    world.sample_bytes = 10
    world.model_bytes = 40
    env = FakeEnv(world)
    cfg = BGFLConfig(**{**KNOBS, **knobs})
    return env, env.run(cfg.create(env), until=7.5)


def test_bgfl_stage1_and_one_round_by_hand() -> None:
    env, log = _env()
    # the round's record, 3 hashes of 32 bytes, enters the first block found after 5.625 (block 5 at 6):
    # confirmed with block 6 at 7 + 0.125; then the new model goes out to the next round's members
    assert log == STAGE1 + ROUND0 + [
        (7.125, "round_confirmed", "scope=0 round=0"),
        (7.375, "train_start", "device=2 round=1"),
        (7.375, "train_start", "device=3 round=1"),
    ]
    assert env.global_model == 3.5
    tel = env.telemetry
    assert tel.counts == {"bytes_on_chain": 48 + 20 + 20 + 96, "chain_blocks": 2}
    blocks = [(args[0], args[2], args[3], kw) for name, args, kw in tel.calls if name == "span"]
    assert blocks == [(("chain", 0), 0.0, 1.0, {"block": 0}), (("chain", 0), 5.0, 1.0, {"block": 5})]
    confirms = [(args[2], kw["what"]) for name, args, kw in tel.calls if name == "instant" and args[1] == "confirm"]
    assert confirms == [(2.125, "histograms"), (2.125, "share"), (2.125, "share"), (7.125, "round")]


def test_a_round_record_larger_than_a_block_waits_for_a_second_one() -> None:
    # round_record: updates, 3 × 40 bytes = 120 > 100: blocks 5 and 6, included at 7, confirmed at 8.125
    env, log = _env(round_record="updates")
    assert log[: len(STAGE1) + len(ROUND0)] == STAGE1 + ROUND0
    assert log[len(STAGE1) + len(ROUND0):] == []  # nothing before 7.5
    assert env.telemetry.counts["chain_blocks"] == 3
    confirms = [args[2] for name, args, kw in env.telemetry.calls if name == "instant" and args[1] == "confirm"]
    assert confirms[-1] == 8.125


def test_confirmation_depth_and_no_record() -> None:
    # k_conf = 0: the histogram record and shares are confirmed with block 0 itself (1.125); everything
    # moves 1 s earlier, and the round record is confirmed with block 5 (6.125)
    env, log = _env(k_conf=0)
    assert [e for e in log if e[1] == "shared_ready"] == [(1.125, "shared_ready", "scope=0 round=-1")]
    assert [e for e in log if e[1] == "round_confirmed"] == [(5.125, "round_confirmed", "scope=0 round=0")]
    # no round record: the next round starts at the commit
    env, log = _env(round_record="none")
    assert [e for e in log if e[1] == "round_confirmed"] == [(5.625, "round_confirmed", "scope=0 round=0")]
    assert env.telemetry.counts["bytes_on_chain"] == 88


def test_free_setup_and_no_sharing() -> None:
    # charge_setup_phases false: stage 1 takes no time; round 0 starts at once and commits at 3 (d3's 0.25 +
    # 2.5 + 0.25); block 2 is found at exactly 3, so the record waits for block 3 (4): confirmed at 5.125
    env, log = _env(charge_setup_phases=False)
    assert log[:2] == [(0.25, "train_start", "device=2 round=0"), (0.25, "train_start", "device=3 round=0")]
    assert [e for e in log if e[1] == "round_confirmed"] == [(5.125, "round_confirmed", "scope=0 round=0")]
    assert env.telemetry.counts == {"bytes_on_chain": 96, "chain_blocks": 1}
    # α = 0: nothing to share; stage 2 starts when the histogram record is confirmed (2.125) and each
    # member's request (0.25) finds nothing to download
    env, log = _env(alpha=0.0)
    assert log[4:10] == [(2.125, "shared_ready", "scope=0 round=-1")] + [
        (2.375, "shared_asked", f"device={d} round=-1") for d in range(4)] + [
        (2.625, "train_start", "device=2 round=0")]


EDGE = [
    # edge 0 holds d0 (10, 0) and d1 (4, 6): committee d1 (JS to the pooled (14, 6): 0.067 against 0.169);
    # edge 1 holds d2 (0, 10) and d3 (5, 5): committee d3. Each shares (1, 1); each edge's chain gets
    # 2·(4·2 + 4) = 24 bytes of histograms and a 20-byte share in block 0: confirmed at 2.125
    (0.25, "hist_arrived", "device=0 round=-1"),
    (0.25, "hist_arrived", "device=1 round=-1"),
    (0.25, "hist_arrived", "device=2 round=-1"),
    (0.25, "hist_arrived", "device=3 round=-1"),
    (0.5, "share_asked", "device=1 round=-1"),
    (0.5, "share_asked", "device=3 round=-1"),
    (0.75, "share_arrived", "device=1 round=-1"),
    (0.75, "share_arrived", "device=3 round=-1"),
    (2.125, "shared_ready", "scope=0 round=-1"),
    (2.125, "shared_ready", "scope=1 round=-1"),
    (2.375, "shared_asked", "device=0 round=-1"),
    (2.375, "shared_asked", "device=1 round=-1"),   # the only sharer of its edge: nothing to download
    (2.375, "shared_asked", "device=2 round=-1"),
    (2.375, "shared_asked", "device=3 round=-1"),
    (2.625, "shared_arrived", "device=0 round=-1"),  # edge 0 complete: round 0 selects d1 (merged (4, 6))
    (2.625, "shared_arrived", "device=2 round=-1"),  # edge 1: d3 ((5, 5), score 0)
    (2.875, "train_start", "device=1 round=0"),
    (2.875, "train_start", "device=3 round=0"),
    (4.375, "train_done", "device=1 round=0"),       # 1.5 s
    (4.625, "upload_done", "device=1 round=0"),
    (4.625, "tier", "edge", 0, "add", 2.0, 10.0),    # weight 10 + 0: d1 lacks no share
    # the record, 2 hashes = 64 bytes, goes in edge 0's block 4 (found at 5): confirmed at 6 + 0.125
    (4.625, "tier", "edge", 0, "commit", [1], 2.0),
    (5.375, "train_done", "device=3 round=0"),       # 2.5 s
    (5.625, "upload_done", "device=3 round=0"),
    (5.625, "tier", "edge", 1, "add", 4.0, 10.0),
    (5.625, "tier", "edge", 1, "commit", [3], 4.0),  # block 5 (6): confirmed at 7.125
    (6.125, "round_confirmed", "scope=0 round=0"),
    (6.625, "edge_arrived", "scope=0 round=0"),      # edge → cloud 0.5 s
    (6.625, "tier", "cloud", 0, "add", 2.0, 10.0),
    (7.125, "round_confirmed", "scope=1 round=0"),
    (7.625, "edge_arrived", "scope=1 round=0"),
    (7.625, "tier", "cloud", 0, "add", 4.0, 10.0),
    (7.625, "tier", "cloud", 0, "commit", [0, 1], 3.0),
    (8.125, "edge_model_arrived", "scope=0 round=1"),
    (8.125, "edge_model_arrived", "scope=1 round=1"),
    (8.375, "train_start", "device=1 round=1"),
    (8.375, "train_start", "device=3 round=1"),
]


def test_bgfl_edge_scope_by_hand() -> None:
    world = FakeWorld([10, 10, 10, 10], edge_of=[0, 0, 1, 1])
    world.label_counts = np.array([[10, 0], [4, 6], [0, 10], [5, 5]])
    world.sample_bytes = 10
    env = FakeEnv(world)
    cfg = BGFLConfig(**{**KNOBS, "chain_scope": "edge"})
    log = env.run(cfg.create(env), until=8.5)
    assert log == EDGE
    assert env.global_model == 3.0
    lanes = sorted({args[0] for name, args, kw in env.telemetry.calls if name == "span"})
    assert lanes == [("chain", 0), ("chain", 1)]   # one lane per edge server's chain
    assert env.telemetry.counts == {"bytes_on_chain": 2 * (24 + 20 + 64), "chain_blocks": 2 * 2}


def test_malicious_sharers_change_labels_not_times() -> None:
    world = FakeWorld([10, 10, 10, 10])
    world.label_counts = np.array([[10, 0], [0, 10], [5, 5], [6, 4]])
    world.sample_bytes = 10
    runs = {}
    for fraction in (0.0, 0.5, 1.0):
        env = FakeEnv(world)
        proto = BGFLConfig(**{**KNOBS, "malicious_sharers": fraction}).create(env)
        runs[fraction] = env.run(proto, until=7.5)
        shared = proto.scopes[0].spec.shared
        # ⌊fraction·2 + ½⌋ of the committee {2, 3}, drawn from the stream bgfl.malicious
        assert len(shared.flipped) == {0.0: 0, 0.5: 1, 1.0: 2}[fraction] and set(shared.flipped) <= {2, 3}
    assert runs[0.0] == runs[0.5] == runs[1.0] == STAGE1 + ROUND0 + [
        (7.125, "round_confirmed", "scope=0 round=0"),
        (7.375, "train_start", "device=2 round=1"),
        (7.375, "train_start", "device=3 round=1"),
    ]
