"""Duration formulas of the timing model."""

import pytest

from hierfl.core.work import TrainSpec, compute_time_s, model_bytes, samples_processed, transfer_time_s


def test_transfer_time_hand_computed():
    # 1 MB over 8 Mbps = 1 s, plus 25 ms latency
    assert transfer_time_s(1_000_000, 8.0, 25.0) == pytest.approx(1.025, abs=1e-12)
    assert transfer_time_s(0, 1.0, 0.0) == 0.0
    with pytest.raises(ValueError):
        transfer_time_s(10, 0.0, 1.0)
    with pytest.raises(ValueError):
        transfer_time_s(10, 1.0, -1.0)


def test_compute_time_and_model_bytes():
    assert compute_time_s(samples_processed(60, TrainSpec(epochs=2)), 100.0) == pytest.approx(1.2)
    assert compute_time_s(samples_processed(60, TrainSpec(epochs=None, steps=5, batch_size=10)), 50.0) == 1.0
    assert model_bytes(18) == 72
    with pytest.raises(ValueError):
        compute_time_s(10, 0.0)
