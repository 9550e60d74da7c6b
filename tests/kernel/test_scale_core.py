"""Scale, core models: the work per event does not grow with the population, and nothing changed a bit.

* The flow network and availability give bit-for-bit the answers of the algorithms they replace
  (``LegacyFlowNetwork`` and ``LegacyAvailability`` in ``tests/oracles.py``) on seeded random operation sequences.
* Operation counts (inner-loop steps, not wall time) of the same work are equal with 1k and 10k
  other devices or flows around, and stay under a fixed bound per event.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oracles import LegacyAvailability, LegacyFlowNetwork, PlainFlowNetwork
from hierfl.core.dynamics import Availability, IntervalTimeline, MarkovTimeline, OnlineIndex
from hierfl.kernel.network import FlowNetwork
from hierfl.core.rng import stream


# -- the network: bit-for-bit the plain model --------------------------------------------------------
def _same_state(new: FlowNetwork, plain: PlainFlowNetwork, legacy: LegacyFlowNetwork | None = None) -> None:
    assert list(new.flows) == list(plain.flows)
    for fid, f in plain.flows.items():
        g = new.flows[fid]
        assert (g.rate, g.remaining, g.max_sharing, g.min_rate) == (f.rate, plain.left(fid), f.max_sharing, f.min_rate)
        assert new.finish_time(fid) == plain.finish_time(fid)
        if legacy is not None:   # the fold over every step of the clock: the same to within rounding
            h = legacy.flows[fid]
            assert (h.rate, h.max_sharing, h.min_rate) == (g.rate, g.max_sharing, g.min_rate)
            assert g.remaining == pytest.approx(h.remaining, rel=1e-12, abs=1e-12)
            assert new.finish_time(fid) == pytest.approx(legacy.finish_time(fid), rel=1e-12, abs=1e-12)


def _same_answer(got: tuple[float, list[int]] | None, legacy: tuple[float, list[int]] | None) -> None:
    """The fold's answer to within rounding: the same flows, the same time to 1e-12 s."""
    assert (got is None) == (legacy is None)
    if got is not None and legacy is not None:
        assert got[1] == legacy[1] and got[0] == pytest.approx(legacy[0], rel=1e-13, abs=1e-12)


def _drive(seed: int, contention: bool, steps: int, peek: float) -> int:
    """Run the same random operations on the three models (the emulator's pattern: add, advance to the
    next finish and remove the flows ending, cancel, change capacities); compare every answer: exactly
    with the plain closed form, to within rounding with the legacy fold. ``peek`` is the chance of
    reading a flow's state mid-way."""
    rng = np.random.default_rng(seed)
    links = [f"L{i}" for i in range(6)] + ["inf"]
    cap = {link: float(rng.choice([1.0, 2.5, 3.0, 7.0])) for link in links[:-1]}
    cap["inf"] = math.inf
    new, old, fold = FlowNetwork(cap, contention), PlainFlowNetwork(cap, contention), LegacyFlowNetwork(cap, contention)
    nets = (new, old, fold)
    now, fid, compared = 0.0, 0, 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.35 or not old.flows:
            path = sorted({str(rng.choice(links)) for _ in range(int(rng.integers(1, 3)))})
            size = float(rng.choice([0.0, 1.0, 2.0, 5.0, float(rng.uniform(0.1, 20.0))]))
            for net in nets:
                net.add(now, fid, path, size)
            fid += 1
        elif op < 0.45:
            victim = int(rng.choice(list(old.flows)))
            gone, gone_fold = new.remove(now, victim), fold.remove(now, victim)
            assert gone.remaining == old.remove(now, victim).remaining
            assert gone.remaining == pytest.approx(gone_fold.remaining, rel=1e-12, abs=1e-12)
        elif op < 0.52:
            link = str(rng.choice(links[:-1]))
            mbps = float(rng.choice([0.5, 2.0, 4.0, 9.0, math.inf]))
            for net in nets:
                net.set_capacity(now, link, mbps)
        else:
            nxt = old.next_finish()
            assert new.next_finish() == nxt
            _same_answer(nxt, fold.next_finish())
            compared += 1
            if nxt is not None and rng.random() < 0.5:  # the emulator: wake at the finish, remove those ending
                now = max(now, nxt[0])
                for net in nets:
                    net.advance(now)
                nxt = old.next_finish()
                assert new.next_finish() == nxt
                _same_answer(nxt, fold.next_finish())
                while nxt is not None and nxt[0] <= now + 1e-12:
                    for i in nxt[1]:
                        assert new.remove(now, i).remaining == old.remove(now, i).remaining
                        fold.remove(now, i)
                    nxt = old.next_finish()
                    assert new.next_finish() == nxt
                    _same_answer(nxt, fold.next_finish())
            else:
                now += float(rng.choice([0.0, 1e-3, 0.05, float(rng.exponential(0.3))]))
                for net in nets:
                    net.advance(now)
        if old.flows and rng.random() < peek:
            f = int(rng.choice(list(old.flows)))
            assert new.flows[f].remaining == old.left(f)
            assert new.finish_time(f) == old.finish_time(f)
    _same_state(new, old, fold)
    return compared


