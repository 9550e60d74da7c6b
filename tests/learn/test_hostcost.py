"""Host work around training: the group's staging keeps the bits, and a timing-only round folds no vector.

* :class:`~hierfl.learn.vmapped.VmapTrainer` trains in the result rows when it can and copies a broadcast
  start model once; the results must be the bits of the stacked path (a fresh host stack, copied back),
  which a result array it cannot train in (non-contiguous rows) still takes;
* a timing-only run (``training.trainer: none``) does no model arithmetic in its aggregation, where a
  trained run of the same scenario does (the spy can fail).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hierfl.core import aggregate
from hierfl.core.work import TrainSpec
from hierfl.learn.local import LocalTrainer, init_params
from hierfl.learn.vmapped import VmapTrainer
from hierfl.models import MLPConfig

ROOT = Path(__file__).resolve().parents[2]
SPEC = TrainSpec(epochs=1, batch_size=4, lr=0.05, momentum=0.9)


def _setup():
    cfg, shape = MLPConfig(hidden=[8]), (12,)
    trainer = LocalTrainer(cfg, shape, 3)
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(40, 12)).astype(np.float32), rng.integers(0, 3, 40)
    rows = [np.arange(0, 10), np.arange(10, 22), np.arange(22, 30)]
    return trainer, x, y, rows, init_params(cfg, shape, 3, 1)


def test_staging_in_the_result_rows_and_one_broadcast_copy_keep_the_stacked_bits():
    trainer, x, y, rows, p0 = _setup()
    vmap = VmapTrainer(trainer)
    seeds = [1, 2, 3]
    # the broadcast start (one object three times) trained in the result rows ...
    direct = np.empty((3, trainer.num_params), dtype=np.float32)
    vmap.train_group([p0, p0, p0], x, y, rows, SPEC, seeds, direct)
    # ... against distinct copies trained in a fresh host stack (non-contiguous rows: the stacked path)
    wide = np.empty((3, 2 * trainer.num_params), dtype=np.float32)
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    vmap.train_group([p0.copy(), p0.copy(), p0.copy()], x, y, rows, SPEC, seeds, strided)
    assert direct.tobytes() == np.ascontiguousarray(strided).tobytes()
    assert not np.array_equal(direct[0], p0) and not np.array_equal(direct[0], direct[1])
    # distinct starts, one of them a row of the result array itself: no row is overwritten before it is read
    starts = np.stack([p0, p0 + np.float32(0.01), p0 - np.float32(0.01)])
    expect = np.empty_like(starts)
    vmap.train_group(list(starts.copy()), x, y, rows, SPEC, seeds, expect)
    vmap.train_group([starts[0], starts[1], starts[2]], x, y, rows, SPEC, seeds, starts)
    assert starts.tobytes() == expect.tobytes()
    # counted as on an accelerator (hierfl.learn.staging): each call stages its distinct start models once (the
    # broadcast: one model; the others: three) and hands its three results to host rows
    assert vmap.transfers == {"h2d_calls": 4, "h2d_models": 1 + 3 + 3 + 3, "d2h_calls": 4, "d2h_models": 12}


@pytest.mark.parametrize("trainer", ["none", "sgd"])
def test_a_timing_only_round_folds_no_model_into_its_aggregation(trainer, monkeypatch, tmp_path):
    from hierfl.driver import run_scenario
    from hierfl.scenario.loader import load_scenario

    folds = []
    original = aggregate.WeightedSum._fold
    monkeypatch.setattr(aggregate.WeightedSum, "_fold", lambda self, v, w: (folds.append(v.size), original(self, v, w)))
    path = ROOT / "scenarios" / "quickstart.yaml"
    scenario = load_scenario(path, ["stop.rounds=2", "stop.target_accuracy=null", "evaluation.target_accuracy=null",
                                    "runtime.executor=local", f"training.trainer={trainer}"])
    result = run_scenario(scenario, tmp_path / "run", source=str(path))
    assert result.summary["rounds"] == 2
    if trainer == "none":
        assert folds == []
    else:  # trained: every update of both rounds is multiplied in
        assert len(folds) >= 2 * 2 and len(set(folds)) == 1 and folds[0] > 1000  # model-sized vectors


def test_a_result_block_is_reused_only_once_no_result_refers_to_it():
    from hierfl.runtime.result_blocks import ResultBlocks

    blocks = ResultBlocks(keep=2)
    a = blocks.take(3, 5)
    row = a[1]  # a job's result, still held
    del a
    b = blocks.take(3, 5)
    assert not np.shares_memory(b, row) and blocks.reused == 0  # the held one is left alone
    b[...] = 7.0
    del b
    c = blocks.take(3, 5)  # the second one is free again: reused
    assert blocks.reused == 1 and not np.shares_memory(c, row)
    del row  # the first one's last result dropped: reusable too
    d = blocks.take(3, 5)
    assert blocks.reused == 2 and not np.shares_memory(c, d)
    assert blocks.take(2, 5).shape == (2, 5) and blocks.reused == 2  # another shape: a fresh array
