"""Golden runs: every shipped scenario gives the recorded outputs, locally and on Ray (see tests/golden.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import SCENARIOS, load_digests, run_one, skip_reason

DIGESTS = load_digests()


# scale scenarios run on the local executor only here (their Ray run would dominate the suite)
RAY_MAX_DEVICES = 2000


def _check(path: Path, executor: str, tmp_path: Path) -> None:
    reason = skip_reason(path)
    if executor == "ray" and reason is None:
        from hierfl.scenario.loader import load_scenario

        if load_scenario(path).devices.count > RAY_MAX_DEVICES:
            reason = f"more than {RAY_MAX_DEVICES} devices: golden on the local executor only"
    if reason:
        pytest.skip(reason)
    assert path.stem in DIGESTS, f"no golden digests for {path.stem}: record them with python -m tests.golden --update"
    got = run_one(path, executor, tmp_path / executor)
    want = DIGESTS[path.stem]
    differ = sorted(k for k in want if got.get(k) != want[k])
    assert not differ, f"{path.stem} on {executor}: outputs changed: {', '.join(differ)}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_local(path, tmp_path):
    _check(path, "local", tmp_path)


@pytest.mark.ray
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_golden_ray(path, tmp_path, ray_session):
    _check(path, "ray", tmp_path)
