"""The ``fedftg`` server task: registration, the student as the weighted average, the charged FLOPs, state."""

from __future__ import annotations

import numpy as np
import pytest

from hierfl.learn.local import LocalTrainer, forward_flops, init_params
from hierfl.learn.server_tasks import ServerContext, get_task
from hierfl.methods.fedftg.server import settings_of, weighted_mean
from hierfl.models import LogRegConfig

CFG = LogRegConfig()
SHAPE = (5,)


def _ctx(state: dict[str, np.ndarray]) -> ServerContext:
    trainer = LocalTrainer(CFG, SHAPE, 3)
    return ServerContext("cloud", 0, SHAPE, 3, None, state, lambda k: trainer,
                         lambda k: float(forward_flops(CFG, SHAPE, 3)))


def test_weighted_mean_and_settings():
    a, b = np.array([1.0, 2.0], dtype=np.float32), np.array([4.0, -1.0], dtype=np.float32)
    # (1·(1, 2) + 2·(4, −1)) / 3 = (3, 0)
    assert weighted_mean([a, b], np.array([1.0, 2.0])).tolist() == [3.0, 0.0]
    with pytest.raises(ValueError, match="positive sum"):
        weighted_mean([a, b], np.array([0.0, 0.0]))
    assert settings_of({"iters": 3, "counts": [[1]], "weights": [1.0]}).iters == 3
    with pytest.raises(ValueError, match="unknown parameters"):
        settings_of({"iterations": 3})


def test_the_task_charges_the_loop_count_and_keeps_the_generator():
    task = get_task("fedftg")
    teachers = [init_params(CFG, SHAPE, 3, s) for s in (1, 2)]
    params = {"weights": [1.0, 3.0], "counts": [[4, 0, 1], [0, 5, 5]], "iters": 2, "gen_steps": 1,
              "student_steps": 1, "batch_size": 4, "noise_dim": 2, "gen_width": 2}
    state: dict[str, np.ndarray] = {}
    result = task(_ctx(state), teachers, params, np.random.default_rng(0))
    # F = 30, F_G = 88 (see test_fedftg_timing), K = 2: 8·[2·3·148 + (88 + 90 + 60)] = 8·1126
    assert result.flops == 8 * 1126
    assert result.stats["gen_flops"] == 88.0 and result.stats["teachers"] == 2.0
    assert set(state) == {"gen_params", "gen_buffers"}
    # the student starts from the weighted average; the same inputs and stream give the same bits
    again = task(_ctx({}), teachers, params, np.random.default_rng(0))
    assert np.array_equal(result.outputs[0], again.outputs[0])
    assert not np.array_equal(result.outputs[0], weighted_mean(teachers, np.array([1.0, 3.0])))