@pytest.mark.parametrize("contention", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_network_matches_the_plain_model_bit_for_bit(seed, contention):
    assert _drive(seed, contention, steps=400, peek=0.1) > 50


@pytest.mark.parametrize("contention", [True, False])
def test_long_flows_cost_nothing_while_others_come_and_go(contention):
    """Long flows on their own links live through thousands of other flows' events; reading one costs
    O(1) (no replay of the steps it missed), and gives the closed form exactly and the fold to within
    rounding."""
    rng = np.random.default_rng(11)
    cap = {("solo", i): float(1 + i) for i in range(3)} | {"busy": 50.0}
    new, old, fold = FlowNetwork(cap, contention), PlainFlowNetwork(cap, contention), LegacyFlowNetwork(cap, contention)
    nets = (new, old, fold)
    for i in range(3):
        for net in nets:
            net.add(0.0, i, [("solo", i)], 300.0 + 7.3 * i)
    now, reads = 0.0, []
    for k in range(3, 3000):
        now += float(rng.exponential(0.05))
        size = float(rng.uniform(0.1, 3.0))
        for net in nets:
            net.add(now, k, ["busy"], size)
        nxt = old.next_finish()
        assert new.next_finish() == nxt
        _same_answer(nxt, fold.next_finish())
        if nxt is not None and nxt[0] <= now + 0.02:
            for net in nets:
                net.advance(max(now, nxt[0]))
                for i in nxt[1]:
                    net.remove(max(now, nxt[0]), i)
            now = max(now, nxt[0])
        if k % 997 == 0:                      # read a long flow after ~1,000 steps
            before = new.ops.total()
            assert new.flows[k % 3].remaining == old.left(k % 3)
            assert new.flows[k % 3].remaining == pytest.approx(fold.flows[k % 3].remaining, rel=1e-12)
            reads.append(new.ops.total() - before)
    _same_state(new, old, fold)
    assert reads == [0, 0, 0]


@settings(max_examples=60, deadline=None)
@given(st.floats(0.0, 100.0), st.sampled_from([0.3, 1.0, 7.0, math.inf]),
       st.lists(st.floats(1e-6, 3.0), min_size=0, max_size=80))
def test_one_flow_is_its_closed_form_whatever_the_steps(megabits, mbps, gaps):
    """A flow read after many network events holds max(r - rate·(t - t0), 0): one rounding, not one per
    event; the step-by-step fold agrees to within a rounding per step."""
    net = FlowNetwork({"L": mbps, "M": 1.0})
    net.add(0.0, 0, ["L"], megabits)
    now, r = 0.0, megabits
    for gap in gaps:
        net.add(now, 1, ["M"], 1.0)       # another flow: events come and go
        net.advance(now + gap)
        r = max(r - mbps * ((now + gap) - now), 0.0)
        now += gap
        net.remove(now, 1)
    closed = max(megabits - mbps * now, 0.0) if now > 0 else megabits
    assert net.flows[0].remaining == closed
    if math.isfinite(mbps):
        assert net.flows[0].remaining == pytest.approx(r, rel=1e-12, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(0.0, 50.0)), min_size=1, max_size=10),
       st.lists(st.floats(0.5, 100.0), min_size=4, max_size=4),
       st.lists(st.floats(0.0, 2.0), min_size=1, max_size=30))
def test_network_matches_the_plain_model_on_arbitrary_sizes_and_times(flows, caps, gaps):
    cap = {i: c for i, c in enumerate(caps)}
    new, old = FlowNetwork(cap), PlainFlowNetwork(cap)
    now = 0.0
    for fid, (a, b, size) in enumerate(flows):
        for net in (new, old):
            net.add(now, fid, sorted({a, b}), size)
        now += gaps[fid % len(gaps)]
        for net in (new, old):
            net.advance(now)
        nxt = old.next_finish()
        assert new.next_finish() == nxt
        if nxt is not None and fid % 3 == 2:
            for i in nxt[1]:
                for net in (new, old):
                    net.remove(max(now, nxt[0]), i)
            now = max(now, nxt[0])
    _same_state(new, old)


