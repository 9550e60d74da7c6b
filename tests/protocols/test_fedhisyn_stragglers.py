"""FedHiSyn's round under straggler policies: exact times against hand calculations."""

import pytest

from hierfl.policies.straggler import Deadline, FirstK
from hierfl.methods.fedhisyn.protocol import FedHiSynConfig
from hierfl.protocols.straggler import GUARD_S
from tests.fakeenv import FakeEnv, FakeWorld

# one capacity class: the ring 0 → 1 → 2 → 0; units of 1, 1.5, 2 s; T = 2.5 s; device ↔ cloud 0.25 s
# (device 2's link 0.5 s where given); a unit's model = start + d + 1; cloud weights by samples 16, 16, 32


def _run(policy, slow_link=False, until=None):
    links = {(("device", 2), ("cloud", 0)): 0.5} if slow_link else None
    env = FakeEnv(FakeWorld([16, 16, 32], links=links), straggler=policy, rounds=1)
    log = env.run(FedHiSynConfig(k=1, T=2.5, weighting="data").create(env), until=until)
    return env, [x for x in log if x[1] == "tier" and x[4] == "commit"]


def test_first_k_closes_the_round_on_the_first_uploads():
    # device 2 downloads in 0.5 s: its window is 0.5 … 3.0 and its upload would land at 3.5; devices 0 and 1
    # upload at 2.75 and land at 3.0 with their last models 2.0 (0: two units of its own) and 2.0 (1: one
    # unit from 0 + 1 + 1); k = 2 closes the round there, without device 2
    env, commits = _run(FirstK(k=2), slow_link=True)
    assert commits == [(3.0, "tier", "cloud", 0, "commit", [0, 1], 2.0)]
    assert env.telemetry.counts["stragglers_dropped"] == 1
    env, commits = _run(None, slow_link=True)  # wait_all: device 2's 3.0 arrives at 3.5
    assert commits == [(3.5, "tier", "cloud", 0, "commit", [0, 1, 2], 2.5)]


def test_partial_deadline_shortens_every_window():
    # a 2.6 s deadline with partial work: a window starting at 0.25 must end by 2.6 − 0.25 = 2.35 (less the
    # 1 µs guard): device 0 still fits two 1 s units, device 1 one of 1.5 s, device 2 one of 2 s; every
    # upload lands 1 µs before the deadline: (16·2 + 16·2 + 32·3) / 64 = 2.5, 0.4 s earlier than T allows
    env, commits = _run(Deadline(seconds=2.6, partial=True))
    assert commits == [(pytest.approx(2.6 - GUARD_S), "tier", "cloud", 0, "commit", [0, 1, 2], 2.5)]
    assert env.telemetry.counts.get("stragglers_dropped", 0) == 0
    ends = [x[0] for x in env.log if x[1] == "deadline"]   # the windows' ends
    assert ends == [pytest.approx(2.35 - GUARD_S)] * 3


def test_deadline_without_partial_work_closes_an_empty_round():
    # the same 2.5 s without partial work: every window runs to 2.75, so no upload lands in time
    env, commits = _run(Deadline(seconds=2.5), until=2.6)
    assert commits == []
    assert [r.EVENT for r in env.telemetry.records] == ["round_close", "round_empty"]
    assert env.telemetry.counts["stragglers_dropped"] == 3


def test_a_deadline_no_window_can_meet_is_refused():
    from hierfl.config.errors import ConfigError
    from tests.conftest import tiny

    with pytest.raises(ConfigError) as info:
        tiny(protocol={"name": "fedhisyn", "k": 1, "T": 2.5}, straggler={"name": "deadline", "seconds": 2.5})
    assert [p.path for p in info.value.problems] == ["straggler.seconds"]
    assert "T = 2.5 s" in info.value.problems[0].message and "partial: true" in info.value.problems[0].message
    tiny(protocol={"name": "fedhisyn", "k": 1, "T": 2.5}, straggler={"name": "deadline", "seconds": 2.5, "partial": True})
