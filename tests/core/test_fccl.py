"""FCCL's pure rules: the collaboration target, the jobs' costs in passes, the round's public batches."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.methods.fccl.math import FCCLJob, batch_positions, num_batches, own_target
from hierfl.core.work import TrainSpec, work_samples


def test_own_target_replaces_the_own_entry_of_the_mean():
    # K = 2 parties; mean (3, 1) of Z_k = (4, 0) and the other's (2, 2); the own entry is the snapshot's (0, 2):
    # ((2, 2) + (0, 2)) / 2 = (1, 2) = mean + ((0, 2) − (4, 0)) / 2
    mean, mine, snap = np.array([3.0, 1.0]), np.array([4.0, 0.0]), np.array([0.0, 2.0])
    assert own_target(mean, mine, snap, 2).tolist() == [1.0, 2.0]
    assert own_target(mean, mine, mine, 2).tolist() == [3.0, 1.0]  # current: the plain mean
    with pytest.raises(ValueError, match="K >= 1"):
        own_target(mean, mine, snap, 0)


def test_passes_per_sample_and_work():
    base = {"rows": (100, 160), "subset_size": 50, "batch_size": 20}
    # per batch, previous: logits 2 passes (model + snapshot), collaboration 2 (the backward)
    assert FCCLJob("logits", batch=0, **base).passes() == 2
    assert FCCLJob("logits", batch=0, self_target="current", **base).passes() == 1
    assert FCCLJob("collab", batch=0, **base).passes() == 2
    # per round: logits 1 (its own entry is the round-start model, the snapshot), collaboration 3
    assert FCCLJob("logits", per_batch=False, **base).passes() == 1
    assert FCCLJob("collab", per_batch=False, **base).passes() == 3
    assert FCCLJob("local").passes() == 5 and FCCLJob("pretrain").passes() == 3
    # batches of 20 over A_t = 50: 20, 20, 10 samples
    assert [FCCLJob("logits", batch=b, **base).samples() for b in range(3)] == [20, 20, 10]
    assert num_batches(50, 20) == 3
    # work in training-sample equivalents (3 passes = 1): the last batch's logits 10·2/3; a local job of
    # 2 epochs on 30 private samples 60·5/3 = 100
    assert work_samples(999, TrainSpec(method=FCCLJob("logits", batch=2, **base))) == pytest.approx(20 / 3)
    assert work_samples(30, TrainSpec(epochs=2, batch_size=8, method=FCCLJob("local"))) == pytest.approx(100.0)
    assert work_samples(30, TrainSpec(epochs=2, batch_size=8, method=FCCLJob("pretrain"))) == pytest.approx(60.0)
    # the subset's seed does not change the cost
    assert FCCLJob("collab", subset_seed=1, batch=0, **base).cost_key() == FCCLJob("collab", batch=0, **base).cost_key()
    with pytest.raises(ValueError, match="kind"):
        FCCLJob("digest")
    with pytest.raises(ValueError, match="self_target"):
        FCCLJob("logits", self_target="mean")


def test_batches_are_a_seeded_shuffled_subset():
    job = FCCLJob("logits", rows=(0, 40), subset_size=25, subset_seed=7, batch_size=10)
    batches = batch_positions(job, 40)
    assert [b.size for b in batches] == [10, 10, 5]
    every = np.concatenate(batches)
    assert len(set(every.tolist())) == 25 and every.min() >= 0 and every.max() < 40
    assert [b.tolist() for b in batch_positions(job, 40)] == [b.tolist() for b in batches]  # both ends agree
    one = FCCLJob("collab", rows=(0, 40), subset_size=25, subset_seed=7, batch_size=10, batch=1)
    assert batch_positions(one, 40)[0].tolist() == batches[1].tolist()
    other = FCCLJob("logits", rows=(0, 40), subset_size=25, subset_seed=8, batch_size=10)
    assert np.concatenate(batch_positions(other, 40)).tolist() != every.tolist()
