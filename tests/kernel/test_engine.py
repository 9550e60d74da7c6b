"""The event engine: exact pop order, clock, ties, snapshots."""

import pytest

from hierfl.kernel.engine import Event, EventQueue, Priority


def test_exact_trace_time_then_priority_then_insertion():
    q = EventQueue()
    q.push(2.0, "c", {"i": 1})
    q.push(1.0, "b", priority=Priority.EVALUATE)
    q.push(1.0, "a", priority=Priority.ARRIVAL)
    q.push(1.0, "a2", priority=Priority.ARRIVAL)
    q.push(0.5, "z", priority=Priority.STOP)
    trace = []
    while len(q):
        e = q.pop()
        trace.append((e.time, e.kind, q.now))
    assert trace == [(0.5, "z", 0.5), (1.0, "a", 1.0), (1.0, "a2", 1.0), (1.0, "b", 1.0), (2.0, "c", 2.0)]


def test_push_after_is_relative_to_now_and_past_is_rejected():
    q = EventQueue()
    q.push(3.0, "x")
    q.pop()
    e = q.push_after(1.5, "y")
    assert e.time == 4.5
    with pytest.raises(ValueError, match="before now"):
        q.push(2.0, "late")
    with pytest.raises(ValueError, match="negative delay"):
        q.push_after(-1.0, "neg")
    with pytest.raises(ValueError):
        q.push(float("nan"), "nan")


def test_a_pickled_queue_keeps_order_counter_and_cancellations():
    # checkpoints pickle the queue with the run
    import pickle

    q = EventQueue()
    for t, k in [(5.0, "e"), (1.0, "a"), (1.0, "b"), (3.0, "c")]:
        q.push(t, k, {"k": k})
    q.cancel(q.push(2.0, "gone"))
    q.pop()
    r = pickle.loads(pickle.dumps(q))
    assert r.now == 1.0
    assert [r.pop().kind for _ in range(3)] == ["b", "c", "e"]
    assert r.push(9.0, "new").seq == 5  # the sequence counter continues


def test_pushed_events_equal_built_events_and_declare_the_driver_s_fields():
    """push builds the same events as the constructor: equal, hashed, ordered, printed and pickled
    alike, by ``(time, priority, seq)``; what the driver writes on an event is a declared field."""
    import pickle

    q = EventQueue()
    payload = {"device": 3}
    pushed = q.push(2.5, "train_done", payload, Priority.ARRIVAL)
    built = Event(2.5, Priority.ARRIVAL, 0, "train_done", {"device": 3})
    assert pushed == built and hash(pushed) == hash(built) and repr(pushed) == repr(built)
    assert pushed.payload is not payload            # a mapping payload is copied
    back = pickle.loads(pickle.dumps(pushed))
    assert back == built and back.payload == {"device": 3} and back.queued
    assert pushed < Event(2.5, Priority.ARRIVAL, 1, "a") and not pushed < built
    assert pushed.queued and not built.queued and pushed.transfer is None and pushed.device is None
    with pytest.raises(AttributeError):
        pushed.note = 1  # type: ignore[attr-defined]  # no undeclared attribute can be attached
    q.cancel(pushed)
    assert not pushed.queued and len(q) == 0
