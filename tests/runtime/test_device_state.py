"""Per-device state of a device host: zeros until written, memory by device, reset, export and merge."""

from __future__ import annotations

import numpy as np

from hierfl.runtime.device_state import DeviceState


def test_vectors_start_at_zero_and_are_counted():
    st = DeviceState()
    like = np.ones(5, dtype=np.float32)
    h = st.get(3, "h", like)
    assert h.dtype == np.float32 and not h.any() and st.nbytes() == (1, 20)
    st.put(3, c=np.full(5, 2.0, dtype=np.float32))
    st.get(7, "c", like)
    assert st.nbytes() == (2, 60)  # device 3: h and c (2 × 20 bytes); device 7: c (20)
    np.testing.assert_array_equal(st[3]["c"], 2.0)
    st.reset([3, 99])  # an unknown device is no error
    assert st.nbytes() == (1, 20)


def test_export_is_a_copy_and_merge_takes_bare_vectors_as_c():
    st = DeviceState()
    st.put(1, h=np.arange(3, dtype=np.float32))
    out = st.export()
    out[1]["h"][0] = 9.0
    assert st[1]["h"][0] == 0.0
    other = DeviceState()
    other.merge({1: out[1], "2": np.ones(2, dtype=np.float32)})
    assert set(other.vectors) == {1, 2} and other[1]["h"][0] == 9.0
    np.testing.assert_array_equal(other[2]["c"], [1.0, 1.0])
