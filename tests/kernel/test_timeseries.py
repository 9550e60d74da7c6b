"""Piecewise-constant series (hierfl.kernel.timeseries): hand-computed means and properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierfl.kernel.timeseries import QueueTracker, StepSeries, time_weighted_mean


def test_hand_computed_mean():
    # 0 on [0, 1), 3 on [1, 1) (zero length: counts for max only), 2 on [1, 4), 1 on [4, 5]
    times, values = [0.0, 1.0, 1.0, 4.0], [0.0, 3.0, 2.0, 1.0]
    assert time_weighted_mean(times, values, 5.0) == pytest.approx((0 + 0 + 2 * 3 + 1 * 1) / 5)
    s = StepSeries()
    for t, v in zip(times[1:], values[1:]):
        s.set(t, v)
    assert s.mean(5.0) == pytest.approx(7 / 5) and s.max == 3 and s.value == 1
    assert s.mean(4.0) == pytest.approx(6 / 4)
    assert StepSeries(0.0, 2.0).mean(0.0) == 2.0  # empty window: the value itself


def test_bad_input_raises():
    s = StepSeries()
    s.set(2.0, 1.0)
    with pytest.raises(ValueError, match="backwards"):
        s.set(1.0, 0.0)
    with pytest.raises(ValueError, match="before the latest change"):
        s.mean(1.5)
    with pytest.raises(ValueError, match="non-decreasing"):
        time_weighted_mean([0.0, 2.0, 1.0], [1, 2, 3], 3.0)
    with pytest.raises(ValueError, match="one value per change"):
        time_weighted_mean([], [], 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        QueueTracker().set(0.0, "edge", 0, -1)


def test_tracker_totals_and_news():
    q = QueueTracker()
    assert q.set(0.0, "edge", 0, 0) and q.set(0.0, "edge", 1, 0)  # first mention: news
    assert not q.set(0.5, "edge", 0, 0)                          # unchanged: nothing to trace
    assert q.set(1.0, "edge", 0, 2) and q.set(2.0, "edge", 1, 3) and q.set(3.0, "edge", 0, 0)
    out = q.summary(4.0)["edge"]
    # leader 0: 2 on [1, 3) → 4/4; leader 1: 3 on [2, 4] → 6/4; total peaks at 5 on [2, 3)
    assert out["by_entity"]["0"] == {"mean": 1.0, "max": 2}
    assert out["by_entity"]["1"] == {"mean": 1.5, "max": 3}
    assert out["mean"] == pytest.approx(2.5) and out["max"] == 5


@given(st.lists(st.tuples(st.floats(0, 10), st.integers(0, 50)), min_size=1, max_size=30), st.floats(0, 5))
def test_incremental_mean_equals_the_formula(changes, extra):
    t, times, values = 0.0, [0.0], [0]
    s = StepSeries()
    for dt, v in changes:
        t += dt
        times.append(t)
        values.append(v)
        s.set(t, v)
    end = t + extra
    assert s.mean(end) == pytest.approx(time_weighted_mean(times, values, end), rel=1e-9, abs=1e-9)
    assert s.max == max(values)
    assert min(values) - 1e-9 <= s.mean(end) <= max(values) + 1e-9