def test_reused_flow_ids_leave_no_live_stale_entries():
    new, old = FlowNetwork({"a": 1.0, "b": 2.0}), PlainFlowNetwork({"a": 1.0, "b": 2.0})
    for k in range(200):
        for net in (new, old):
            net.add(0.01 * k, 7, ["a"], 5.0)
            net.add(0.01 * k, 8, ["a", "b"], 1.0 + k % 3)
            net.remove(0.01 * k + 0.005, 7)
            net.advance(0.01 * k + 0.006)
        assert new.next_finish() == old.next_finish()
        for net in (new, old):
            net.remove(0.01 * k + 0.007, 8)
    assert new.next_finish() is None and new.stats()["heap"] <= 64


def test_identical_flows_finish_together_and_ties_keep_the_scan_s_rule():
    net = FlowNetwork({("up", d): 2.0 for d in range(50)})
    for d in range(50):
        net.add(0.0, d, [("up", d)], 4.0)
    assert net.next_finish() == (2.0, list(range(50)))
    net.advance(1.0)
    assert net.next_finish() == (2.0, list(range(50)))


def test_ties_follow_the_scan_in_insertion_order():
    """A chain of finish times 0.9e-12 s apart: the scan's rule (join within 1e-12 s of the first time
    chosen, replace only by one clearly earlier) depends on insertion order; the heap reproduces it."""
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0], [1, 0, 2]):
        cap = {("up", d): 1.0 for d in range(3)}
        new, old = FlowNetwork(cap), PlainFlowNetwork(cap)
        for d in order:
            for net in (new, old):
                net.add(0.0, d, [("up", d)], 5.0 + 0.9e-12 * d)
        assert new.next_finish() == old.next_finish()


# -- the network: work per event ---------------------------------------------------------------------
def _short_transfers(background: int, contention: bool = True) -> tuple[list, list[int]]:
    """1,000 transfers on their own device links (one starts every 10 ms, each lasts 50 ms), driven
    as the emulator does, while ``background`` long flows sit on other devices' links. Returns every
    ``next_finish`` answer and the operation count of each event."""
    n = background
    cap = {("up", d): 1.0 + d % 7 for d in range(n)}
    cap.update({("up", n + k): 1.0 + k % 7 for k in range(1000)})
    cap[("cloud_in",)] = math.inf
    net = FlowNetwork(cap, contention)
    for d in range(n):
        net.add(0.0, d, [("up", d), ("cloud_in",)], 1e9)
    answers, per_event = [], []
    t = 0.0
    for k in range(1000):
        t += 0.01
        nxt = net.next_finish()
        while nxt is not None and nxt[0] <= t:
            before = net.ops.total()
            net.advance(nxt[0])
            for i in nxt[1]:
                net.remove(nxt[0], i)
            nxt = net.next_finish()
            answers.append(nxt)
            per_event.append(net.ops.total() - before)
        before = net.ops.total()
        net.add(t, 10**6 + k, [("up", n + k), ("cloud_in",)], 0.05 * cap[("up", n + k)])
        answers.append(net.next_finish())
        per_event.append(net.ops.total() - before)
    return answers, per_event


@pytest.mark.parametrize("contention", [True, False])
def test_network_work_per_event_does_not_grow_with_the_flows_in_flight(contention):
    a1, ops1 = _short_transfers(1000, contention)
    a10, ops10 = _short_transfers(10000, contention)
    assert a1 == a10                        # the background changes no answer
    assert ops1 == ops10                    # … and no step of work: the same count, event by event
    assert len(ops1) > 1900 and max(ops1) <= 12 and sum(ops1) <= 8.1 * len(ops1)


def test_the_plain_model_would_fail_the_count():
    """The instrument sees the scan: the plain model's next_finish visits every flow."""
    visits = {}
    for n in (1000, 10000):
        old = LegacyFlowNetwork({("up", d): 1.0 for d in range(n)})
        for d in range(n):
            old.add(0.0, d, [("up", d)], 1e9)
        seen = []
        old.finish_time = lambda fid, f=old.finish_time: seen.append(fid) or f(fid)  # type: ignore[method-assign]
        old.next_finish()
        visits[n] = len(seen)
    assert visits == {1000: 1000, 10000: 10000}


