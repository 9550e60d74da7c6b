"""Staleness functions (docs/explanation/algorithms.md §1.4): hand-computed values and properties."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hierfl.core import staleness as S
from hierfl.methods.fedbuff.math import fedbuff
from hierfl.methods.fedbuff.policies import FedBuffStaleness
from hierfl.methods.fedch.math import fedch
from hierfl.methods.fedch.policies import FedCHStaleness
from hierfl.policies import staleness as P

CONFIGS = st.one_of(
    st.builds(P.ConstantStaleness),
    st.builds(P.PolynomialStaleness, a=st.floats(0, 100)),
    st.builds(P.HingeStaleness, a=st.floats(0, 1e6), b=st.floats(0, 1e3)),
    st.builds(FedBuffStaleness),
    st.builds(FedCHStaleness, a=st.floats(0, 1e3), b=st.floats(0, 100)),
    st.builds(P.ExponentialStaleness, lam=st.floats(0, 1e3)),
)


def test_hand_computed_values():
    assert S.polynomial(3, 0.5) == pytest.approx(0.5)
    assert fedbuff(8) == pytest.approx(1 / 3)
    assert S.hinge(4, 10, 4) == 1.0 and S.hinge(6, 10, 4) == pytest.approx(1 / 21)
    assert fedch(5, 5, 1) == 1.0 and fedch(10, 5, 1) == pytest.approx(0.1)
    assert fedch(0, 0, 2) == 1.0  # guarded: never 0^(-b)
    assert S.exponential(2, 0.5) == pytest.approx(math.exp(-1))
    assert S.constant(1000) == 1.0
    with pytest.raises(ValueError):
        S.polynomial(-1, 0.5)


@given(CONFIGS, st.integers(0, 10**6), st.integers(0, 10**6))
def test_sigma_zero_is_one_values_in_unit_interval_non_increasing(cfg, t1, t2):
    lo, hi = min(t1, t2), max(t1, t2)
    assert cfg(0) == 1.0
    assert 0.0 < cfg(hi) <= cfg(lo) <= 1.0


def test_selectable_by_name_with_allowed_names_in_errors():
    from pydantic import TypeAdapter, ValidationError

    ta = TypeAdapter(P.STALENESS.union())
    assert ta.validate_python({"name": "hinge", "a": 4, "b": 2})(3) == pytest.approx(1 / 5)
    with pytest.raises(ValidationError, match="polynomial"):
        ta.validate_python({"name": "cubic"})