def test_a_shared_link_recomputes_its_component_only():
    """Two edges with finite ingress: a change at edge 0 visits edge 0's flows, never edge 1's."""
    for other in (10, 300):
        cap = {("up", d): 5.0 for d in range(20 + other)}
        cap.update({("in", 0): 10.0, ("in", 1): 10.0})
        net = FlowNetwork(cap)
        for d in range(other):
            net.add(0.0, 20 + d, [("up", 20 + d), ("in", 1)], 1e6)
        for d in range(10):
            net.add(0.0, d, [("up", d), ("in", 0)], 100.0)
        before = net.ops.flows
        net.add(1.0, 10, [("up", 10), ("in", 0)], 100.0)
        net.remove(2.0, 3)
        # component search, frozen at the saturated ingress, rate update: 11 flows, then 10
        assert net.ops.flows - before == 3 * 11 + 3 * 10
        assert all(net.flows[d].rate == pytest.approx(1.0) for d in range(10) if d != 3)


def test_a_flow_in_flight_through_20k_events_costs_nothing_and_ends_exact():
    """Flow 0 stays in flight while 20,000 others start and end: no work is done on it, the heap does
    not grow, and when it is cancelled it holds the closed form exactly (the fold to within rounding)."""
    cap = {("up", d): 1.0 for d in range(3)}
    new, fold = FlowNetwork(cap, contention=False), LegacyFlowNetwork(cap, contention=False)
    for net in (new, fold):
        net.add(0.0, 0, [("up", 0)], 1e9)
    per_event = set()
    for k in range(1, 20001):
        before = new.ops.total()
        for net in (new, fold):
            net.add(k * 0.1, 1, [("up", 1)], 0.01)
            net.remove(k * 0.1 + 0.05, 1)
        per_event.add(new.ops.total() - before)
    assert max(per_event) <= 4 and new.stats()["heap"] <= 66
    gone, gone_fold = new.remove(3000.0, 0), fold.remove(3000.0, 0)
    assert gone.remaining == 1e9 - 1.0 * 3000.0    # exact
    # the fold rounded once per step: 40,000 steps drifted it by about 2e-12 relative
    assert gone_fold.remaining != gone.remaining and gone_fold.remaining == pytest.approx(gone.remaining, rel=1e-11)


# -- availability: bit-for-bit the plain model -------------------------------------------------------
def _bases(n: int, seed: int) -> list:
    out: list = []
    for d in range(n):
        kind = d % 4
        if kind == 0:
            out.append(None)
        elif kind == 1:
            out.append(MarkovTimeline(5.0, 3.0, stream(seed, "availability", d)))
        elif kind == 2:
            out.append(IntervalTimeline([(0.0, 4.0), (6.0, 9.0), (8.5, 12.0)], period=15.0))
        else:
            out.append(IntervalTimeline([(1.0, 2.0), (5.0, 30.0)]))
    return out


def _aways(n: int, rng: np.random.Generator) -> list[list[tuple[float, float]]]:
    out = []
    for _ in range(n):
        wins = []
        for _ in range(int(rng.integers(0, 4))):
            s = float(rng.choice([0.0, 2.0, 3.0, 7.5, float(rng.uniform(0, 40))]))
            wins.append((s, s + float(rng.choice([0.0, 1.0, 4.0, math.inf, float(rng.uniform(0, 10))]))))
        out.append(wins)   # unsorted, overlapping, empty and endless windows
    return out


@pytest.mark.parametrize("seed", range(4))
def test_availability_matches_the_plain_model_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n = 40
    base, away = _bases(n, seed), _aways(n, rng)
    new, old = Availability(base, [list(a) for a in away]), LegacyAvailability(base, [list(a) for a in away])
    assert new.trivial == old.trivial is False
    for t in np.concatenate([rng.uniform(0, 60, 300), [0.0, 2.0, 3.0, 4.0, 7.5, 9.0, 15.0, 30.0]]):
        t = float(t)
        for d in range(n):
            up = old.is_up(d, t)
            assert new.is_up(d, t) == up
            assert new.next_up(d, t) == old.next_up(d, t)
            assert new.next_up(d, t, horizon=t + 3.0) == old.next_up(d, t, horizon=t + 3.0)
            if up:
                assert new.next_down(d, t) == old.next_down(d, t)
                assert new.next_change(d, t) == old.next_down(d, t)
            else:
                assert new.next_change(d, t) == old.next_up(d, t)
    assert Availability([None] * 5).trivial and Availability([None] * 3, [[], [(1.0, 1.0)], []]).trivial is False


class _CountingList(list):
    """A list that counts element reads (iteration and indexing)."""

    reads = 0

    def __iter__(self):
        for x in super().__iter__():
            _CountingList.reads += 1
            yield x

    def __getitem__(self, i):
        _CountingList.reads += 1
        return super().__getitem__(i)


def _query_reads(cls: type, n: int) -> int:
    base = _CountingList([None] * n)
    away = _CountingList([[] for _ in range(n)])
    away[n - 1] = [(5.0, 8.0)]           # one device leaves for a while: the population is not trivial
    avail = cls(base, away)
    _CountingList.reads = 0
    for k in range(100):                  # what a driver asks on each of 100 events
        t, d = 0.1 * k, (k * 7) % 10
        if not avail.trivial:
            if avail.is_up(d, t):
                avail.next_down(d, t)
            avail.next_up(d, t)
    return _CountingList.reads


def test_availability_questions_cost_the_same_at_1k_and_10k_devices():
    reads = {n: _query_reads(Availability, n) for n in (1000, 10000)}
    assert reads[1000] == reads[10000] <= 3 * 100
    legacy = {n: _query_reads(LegacyAvailability, n) for n in (1000, 10000)}
    assert legacy[1000] >= 100 * 1000 and legacy[10000] >= 100 * 10000   # the old scan, seen by the same count


# -- the online index ---------------------------------------------------------------------------------
def test_online_index_agrees_with_availability_at_every_time():
    rng = np.random.default_rng(5)
    n = 40
    avail = Availability(_bases(n, 5), _aways(n, rng))
    index = OnlineIndex(avail, range(0, n, 2))
    members = set(range(0, n, 2))
    for k in range(1, 400):
        t = 0.15 * k
        if k % 37 == 0:                      # the set changes: devices join and leave it
            d = int(rng.integers(n))
            (index.discard if d in members else index.add)(d)
            (members.discard if d in members else members.add)(d)
        before = set(index.online())
        changes = index.advance(t)
        after = set(index.online())
        want = {d for d in members if avail.is_up(d, t)}
        assert after == want and index.count_online == len(want) and len(index) == len(members)
        assert all(index.is_online(d) == (d in want) for d in range(n))
        flipped = {d for d in before ^ after}
        assert flipped <= {d for d, _ in changes}
        assert index.next_online() == min((avail.next_up(d, t) for d in members), default=math.inf)
        assert index.online_among([3, 2, 1, 0]) == [d for d in [3, 2, 1, 0] if d in want]


def test_online_index_next_online_when_everyone_is_away():
    avail = Availability([None] * 4, [[(1.0, 5.0)], [(1.0, 3.0)], [(0.0, math.inf)], [(1.0, 4.0), (4.0, 6.0)]])
    index = OnlineIndex(avail, range(4))
    assert index.online() == [0, 1, 3] and index.next_change() == 1.0
    assert index.advance(2.0) == [(0, False), (1, False), (3, False)]
    assert index.count_online == 0 and index.next_online() == 3.0
    assert index.advance(6.0) == [(1, True), (0, True), (3, True)]
    with pytest.raises(ValueError):
        index.advance(5.0)


def _index_steps(n: int) -> tuple[int, list]:
    """Steps to follow 10 churning devices for 2,000 s among ``n`` always-on ones."""
    base: list = [None] * n
    for d in range(10):
        base[d] = MarkovTimeline(20.0, 10.0, stream(3, "availability", d))
    index = OnlineIndex(Availability(base), range(n))
    start = index.steps
    seen = []
    for k in range(1, 2001):
        seen.extend(index.advance(float(k)))
        seen.append((index.count_online, index.next_online()))
    return index.steps - start, seen


def test_online_index_work_follows_the_changes_not_the_population():
    s1, seen1 = _index_steps(1000)
    s10, seen10 = _index_steps(10000)
    changes = sum(1 for x in seen1 if isinstance(x[1], bool))
    assert 1000 < changes < 2000             # 10 devices, a 30 s cycle, 2,000 s: about 1,330
    assert [x if isinstance(x[1], bool) else x[1] for x in seen1] == [
        x if isinstance(x[1], bool) else x[1] for x in seen10]
    assert s1 == s10 <= 2 * changes + 20
